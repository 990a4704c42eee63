package harness

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/internal/netns"
)

// Raw TCP for scenarios that forge segments (spoofed RST and FIN) and
// count what arrives: a builder of IPv4 TCP segments with valid
// checksums, a sender (a raw socket in the client namespace), and a
// capture on a device (a packet socket, as tcpdump: it sees each frame as
// the device receives it, before tc ingress and so before sluice).

// TCP flags.
const (
	TCPFin = 0x01
	TCPSyn = 0x02
	TCPRst = 0x04
	TCPPsh = 0x08
	TCPAck = 0x10
)

// TCPSegment builds an IPv4 TCP segment without payload or options, with
// valid IP and TCP checksums.
func TCPSegment(src, dst netip.AddrPort, seq, ack uint32, flags uint8, window uint16) []byte {
	be := binary.BigEndian
	pkt := make([]byte, 40)
	ip, tcp := pkt[:20], pkt[20:]
	ip[0], ip[8], ip[9] = 0x45, 64, syscall.IPPROTO_TCP
	be.PutUint16(ip[2:], 40)
	be.PutUint16(ip[4:], uint16(seq)) // an id
	be.PutUint16(ip[6:], 0x4000)      // DF
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	be.PutUint16(ip[10:], checksum(0, ip))
	be.PutUint16(tcp[0:], src.Port())
	be.PutUint16(tcp[2:], dst.Port())
	be.PutUint32(tcp[4:], seq)
	be.PutUint32(tcp[8:], ack)
	tcp[12] = 5 << 4
	tcp[13] = flags
	be.PutUint16(tcp[14:], window)
	// Pseudo-header, then the segment.
	var pseudo [12]byte
	copy(pseudo[0:], s[:])
	copy(pseudo[4:], d[:])
	pseudo[9] = syscall.IPPROTO_TCP
	be.PutUint16(pseudo[10:], uint16(len(tcp)))
	be.PutUint16(tcp[16:], checksum(sum16(0, pseudo[:]), tcp))
	return pkt
}

func sum16(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

func checksum(sum uint32, b []byte) uint16 {
	sum = sum16(sum, b)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// SendFromClient sends raw IPv4 packets (built with TCPSegment) from the
// client namespace through a raw socket (IPPROTO_RAW: the packets go out
// as built), every gap apart. It returns how many the kernel took.
func (w *World) SendFromClient(pkts [][]byte, gap time.Duration) (int, error) {
	var fd int
	err := w.Pair.Client.Do(func() error {
		var err error
		fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("raw socket in the client namespace: %w", err)
	}
	defer syscall.Close(fd)
	sent := 0
	for i, pkt := range pkts {
		if i > 0 && gap > 0 {
			time.Sleep(gap) // the pacing asked for
		}
		var to syscall.SockaddrInet4
		copy(to.Addr[:], pkt[16:20])
		if err := syscall.Sendto(fd, pkt, 0, &to); err != nil {
			return sent, fmt.Errorf("send raw packet %d: %w", i, err)
		}
		sent++
	}
	return sent, nil
}

// Segment is one captured IPv4 TCP segment's headers.
type Segment struct {
	Src, Dst netip.AddrPort
	Seq, Ack uint32
	Flags    uint8
	Payload  int  // payload bytes (the IP total length less the headers)
	Outgoing bool // sent by this host, not received
	At       time.Time
}

// Capture reads IPv4 TCP segments on one device of a namespace.
type Capture struct {
	fd     int
	closed atomic.Bool
}

// CaptureTCP opens a capture of the IPv4 TCP segments a device receives
// and sends, inside a namespace. With flagMask set, only segments carrying
// one of those flags are taken (a socket filter in the kernel, so a busy
// connection costs nothing); 0 takes every segment. Only headers are kept.
func CaptureTCP(ns *netns.NS, dev string, flagMask uint8) (*Capture, error) {
	if flagMask == 0 {
		flagMask = 0xff
	}
	const snap = 128
	// A classic BPF filter over the network packet (SOCK_DGRAM: no link
	// header): IPv4, TCP, then any of the flags; keep the first snap bytes.
	filter := []unix.SockFilter{
		{Code: 0x28, K: 0xfffff000},                     // ldh [proto] (SKF_AD_PROTOCOL)
		{Code: 0x15, Jt: 0, Jf: 6, K: 0x800},            // jeq #ETH_P_IP
		{Code: 0x30, K: 9},                              // ldb [9]: protocol
		{Code: 0x15, Jt: 0, Jf: 4, K: 6},                // jeq #6 (TCP)
		{Code: 0xb1, K: 0},                              // ldxb 4*([0]&0xf): IP header length
		{Code: 0x50, K: 13},                             // ldb [x+13]: TCP flags
		{Code: 0x45, Jt: 0, Jf: 1, K: uint32(flagMask)}, // jset
		{Code: 0x06, K: snap},                           // ret #snap
		{Code: 0x06, K: 0},                              // ret #0
	}
	idx, err := ns.Index(dev)
	if err != nil {
		return nil, fmt.Errorf("capture on %s in %s: %w", dev, ns.Name, err)
	}
	var fd int
	err = ns.Do(func() error {
		var err error
		// Protocol 0 receives nothing until bound: the filter is in place
		// before the first packet.
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
			unix.Close(fd)
			return fmt.Errorf("attach filter: %w", err)
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
		tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		// ETH_P_ALL: a socket bound to one protocol sees only what arrives;
		// every protocol's sockets see what the device sends too.
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: idx}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind to %s: %w", dev, err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("capture on %s in %s: %w", dev, ns.Name, err)
	}
	return &Capture{fd: fd}, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// ErrCaptureTimeout: no segment in time.
var ErrCaptureTimeout = errors.New("capture: no segment in time")

// Next returns the next segment, waiting until the deadline.
func (c *Capture) Next(deadline time.Time) (Segment, error) {
	buf := make([]byte, 256)
	for {
		if c.closed.Load() {
			return Segment{}, errors.New("capture closed")
		}
		n, from, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				if time.Now().After(deadline) {
					return Segment{}, ErrCaptureTimeout
				}
				continue
			}
			return Segment{}, err
		}
		s, ok := parseSegment(buf[:n])
		if !ok {
			if time.Now().After(deadline) {
				return Segment{}, ErrCaptureTimeout
			}
			continue
		}
		s.At = time.Now()
		if ll, ok := from.(*unix.SockaddrLinklayer); ok {
			s.Outgoing = ll.Pkttype == unix.PACKET_OUTGOING
		}
		return s, nil
	}
}

// Close ends the capture.
func (c *Capture) Close() {
	if !c.closed.Swap(true) {
		unix.Close(c.fd)
	}
}

func parseSegment(b []byte) (Segment, bool) {
	be := binary.BigEndian
	if len(b) < 20 || b[0]>>4 != 4 || b[9] != syscall.IPPROTO_TCP {
		return Segment{}, false
	}
	ihl := int(b[0]&0xf) * 4
	if len(b) < ihl+20 {
		return Segment{}, false
	}
	tcp := b[ihl:]
	doff := int(tcp[12]>>4) * 4
	total := int(be.Uint16(b[2:]))
	src := netip.AddrFrom4([4]byte(b[12:16]))
	dst := netip.AddrFrom4([4]byte(b[16:20]))
	return Segment{
		Src:     netip.AddrPortFrom(src, be.Uint16(tcp[0:])),
		Dst:     netip.AddrPortFrom(dst, be.Uint16(tcp[2:])),
		Seq:     be.Uint32(tcp[4:]),
		Ack:     be.Uint32(tcp[8:]),
		Flags:   tcp[13],
		Payload: max(0, total-ihl-doff),
	}, true
}

// BrokerTCPCounters reads the broker namespace's TCP counters from the
// kernel (/proc/net/snmp's Tcp and /proc/net/netstat's TcpExt lines), named
// as nstat names them: TcpEstabResets, TcpExtTCPChallengeACK, ...
func (w *World) BrokerTCPCounters() (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, f := range []string{"/proc/net/snmp", "/proc/net/netstat"} {
		data, err := exec.Command("ip", "netns", "exec", w.Pair.Broker.Name, "cat", f).Output()
		if err != nil {
			return nil, fmt.Errorf("read %s in the broker namespace: %w", f, err)
		}
		var names []string
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			if len(fields) == 0 || (fields[0] != "Tcp:" && fields[0] != "TcpExt:") {
				names = nil
				continue
			}
			if names == nil || names[0] != fields[0] {
				names = fields
				continue
			}
			prefix := strings.TrimSuffix(fields[0], ":")
			for i := 1; i < len(fields) && i < len(names); i++ {
				if v, err := strconv.ParseUint(fields[i], 10, 64); err == nil {
					out[prefix+names[i]] = v
				}
			}
			names = nil
		}
	}
	return out, nil
}
