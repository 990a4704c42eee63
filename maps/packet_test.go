package maps

import (
	"encoding/binary"
	"net/netip"
)

// TCP flags.
const (
	flagFIN = 0x01
	flagSYN = 0x02
	flagRST = 0x04
	flagPSH = 0x08
	flagACK = 0x10
)

// segment describes a TCP segment as the wire carries it.
type segment struct {
	src, dst netip.AddrPort
	seq, ack uint32
	flags    uint8
	payload  []byte
	tos      uint8 // IPv4 TOS / traffic class: the low two bits are ECN
}

// frame builds an Ethernet frame for BPF_PROG_TEST_RUN. Checksums are not
// filled: the data path does not read them.
func (s segment) frame() []byte {
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], s.src.Port())
	binary.BigEndian.PutUint16(tcp[2:], s.dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], s.seq)
	binary.BigEndian.PutUint32(tcp[8:], s.ack)
	tcp[12] = 5 << 4
	tcp[13] = s.flags
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	var l3 []byte
	eth := make([]byte, 14)
	copy(eth[0:6], []byte{2, 0, 0, 0, 0, 1})
	copy(eth[6:12], []byte{2, 0, 0, 0, 0, 2})
	if s.src.Addr().Is4() {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
		l3 = make([]byte, 20)
		l3[0] = 0x45
		l3[1] = s.tos
		binary.BigEndian.PutUint16(l3[2:], uint16(20+len(tcp)+len(s.payload)))
		l3[8] = 64
		l3[9] = 6
		src, dst := s.src.Addr().As4(), s.dst.Addr().As4()
		copy(l3[12:], src[:])
		copy(l3[16:], dst[:])
	} else {
		binary.BigEndian.PutUint16(eth[12:], 0x86dd)
		l3 = make([]byte, 40)
		l3[0] = 0x60
		binary.BigEndian.PutUint16(l3[4:], uint16(len(tcp)+len(s.payload)))
		l3[6] = 6
		l3[7] = 64
		src, dst := s.src.Addr().As16(), s.dst.Addr().As16()
		copy(l3[8:], src[:])
		copy(l3[24:], dst[:])
	}
	out := append(eth, l3...)
	out = append(out, tcp...)
	return append(out, s.payload...)
}

// skbContext is struct __sk_buff (uapi, 192 bytes) for test runs; only the
// fields a test sets or reads are named.
type skbContext struct {
	_        [8]uint32 // len .. vlan_proto
	Priority uint32
	_        [29]uint32 // ingress_ifindex .. flow_keys
	Tstamp   uint64
	_        [8]uint32 // wire_len .. hwtstamp
}

func netipPort(a netip.Addr, p uint16) netip.AddrPort { return netip.AddrPortFrom(a, p) }
