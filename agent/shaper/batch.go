package shaper

import (
	"errors"
	"fmt"
	"math"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// batch sends many tc requests in one sendmsg: the kernel runs the netlink
// messages of a buffer one after another, so 10,000 class changes cost a
// few dozen system calls instead of 10,000 round trips. Only the last
// request of a chunk asks for an acknowledgement; the kernel reports every
// failing request anyway, and the last acknowledgement says the chunk is done.
type batch struct {
	sock *nl.NetlinkSocket
	buf  []byte
	seqs []uint32
	errs []error
}

// batchChunk bounds one sendmsg, well inside the socket's send buffer.
const batchChunk = 32 << 10

// newBatchSocket opens the socket in the calling thread's namespace.
func newBatchSocket() (*nl.NetlinkSocket, error) {
	return nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
}

func (b *batch) add(req *nl.NetlinkRequest) error {
	msg := req.Serialize()
	if len(b.buf)+len(msg) > batchChunk {
		if err := b.flush(); err != nil {
			return err
		}
	}
	b.buf = append(b.buf, msg...)
	b.seqs = append(b.seqs, req.Seq)
	return nil
}

// flush sends the pending requests and waits for the last one's
// acknowledgement, collecting the errors of any that failed.
func (b *batch) flush() error {
	if len(b.seqs) == 0 {
		return nil
	}
	// The last message asks for an acknowledgement: set NLM_F_ACK in place.
	last := len(b.buf) - int(nl.NativeEndian().Uint32(b.buf[lastHeader(b.buf):]))
	flags := nl.NativeEndian().Uint16(b.buf[last+6:])
	nl.NativeEndian().PutUint16(b.buf[last+6:], flags|unix.NLM_F_ACK)
	want := b.seqs[len(b.seqs)-1]
	if err := unix.Sendto(b.sock.GetFd(), b.buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("send %d tc requests: %w", len(b.seqs), err)
	}
	b.buf, b.seqs = b.buf[:0], b.seqs[:0]
	for {
		msgs, _, err := b.sock.Receive()
		if err != nil {
			return fmt.Errorf("receive tc acknowledgements: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
				continue
			}
			if errno := int32(nl.NativeEndian().Uint32(m.Data)); errno != 0 {
				b.errs = append(b.errs, syscall.Errno(-errno))
			}
			if m.Header.Seq == want {
				return nil
			}
		}
	}
}

// lastHeader finds the offset of the last netlink message in buf.
func lastHeader(buf []byte) int {
	off, last := 0, 0
	for off+unix.NLMSG_HDRLEN <= len(buf) {
		last = off
		n := int(nl.NativeEndian().Uint32(buf[off:]))
		off += (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
	}
	return last
}

func (b *batch) err() error {
	if len(b.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%d tc requests failed: %w", len(b.errs), errors.Join(b.errs...))
}

// classChange is RTM_NEWTCLASS for an existing HTB class at a new rate.
// The rate tables older tc versions sent are left out: the kernel does not
// need them when the rate spec names its link layer.
func classChange(c *netlink.HtbClass) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(unix.RTM_NEWTCLASS, 0)
	a := c.Attrs()
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(a.LinkIndex), Handle: a.Handle, Parent: a.Parent})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("htb")))
	opt := nl.TcHtbCopt{
		Rate:    nl.TcRateSpec{Rate: uint32(min(c.Rate, math.MaxUint32)), Linklayer: nl.LINKLAYER_ETHERNET},
		Ceil:    nl.TcRateSpec{Rate: uint32(min(c.Ceil, math.MaxUint32)), Linklayer: nl.LINKLAYER_ETHERNET},
		Buffer:  c.Buffer,
		Cbuffer: c.Cbuffer,
		Quantum: c.Quantum,
	}
	options := nl.NewRtAttr(nl.TCA_OPTIONS, nil)
	options.AddRtAttr(nl.TCA_HTB_PARMS, opt.Serialize())
	if c.Rate >= math.MaxUint32 {
		options.AddRtAttr(nl.TCA_HTB_RATE64, nl.Uint64Attr(c.Rate))
	}
	if c.Ceil >= math.MaxUint32 {
		options.AddRtAttr(nl.TCA_HTB_CEIL64, nl.Uint64Attr(c.Ceil))
	}
	req.AddData(options)
	return req
}

// request returns the bfifo's RTM_NEWQDISC (create or change its limit).
func (q bfifo) request(flags int) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(unix.RTM_NEWQDISC, flags)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(q.ifindex), Handle: q.handle, Parent: q.parent})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("bfifo")))
	req.AddData(nl.NewRtAttr(nl.TCA_OPTIONS, nl.Uint32Attr(q.limit)))
	return req
}
