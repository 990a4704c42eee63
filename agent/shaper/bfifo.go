package shaper

import (
	"fmt"

	"github.com/vishvananda/netlink/nl"
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
	req := nl.NewNetlinkRequest(unix.RTM_NEWQDISC, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(q.ifindex), Handle: q.handle, Parent: q.parent})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("bfifo")))
	req.AddData(nl.NewRtAttr(nl.TCA_OPTIONS, nl.Uint32Attr(q.limit)))
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("bfifo %x: limit %d: %w", q.handle>>16, q.limit, err)
	}
	return nil
}
