package harness

import (
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/internal/netns"
)

// ListenerMeter reads the kernel's tcp_info of every connection to some
// local ports of one network namespace through sock_diag, in process: a
// reading takes well under a millisecond, so windows of 100 ms stay 100 ms.
type ListenerMeter struct {
	h *netlink.Handle
}

// NewListenerMeter opens a sock_diag socket inside ns.
func NewListenerMeter(ns *netns.NS) (*ListenerMeter, error) {
	var h *netlink.Handle
	err := ns.Do(func() (err error) {
		h, err = netlink.NewHandle(unix.NETLINK_SOCK_DIAG)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sock_diag in %s: %w", ns.Name, err)
	}
	return &ListenerMeter{h: h}, nil
}

// Totals sums, per local port, the counters of every TCP connection to
// it (IPv4 and IPv6): bytes received (produce) and bytes the peer acknowledged (fetch).
// at is the middle of the reading. Connections that closed are not in it.
func (m *ListenerMeter) Totals(ports ...uint16) (totals map[uint16]SocketCounts, at time.Time, err error) {
	socks, at, err := m.read()
	if err != nil {
		return nil, time.Time{}, err
	}
	want := map[uint16]bool{}
	for _, p := range ports {
		want[p] = true
	}
	totals = map[uint16]SocketCounts{}
	for _, s := range socks {
		if !want[s.InetDiagMsg.ID.SourcePort] {
			continue
		}
		t := totals[s.InetDiagMsg.ID.SourcePort]
		t.Received += s.TCPInfo.Bytes_received
		t.Acked += s.TCPInfo.Bytes_acked
		t.Sent += s.TCPInfo.Bytes_sent
		totals[s.InetDiagMsg.ID.SourcePort] = t
	}
	return totals, at, nil
}

// Peers reads every connection to one local port, keyed by the peer's
// port; at is the middle of the reading.
func (m *ListenerMeter) Peers(port uint16) (peers map[uint16]SocketCounts, at time.Time, err error) {
	socks, at, err := m.read()
	if err != nil {
		return nil, time.Time{}, err
	}
	peers = map[uint16]SocketCounts{}
	for _, s := range socks {
		if s.InetDiagMsg.ID.SourcePort == port {
			peers[s.InetDiagMsg.ID.DestinationPort] = SocketCounts{Received: s.TCPInfo.Bytes_received, Acked: s.TCPInfo.Bytes_acked, Sent: s.TCPInfo.Bytes_sent}
		}
	}
	return peers, at, nil
}

// read takes every TCP socket's tcp_info (IPv4 and IPv6: servers listening
// on [::] hold IPv4 peers in IPv6 sockets), timed by the middle of the
// reading.
func (m *ListenerMeter) read() ([]*netlink.InetDiagTCPInfoResp, time.Time, error) {
	before := time.Now()
	socks, err := m.h.SocketDiagTCPInfo(unix.AF_INET)
	if err == nil {
		var six []*netlink.InetDiagTCPInfoResp
		six, err = m.h.SocketDiagTCPInfo(unix.AF_INET6)
		socks = append(socks, six...)
	}
	after := time.Now()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("sock_diag: %w", err)
	}
	kept := socks[:0]
	for _, s := range socks {
		if s.InetDiagMsg != nil && s.TCPInfo != nil {
			kept = append(kept, s)
		}
	}
	return kept, before.Add(after.Sub(before) / 2), nil
}

// Close closes the socket.
func (m *ListenerMeter) Close() { m.h.Close() }
