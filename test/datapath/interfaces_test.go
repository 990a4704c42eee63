package datapath_test

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/agent/shaper"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

// One entity with a connection on each of two interfaces is held to its
// one limit in each direction: htb on several interfaces is one tree per
// direction for the host, so spreading connections over interfaces gains
// nothing. Judged by the bytes the receiving application read and its
// clock; the data path's counters must match what TCP sent exactly, so the
// egress segments' second pass (out of the shared IFB) is not counted again.
// Under htb+police (produce_shaper: police) fetch is steered the same way;
// only fetch is judged there (produce is police's, TestPolice…).
func TestHTBSeveralInterfacesOneLimit(t *testing.T) {
	for _, mode := range []attach.Mode{attach.TCX, attach.Legacy} {
		t.Run(mode.String(), func(t *testing.T) { severalInterfaces(t, mode, maps.ShaperHTB) })
	}
	t.Run("tcx-htb+police", func(t *testing.T) { severalInterfaces(t, attach.TCX, maps.ShaperHTBPolice) })
}

func severalInterfaces(t *testing.T, mode attach.Mode, shaperMode maps.Shaper) {
	netns.RequireRoot(t, "builds network namespaces, IFB devices and loads BPF programs")
	pair := netns.NewPair(t)
	secondBroker, secondClient := pair.BrokerDev+"x", pair.ClientDev+"x"
	if err := netns.Veth(pair.Broker, secondBroker, netip.MustParsePrefix("198.18.1.1/24"), pair.Client, secondClient, netip.MustParsePrefix("198.18.1.2/24")); err != nil {
		t.Fatal(err)
	}
	brokers := []netip.Addr{pair.BrokerIP, netip.MustParseAddr("198.18.1.1")}

	d := loaded(t)
	var ifindexes []int
	for _, dev := range []string{pair.BrokerDev, secondBroker} {
		ifindexes = append(ifindexes, attachTo(t, pair.Broker, dev, d, mode))
	}
	h, err := shaper.NewSharedHTB(ifindexes, d, 200*time.Millisecond, d.EgressSelectProgram(), pair.Broker.Do)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			h.Close()
		}
	})
	if err := d.SetSettings(maps.Settings{Shaper: shaperMode, IFBIndex: h.IFBIndex(), EgressIFBIndex: h.EgressIFBIndex(), StaleAfter: time.Hour, SamplesPerSecond: 200}); err != nil {
		t.Fatal(err)
	}
	if err := d.Heartbeat(maps.MonotonicNow()); err != nil {
		t.Fatal(err)
	}
	const entity, limit = 5, 4e6 // payload bytes/s, each direction
	for _, dir := range []maps.Direction{maps.Produce, maps.Fetch} {
		if err := h.SetRates(dir, []shaping.Rate{{Entity: entity, BytesPerSecond: limit}}); err != nil {
			t.Fatal(err)
		}
	}

	l, err := pair.Broker.Listen("0.0.0.0:9092")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var clients, served []net.Conn
	var bindings []maps.Binding
	for _, b := range brokers {
		addr := netip.AddrPortFrom(b, 9092)
		c, err := pair.Client.Dial(addr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		clients, served = append(clients, c), append(served, s)
		peer := c.LocalAddr().(*net.TCPAddr).AddrPort()
		bindings = append(bindings, maps.Binding{Conn: maps.ConnKey{Peer: netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port()), Local: addr}, Produce: entity, Fetch: entity})
	}
	if err := d.BindConns(bindings); err != nil {
		t.Fatal(err)
	}

	const perConn = 8 << 20 // two connections: 16 MiB, about 4 s at the limit
	judged := []maps.Direction{maps.Fetch, maps.Produce}
	if shaperMode == maps.ShaperHTBPolice {
		judged = judged[:1]
	}
	for _, dir := range judged {
		name := map[maps.Direction]string{maps.Fetch: "fetch", maps.Produce: "produce"}[dir]
		senders, receivers := served, clients
		if dir == maps.Produce {
			senders, receivers = clients, served
		}
		before, err := d.EntityCounters(dir, entity)
		if err != nil {
			t.Fatal(err)
		}
		retransBefore := retransmitted(senders)
		read, elapsed := transfer(t, senders, receivers, perConn)
		retrans := retransmitted(senders) - retransBefore
		after, err := d.EntityCounters(dir, entity)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, n := range read {
			total += n
		}
		rate := float64(total) / elapsed.Seconds()
		t.Logf("%s: %.3f MB/s over both interfaces (limit %.1f; per connection %v bytes in %v); data path counted %d bytes",
			name, rate/1e6, limit/1e6, read, elapsed.Round(time.Millisecond), after.Bytes-before.Bytes)
		// Bypass would show as twice the limit (a tree per interface) or as
		// line rate (egress not steered); HTB's bursts (128 KiB per class)
		// are 1.6 % of the transfer.
		if rate > limit*1.05 {
			t.Errorf("%s: the entity moved %.3f MB/s over two interfaces, more than its %.1f MB/s limit", name, rate/1e6, limit/1e6)
		}
		if rate < limit*0.75 {
			t.Errorf("%s: the entity moved only %.3f MB/s of its %.1f MB/s limit", name, rate/1e6, limit/1e6)
		}
		// What TCP sent (the retransmissions the senders' sockets report
		// included: they crossed the NIC twice) is what the data path counted.
		want := uint64(total) + retrans
		if got := after.Bytes - before.Bytes; got < want || float64(got) > float64(want)*1.001 {
			t.Errorf("%s: the data path counted %d bytes, TCP sent %d: a second pass out of the IFB counted again?", name, got, want)
		}
	}

	closed = true
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{pair.BrokerDev, secondBroker} {
		out, _ := exec.Command("ip", "netns", "exec", pair.Broker.Name, "tc", "filter", "show", "dev", dev, "egress").CombinedOutput()
		if strings.Contains(string(out), "sluice_egress_select") {
			t.Errorf("the egress steering filter stayed on %s:\n%s", dev, out)
		}
	}
	links, _ := exec.Command("ip", "netns", "exec", pair.Broker.Name, "ip", "-o", "link").CombinedOutput()
	if strings.Contains(string(links), "slifb") {
		t.Errorf("an IFB device stayed after Close:\n%s", links)
	}
}

// retransmitted is the payload the connections' sockets have resent.
func retransmitted(conns []net.Conn) uint64 {
	var sum uint64
	for _, c := range conns {
		sum += bytesRetransmitted(c)
	}
	return sum
}

// transfer sends n bytes on each sender and reads them on the matching
// receiver, all at once; it returns the bytes each receiver read and the
// time from the start until the last one finished.
func transfer(t *testing.T, senders, receivers []net.Conn, n int64) ([]int64, time.Duration) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // bound the load in time as well as size
	read := make([]int64, len(receivers))
	errs := make(chan error, 2*len(senders))
	var wg sync.WaitGroup
	start := time.Now()
	for i := range senders {
		wg.Add(2)
		go func() {
			defer wg.Done()
			senders[i].SetDeadline(deadline)
			if _, err := io.CopyN(senders[i], zeros{}, n); err != nil {
				errs <- fmt.Errorf("send: %w", err)
			}
		}()
		go func() {
			defer wg.Done()
			receivers[i].SetDeadline(deadline)
			got, err := io.CopyN(io.Discard, receivers[i], n)
			read[i] = got
			if err != nil {
				errs <- fmt.Errorf("receive: %w", err)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return read, elapsed
}
