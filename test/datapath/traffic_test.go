// Package datapath_test pushes real TCP traffic through the data path in
// network namespaces and checks what it counted.
package datapath_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

// attached loads the data path and attaches it to the broker's veth.
func attached(t testing.TB, pair *netns.Pair, mode attach.Mode) *maps.Datapath {
	t.Helper()
	d := loaded(t)
	attachTo(t, pair.Broker, pair.BrokerDev, d, mode)
	return d
}

// loaded loads the data path with listener 9092, counting only, and
// closes it when the test ends.
func loaded(t testing.TB) *maps.Datapath {
	t.Helper()
	opts := maps.DefaultOptions()
	opts.MaxEntities = 1024
	opts.MaxConnections = 16384
	d, err := maps.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.SetListeners([]uint16{9092}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetSettings(maps.Settings{Shaper: maps.ShaperNone, StaleAfter: 10 * time.Second, SamplesPerSecond: 200}); err != nil {
		t.Fatal(err)
	}
	return d
}

// attachTo attaches the data path to a device in the namespace, detached
// when the test ends; it returns the device's index.
func attachTo(t testing.TB, ns *netns.NS, dev string, d *maps.Datapath, mode attach.Mode) int {
	t.Helper()
	idx, err := ns.Index(dev)
	if err != nil {
		t.Fatal(err)
	}
	var a *attach.Attachment
	if err := ns.Do(func() (err error) {
		a, err = attach.Attach(idx, d.IngressProgram(), d.EgressProgram(), mode)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Do(a.Detach); err != nil {
			t.Errorf("detach: %v", err)
		}
	})
	return idx
}

// echo serves each connection: read n bytes, write n bytes back, then
// report the payload bytes TCP retransmitted, keyed by the client's port.
func echo(l net.Listener, n int64, retrans chan<- [2]uint64) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.CopyN(io.Discard, c, n); err != nil {
					return
				}
				io.CopyN(c, zeros{}, n)
				// Wait for the client to finish reading (it closes), so every
				// retransmission is over before TCP_INFO is read.
				c.Read(make([]byte, 1))
				port := uint64(c.RemoteAddr().(*net.TCPAddr).Port)
				retrans <- [2]uint64{port, bytesRetransmitted(c)}
			}()
		}
	}()
}

// bytesRetransmitted is the payload TCP resent on a connection: it crossed
// the NIC twice, and the data path rightly counted it twice.
func bytesRetransmitted(c net.Conn) uint64 {
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return 0
	}
	var info *unix.TCPInfo
	raw.Control(func(fd uintptr) { info, _ = unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO) })
	if info == nil {
		return 0
	}
	return info.Bytes_retrans
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestAttributionRealTrafficCountersExact(t *testing.T) {
	for _, mode := range []attach.Mode{attach.TCX, attach.Legacy} {
		t.Run(mode.String(), func(t *testing.T) { realTraffic(t, mode) })
	}
}

func realTraffic(t *testing.T, mode attach.Mode) {
	netns.RequireRoot(t, "builds network namespaces and loads BPF programs")
	pair := netns.NewPair(t)
	d := attached(t, pair, mode)
	broker := netip.AddrPortFrom(pair.BrokerIP, 9092)
	l, err := pair.Broker.Listen(broker.String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const perConn = 128 << 20 // 4 connections × 2 directions × 128 MiB = 1 GiB
	serverRetrans := make(chan [2]uint64, 8)
	echo(l, perConn, serverRetrans)

	type conn struct {
		c              net.Conn
		produce, fetch uint32 // 0: left unbound
	}
	conns := []conn{{produce: 5, fetch: 6}, {produce: 7, fetch: 7}, {}, {}}
	var bindings []maps.Binding
	for i := range conns {
		c, err := pair.Client.Dial(broker.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i].c = c
		if conns[i].produce != 0 {
			peer := c.LocalAddr().(*net.TCPAddr).AddrPort()
			bindings = append(bindings, maps.Binding{Conn: maps.ConnKey{Peer: netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port()), Local: broker}, Produce: conns[i].produce, Fetch: conns[i].fetch})
		}
	}
	if err := d.BindConns(bindings); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute) // bound the load in time as well as size
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	clientRetrans := make([]uint64, len(conns))
	for i, cn := range conns {
		wg.Add(1)
		go func(i int, c net.Conn) {
			defer wg.Done()
			c.SetDeadline(deadline)
			if _, err := io.CopyN(c, zeros{}, perConn); err != nil {
				errs <- fmt.Errorf("send: %w", err)
				return
			}
			if _, err := io.CopyN(io.Discard, c, perConn); err != nil {
				errs <- fmt.Errorf("receive: %w", err)
			}
			clientRetrans[i] = bytesRetransmitted(c)
			c.Close()
		}(i, cn.c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	byPort := map[uint64]uint64{}
	for range conns {
		r := <-serverRetrans
		byPort[r[0]] = r[1]
	}

	// What TCP put on the wire per entity: the application's bytes plus the
	// sender's retransmissions (the client's for produce, the broker's for fetch).
	want := [2]map[uint32]uint64{{}, {}}
	var retransmitted uint64
	for i, cn := range conns {
		port := uint64(cn.c.LocalAddr().(*net.TCPAddr).Port)
		want[0][cn.produce] += perConn + clientRetrans[i]
		want[1][cn.fetch] += perConn + byPort[port]
		retransmitted += clientRetrans[i] + byPort[port]
	}
	t.Logf("TCP retransmitted %d payload bytes (%.4f%% of the traffic)", retransmitted, 100*float64(retransmitted)/float64(8*perConn))
	var total uint64
	for dir, entities := range want {
		for e, bytes := range entities {
			got, err := d.EntityCounters(maps.Direction(dir), e)
			if err != nil {
				t.Fatal(err)
			}
			diff := float64(got.Bytes) - float64(bytes)
			if diff < -0.001*float64(bytes) || diff > 0.001*float64(bytes) {
				t.Errorf("direction %d entity %d: counted %d bytes, TCP sent %d (%+.4f%%)", dir, e, got.Bytes, bytes, 100*diff/float64(bytes))
			}
			total += got.Bytes
			t.Logf("direction %d entity %d: counted %d of %d bytes TCP sent (%+.4f%%), %d segments", dir, e, got.Bytes, bytes, 100*diff/float64(bytes), got.Packets)
		}
	}
	t.Logf("%.2f GiB counted through %s", float64(total)/(1<<30), mode)
}
