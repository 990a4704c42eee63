package maps

import (
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// tcpRecvQueue is TCP_RECV_QUEUE (uapi linux/tcp.h): TCP_QUEUE_SEQ then
// reads the receive side's sequence number, rcv_nxt.
const tcpRecvQueue = 1

// loopbackConn is a real TCP connection over loopback: the data path's
// socket lookup finds its accepting (broker) side, whose rcv_nxt the test
// reads. Segments the test runs through the programs never reach it.
type loopbackConn struct {
	client, broker *net.TCPConn
	peer, local    netip.AddrPort // the client's side and the broker's
}

// dialLoopback connects to a listener on listen from dial (the same
// address, or IPv4 loopback to a dual-stack listener on ::, as a JVM
// broker listens).
func dialLoopback(t *testing.T, listen, dial netip.Addr) *loopbackConn {
	t.Helper()
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(listen, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() }) // open: a lookup of another 4-tuple finds it
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	client, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(netip.AddrPortFrom(dial, port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	broker, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Close() })
	// A dual-stack socket names IPv4 peers v4-mapped; the wire carries IPv4.
	unmapped := func(a net.Addr) netip.AddrPort {
		ap := a.(*net.TCPAddr).AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return &loopbackConn{client: client, broker: broker, peer: unmapped(broker.RemoteAddr()), local: unmapped(broker.LocalAddr())}
}

// deliver sends data from the client and reads it at the broker, so that
// the broker's socket has taken every byte (its rcv_nxt is past them).
func (c *loopbackConn) deliver(t *testing.T, data []byte) {
	t.Helper()
	if _, err := c.client.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c.broker, make([]byte, len(data))); err != nil {
		t.Fatal(err)
	}
}

// rcvNxt reads the next byte the broker's socket expects, through TCP
// repair mode (CAP_NET_ADMIN), left again without a window probe.
func (c *loopbackConn) rcvNxt(t *testing.T) uint32 {
	t.Helper()
	raw, err := c.broker.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var seq int
	var opErr error
	err = raw.Control(func(fd uintptr) {
		s := int(fd)
		if opErr = unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_REPAIR, 1); opErr != nil {
			return
		}
		defer unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_REPAIR, unix.TCP_REPAIR_OFF_NO_WP)
		if opErr = unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_REPAIR_QUEUE, tcpRecvQueue); opErr != nil {
			return
		}
		seq, opErr = unix.GetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_QUEUE_SEQ)
	})
	if err != nil || opErr != nil {
		t.Fatalf("read rcv_nxt: %v %v", err, opErr)
	}
	return uint32(seq)
}

// key is the connection as the data path names it.
func (c *loopbackConn) key() ConnKey { return ConnKey{Peer: c.peer, Local: c.local} }

func (c *loopbackConn) toBroker(seq uint32, flags uint8, payload []byte) segment {
	return segment{src: c.peer, dst: c.local, seq: seq, flags: flags, payload: payload}
}

// enter plays the connection's opening through the programs (as
// harness.handshake does on the broker's port): the broker's ACK enters it
// with request tracking at next, and the agent binds it to entity 5 both
// ways.
func (c *loopbackConn) enter(h *harness, next uint32) {
	h.t.Helper()
	if err := h.d.SetListeners([]uint16{c.local.Port()}); err != nil {
		h.t.Fatal(err)
	}
	h.run(Produce, segment{src: c.peer, dst: c.local, seq: next - 1, flags: flagSYN})
	h.run(Fetch, segment{src: c.local, dst: c.peer, seq: 7, ack: next, flags: flagSYN | flagACK})
	h.run(Produce, segment{src: c.peer, dst: c.local, seq: next, ack: 8, flags: flagACK})
	h.run(Fetch, segment{src: c.local, dst: c.peer, seq: 8, ack: next, flags: flagACK})
	if err := h.d.BindConns([]Binding{{Conn: c.key(), Produce: 5, Fetch: 5}}); err != nil {
		h.t.Fatal(err)
	}
}

// loopbacks are the address families the reset tests run in: the broker
// listening on the client's address family, or on a dual-stack socket
// (IPv4 connections held by IPv6 sockets, v4-mapped, as a JVM's are).
var loopbacks = []struct {
	name           string
	listen, client netip.Addr
}{
	{"v4", netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.1")},
	{"v6", netip.IPv6Loopback(), netip.IPv6Loopback()},
	{"v4-to-dual-stack", netip.IPv6Unspecified(), netip.MustParseAddr("127.0.0.1")},
}

// rstOffsets are where, relative to the next byte the broker expects, the
// reset tests put a client's RST: a stride through ±2 MiB, the byte's
// neighbours, 1000 behind, and both edges of the window an earlier rule
// took (1 MiB behind to 64 KiB ahead). 0 is not among them.
func rstOffsets() []int64 {
	var offs []int64
	for off := int64(-2 << 20); off <= 2<<20; off += 4093 {
		offs = append(offs, off)
	}
	offs = append(offs, -1, 1, -1000, -(1 << 20), -(1<<20)-1, 1<<16, 1<<16+1, -2<<20, 2<<20)
	slices.Sort(offs)
	offs = slices.Compact(offs)
	return slices.DeleteFunc(offs, func(off int64) bool { return off == 0 })
}

// A client's RST ends its connection only at exactly the next byte the
// broker's kernel expects, as Linux takes a RST (RFC 5961): across ±2 MiB
// of it, every other sequence number (1000 behind, which an earlier rule
// took, included) leaves the entry and its binding alone; the exact one
// marks it closing for the agent to reclaim.
func TestClientRSTEndsConnectionOnlyAtNextByte(t *testing.T) {
	for _, f := range loopbacks {
		t.Run(f.name, func(t *testing.T) {
			h := newHarness(t, testOptions())
			c := dialLoopback(t, f.listen, f.client)
			req := kafkaRequests()[0]
			c.deliver(t, req)
			next := c.rcvNxt(t)
			c.enter(h, next-uint32(len(req)))
			h.run(Produce, c.toBroker(next-uint32(len(req)), flagACK|flagPSH, req))

			offs := rstOffsets()
			for _, off := range offs {
				flags := uint8(flagRST)
				if off%2 != 0 {
					flags |= flagACK
				}
				h.run(Produce, c.toBroker(next+uint32(off), flags, nil))
				if h.closing(c.key()) {
					t.Fatalf("a RST %d bytes from the next byte ended the connection", off)
				}
			}
			h.run(Produce, c.toBroker(next, flagRST, nil))
			if !h.closing(c.key()) {
				t.Errorf("a RST at the next byte (after %d at other offsets) left the connection open", len(offs))
			}
			if b, ok, _ := h.d.Binding(c.key()); !ok || b.Produce != 5 || b.Fetch != 5 {
				t.Errorf("binding %+v %v, want entity 5 both ways until the agent reclaims it", b, ok)
			}
		})
	}
}

// Where request tracking and the broker's socket disagree on the next
// byte, or either does not know it, a client's RST changes nothing, even
// at the byte one of them names: each would let a client detach its own
// live connection (its socket ignores the RST) under a rule that asked
// only the other.
func TestClientRSTNeedsStreamAndSocketToAgree(t *testing.T) {
	req := kafkaRequests()[1] // a produce request
	cases := []struct {
		name string
		// play runs the connection's bytes through the socket and the
		// programs, and returns the RST's sequence number.
		play func(t *testing.T, h *harness, c *loopbackConn) uint32
	}{
		{"no payload followed yet (at the broker's acknowledgement)", func(t *testing.T, h *harness, c *loopbackConn) uint32 {
			c.deliver(t, req)
			next := c.rcvNxt(t)
			c.enter(h, next)
			return next
		}},
		{"bytes the socket has not taken (the shaper holds them), at the stream's end", func(t *testing.T, h *harness, c *loopbackConn) uint32 {
			next := c.rcvNxt(t)
			c.enter(h, next)
			h.run(Produce, c.toBroker(next, flagACK|flagPSH, req))
			return next + uint32(len(req))
		}},
		{"bytes the socket has not taken (the shaper holds them), at the socket's next byte", func(t *testing.T, h *harness, c *loopbackConn) uint32 {
			c.deliver(t, req)
			next := c.rcvNxt(t)
			c.enter(h, next-uint32(len(req)))
			h.run(Produce, c.toBroker(next-uint32(len(req)), flagACK|flagPSH, req))
			h.run(Produce, c.toBroker(next, flagACK|flagPSH, req))
			return next
		}},
		{"the middle of a request", func(t *testing.T, h *harness, c *loopbackConn) uint32 {
			c.deliver(t, req[:40])
			next := c.rcvNxt(t)
			c.enter(h, next-40)
			h.run(Produce, c.toBroker(next-40, flagACK|flagPSH, req[:40]))
			return next
		}},
		{"a stream that just found its position again (bytes before it not followed)", func(t *testing.T, h *harness, c *loopbackConn) uint32 {
			junk := make([]byte, 64) // size field 0: no request
			c.deliver(t, append(append([]byte{}, junk...), req...))
			next := c.rcvNxt(t)
			start := next - uint32(len(junk)+len(req))
			c.enter(h, start)
			h.run(Produce, c.toBroker(start, flagACK|flagPSH, junk))
			h.run(Produce, c.toBroker(start+64, flagACK|flagPSH, req)) // begins with a request: found
			return next
		}},
		{"a stream that lost its position", func(t *testing.T, h *harness, c *loopbackConn) uint32 {
			junk := make([]byte, 64) // size field 0: no request
			c.deliver(t, junk)
			next := c.rcvNxt(t)
			c.enter(h, next-64)
			h.run(Produce, c.toBroker(next-64, flagACK|flagPSH, junk))
			return next
		}},
	}
	for _, f := range loopbacks {
		t.Run(f.name, func(t *testing.T) {
			h := newHarness(t, testOptions())
			for _, tc := range cases {
				c := dialLoopback(t, f.listen, f.client)
				seq := tc.play(t, h, c)
				h.run(Produce, c.toBroker(seq, flagRST, nil))
				if h.closing(c.key()) {
					t.Errorf("%s: a RST ended the connection", tc.name)
				}
			}
		})
	}
}

// The broker's socket is the one of the segment's own 4-tuple: on a
// 4-tuple the kernel holds no connection for, the lookup finds the broker's
// listener, whose rcv_nxt (0) is no next byte, and a RST there changes
// nothing even where the stream stands at 0.
func TestClientRSTWhereOnlyTheListenerMatchesChangesNothing(t *testing.T) {
	h := newHarness(t, testOptions())
	v4 := netip.MustParseAddr("127.0.0.1")
	c := dialLoopback(t, v4, v4)
	other := &loopbackConn{peer: netip.AddrPortFrom(c.peer.Addr(), c.peer.Port()+1), local: c.local}
	req := kafkaRequests()[0]
	start := -uint32(len(req)) // the stream stands at 0 after req
	other.enter(h, start)
	h.run(Produce, other.toBroker(start, flagACK|flagPSH, req))
	h.run(Produce, other.toBroker(0, flagRST, nil))
	if h.closing(other.key()) {
		t.Errorf("a RST on %v, which only the listener matches, ended its entry", other.key())
	}
}
