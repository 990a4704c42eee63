package harness

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"syscall"
	"time"
)

// SYNFlood sends count spoofed SYNs to the broker's port 9092 from the
// client namespace, spread evenly over d: sources spread over
// 198.18.0.10–250 (addresses nobody holds) and random ports. It returns
// how many it sent (fewer if the machine cannot keep up within d). A raw socket (IPPROTO_RAW) made inside the namespace
// keeps sending there.
func (w *World) SYNFlood(count int, d time.Duration) (int, error) {
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
	dst := w.Pair.BrokerIP.As4()
	to := &syscall.SockaddrInet4{Addr: dst}
	r := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	deadline := start.Add(d)
	sent := 0
	for sent < count && time.Now().Before(deadline) {
		if sent%256 == 0 {
			// Paced: the flood lasts the whole window.
			if ahead := time.Duration(float64(sent)/float64(count)*float64(d)) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
		src := netip.AddrFrom4([4]byte{198, 18, 0, byte(10 + r.IntN(241))})
		pkt := synPacket(src, w.Pair.BrokerIP, uint16(1024+r.IntN(60000)), 9092, r.Uint32())
		if err := syscall.Sendto(fd, pkt, 0, to); err != nil {
			if err == syscall.ENOBUFS || err == syscall.EAGAIN {
				continue
			}
			return sent, fmt.Errorf("send spoofed SYN: %w", err)
		}
		sent++
	}
	return sent, nil
}

// synPacket builds an IPv4 TCP SYN with a valid TCP checksum (the kernel
// fills in the IP header's checksum and length for a raw socket).
func synPacket(src, dst netip.Addr, sport, dport uint16, seq uint32) []byte {
	be := binary.BigEndian
	pkt := make([]byte, 40)
	ip, tcp := pkt[:20], pkt[20:]
	ip[0], ip[8], ip[9] = 0x45, 64, syscall.IPPROTO_TCP
	be.PutUint16(ip[2:], 40)
	s, d := src.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	be.PutUint16(tcp[0:], sport)
	be.PutUint16(tcp[2:], dport)
	be.PutUint32(tcp[4:], seq)
	tcp[12] = 5 << 4
	tcp[13] = 0x02 // SYN
	be.PutUint16(tcp[14:], 64240)
	// Checksum over the pseudo-header and the segment.
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(be.Uint16(b[i:]))
		}
	}
	add(s[:])
	add(d[:])
	sum += syscall.IPPROTO_TCP + 20
	add(tcp)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	be.PutUint16(tcp[16:], ^uint16(sum))
	return pkt
}
