package shaper

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// bfifo is a byte-limited FIFO leaf. vishvananda/netlink has no bfifo
// type, so it is sent as a raw RTM_NEWQDISC with struct tc_fifo_qopt
// (one u32: the limit in bytes).
type bfifo struct {
	ifindex int
	handle  uint32
	parent  uint32
	limit   uint32
}

// replace creates the qdisc or updates its limit (NLM_F_CREATE|NLM_F_REPLACE).
func (q bfifo) replace() error {
	req := q.request(unix.NLM_F_CREATE | unix.NLM_F_REPLACE | unix.NLM_F_ACK)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("bfifo %x: limit %d: %w", q.handle>>16, q.limit, err)
	}
	return nil
}
