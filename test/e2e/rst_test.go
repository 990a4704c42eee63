package e2e

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
	"github.com/sluice-dev/sluice/test/harness"
)

// Spoofed RST: an off-path host that knows a live connection's 4-tuple
// but not where its stream stands forges RST, RST|ACK and FIN|ACK
// segments far from the stream (at least 2^24 from it). The broker's
// kernel ignores them (RFC 5961), and so must sluice: the producer keeps
// its entity and its limit (the broker sockets' tcp_info), its entries in
// the data path's table (read from the kernel through the pins) keep their
// entities and are not marked closing, also after the agent's next scan.
// A real close (the producer stops: FIN) frees the entries at a scan.
func TestScenarioSpoofedRST(t *testing.T) {
	w := world(t, harness.Options{Topics: []string{"orders"}})
	const limit = 5e6
	a := start(t, w, harness.Config{ProduceCapacity: "40MB", Extra: fmt.Sprintf(`entities:
  clients:
    capped: {producer_byte_rate: %d}
`, int(limit))})
	defer a.Stop()
	prod := client(t, w, harness.ClientSpec{Name: "capped", Lib: "franz", Mode: "produce", ClientID: "capped", Topic: "orders"})
	before, ownBefore := metered(t, w, 0, []*harness.Client{prod}, []harness.Ref{{Kind: "client", Name: "capped"}})

	// The producer's connections, and its entity's id in the produce direction.
	owners, err := w.ClientPorts()
	if err != nil {
		t.Fatal(err)
	}
	ports := owners[prod.Pid()]
	if len(ports) == 0 {
		t.Fatalf("no connection of the producer (pid %d) in the client namespace: %v", prod.Pid(), owners)
	}
	slices.Sort(ports)
	broker := netip.AddrPortFrom(w.Pair.BrokerIP, 9092)
	keyOf := func(port uint16) maps.ConnKey {
		return maps.ConnKey{Peer: netip.AddrPortFrom(w.Pair.ClientIP, port), Local: broker}
	}
	s, err := w.Status()
	if err != nil {
		t.Fatal(err)
	}
	var cappedID uint32
	for _, e := range s.Directions[maps.Produce].Entities {
		if e.Kind == "client" && e.Name == "capped" {
			cappedID = e.ID
		}
	}
	bindBefore := bindingsOf(t, w, ports, keyOf)
	var bound []uint16 // the connections the data path holds to capped
	for port, b := range bindBefore {
		if cappedID != 0 && b.Produce == cappedID {
			bound = append(bound, port)
		}
	}
	slices.Sort(bound)

	// Where each stream stands, seen at the broker's interface.
	learned, pokes, err := learnStreams(w, ports, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// The forged segments: for every connection whose stream was seen, far
	// from it (≥ 2^24 either way), fixed and at random places.
	type forgedKey struct {
		port  uint16
		seq   uint32
		flags uint8
	}
	forged := map[forgedKey]int{}
	kinds := map[string]int{}
	var pkts [][]byte
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	far := func() uint32 { return 1<<24 + uint32(r.Int64N(1<<32-2<<24+1)) } // in [2^24, 2^32-2^24]
	const rounds = 8
	var attacked []uint16
	for _, port := range ports {
		st, ok := learned[port]
		if !ok {
			continue
		}
		attacked = append(attacked, port)
		for range rounds {
			for _, f := range []struct {
				kind  string
				seq   uint32
				flags uint8
			}{
				{"rst", st.next + 1<<30, harness.TCPRst},
				{"rst_ack", st.next + 1<<31, harness.TCPRst | harness.TCPAck},
				{"rst", st.next - 1<<24, harness.TCPRst},
				{"rst_ack", st.next + 1<<24 + 1<<20, harness.TCPRst | harness.TCPAck},
				{"fin_ack", st.next - 1<<24 - 7, harness.TCPFin | harness.TCPAck},
				{"fin_ack", st.next + 1<<30 + 12345, harness.TCPFin | harness.TCPAck},
				{"rst", st.next + far(), harness.TCPRst},
				{"rst_ack", st.next + far(), harness.TCPRst | harness.TCPAck},
				{"fin_ack", st.next + far(), harness.TCPFin | harness.TCPAck},
				{"rst", st.next + far(), harness.TCPRst},
			} {
				ack := uint32(0)
				if f.flags&harness.TCPAck != 0 {
					ack = st.ack
				}
				pkts = append(pkts, harness.TCPSegment(keyOf(port).Peer, broker, f.seq, ack, f.flags, 512))
				forged[forgedKey{port, f.seq, f.flags}]++
				kinds[f.kind]++
			}
		}
	}

	// Count what reaches the broker's interface (a packet socket there, as
	// tcpdump: before tc ingress), and the broker kernel's TCP counters.
	counters0, err := w.BrokerTCPCounters()
	if err != nil {
		t.Fatal(err)
	}
	capture, err := harness.CaptureTCP(w.Pair.Broker, w.Pair.BrokerDev, harness.TCPRst|harness.TCPFin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(capture.Close)
	var arrived, strays int
	var capMu sync.Mutex
	capDone := make(chan struct{})
	stopCapture := make(chan struct{})
	go func() {
		defer close(capDone)
		for {
			select {
			case <-stopCapture:
				return
			default:
			}
			seg, err := capture.Next(time.Now().Add(200 * time.Millisecond))
			if err != nil {
				if err == harness.ErrCaptureTimeout {
					continue
				}
				return
			}
			if seg.Outgoing || seg.Dst != broker || seg.Src.Addr() != w.Pair.ClientIP {
				continue
			}
			capMu.Lock()
			if _, ok := forged[forgedKey{seg.Src.Port(), seg.Seq, seg.Flags}]; ok {
				arrived++
			} else {
				strays++
			}
			capMu.Unlock()
		}
	}()

	// The next 5 s of the producer, from the moment the forging starts.
	type meterResult struct {
		rates []float64
		err   error
	}
	afterCh := make(chan meterResult, 1)
	go func() {
		r, err := w.MeterClients(0, 5*time.Second, prod)
		afterCh <- meterResult{r, err}
	}()
	forgeAt := time.Now()
	sent, sendErr := w.SendFromClient(pkts, 10*time.Millisecond)
	forgeTook := time.Since(forgeAt)
	time.Sleep(500 * time.Millisecond) // the last forged segments reach the broker's interface
	close(stopCapture)
	<-capDone
	capture.Close()
	counters1, err := w.BrokerTCPCounters()
	if err != nil {
		t.Fatal(err)
	}
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	// The data path's table right after the forged segments went by.
	bindAfterForge := bindingsOf(t, w, ports, keyOf)
	afterRes := <-afterCh
	if afterRes.err != nil {
		t.Fatal(afterRes.err)
	}
	after := afterRes.rates[0]

	// Wait for the agent's next connection scan, as a condition: a probe
	// connection opened and closed now is reaped at the first scan after
	// its close, and that scan runs after the forged segments.
	probeKey, closeProbe, err := scanProbe(w, broker)
	if err != nil {
		t.Fatal(err)
	}
	s0, err := w.Status()
	if err != nil {
		closeProbe()
		t.Fatal(err)
	}
	closeProbe()
	probeClosed := time.Now()
	probeGone := func() bool {
		b, err := w.Bindings()
		if err != nil {
			return false
		}
		_, in := b[probeKey]
		return !in
	}
	_, scanErr := w.WaitFor(25*time.Second, func(s *status.Snapshot) bool {
		return s.Connections.Reaped > s0.Connections.Reaped && probeGone()
	})
	scanAfter := time.Since(probeClosed)
	scanned := scanErr == nil
	bindAfterScan := bindingsOf(t, w, ports, keyOf)
	afterScanRates, err := w.MeterClients(0, 5*time.Second, prod)
	if err != nil {
		t.Fatal(err)
	}
	errs, ok := noErrors(prod)

	// A real close: the producer stops, its sockets close with FIN, the
	// broker answers with its own, and the scan frees the entries.
	present := func() []uint16 {
		b, err := w.Bindings()
		if err != nil {
			return ports
		}
		var in []uint16
		for _, p := range ports {
			if _, ok := b[keyOf(p)]; ok {
				in = append(in, p)
			}
		}
		return in
	}
	prod.Stop()
	stopped := time.Now()
	const freeWithin = 25 * time.Second
	left := present()
	for len(left) > 0 && time.Since(stopped) < freeWithin {
		time.Sleep(100 * time.Millisecond) // polling the kernel's table, bounded by freeWithin
		left = present()
	}
	freedAfter := time.Since(stopped)
	freed := len(left) == 0

	capMu.Lock()
	arrivedN, straysN := arrived, strays
	capMu.Unlock()
	delta := map[string]int64{}
	for _, k := range []string{"TcpInSegs", "TcpInErrs", "TcpInCsumErrors", "TcpEstabResets", "TcpAttemptFails",
		"TcpExtTCPChallengeACK", "TcpExtTCPACKSkippedChallenge", "TcpExtDelayedACKLost", "TcpExtTCPACKSkippedSeq",
		"TcpExtBeyondWindow", "TcpExtTCPAbortOnData", "TcpExtTCPAbortOnClose"} {
		if v1, ok := counters1[k]; ok {
			delta[k] = int64(v1) - int64(counters0[k])
		}
	}
	same := func(got map[uint16]maps.Binding) bool {
		if len(got) != len(bindBefore) {
			return false
		}
		for p, b := range bindBefore {
			g, ok := got[p]
			if !ok || g.Produce != b.Produce || g.Fetch != b.Fetch || g.Closing {
				return false
			}
		}
		return true
	}
	allBoundAttacked := len(bound) > 0
	for _, p := range bound {
		allBoundAttacked = allBoundAttacked && slices.Contains(attacked, p)
	}
	streams := map[string]any{}
	for p, st := range learned {
		streams[fmt.Sprint(p)] = map[string]uint32{"next_seq": st.next, "ack": st.ack}
	}
	record(t, Result{
		Name: "spoofed-rst",
		Pass: within(before[0], limit, 0.03) && within(after, limit, 0.03) && allBoundAttacked && sent == len(pkts) && arrivedN == sent &&
			same(bindAfterForge) && scanned && same(bindAfterScan) && freed && ok,
		Measured: map[string]any{
			"before_bps": before[0], "after_bps": after, "after_window": "5 s from the first forged segment",
			"after_scan_bps_for_information": afterScanRates[0], "measured_at": meteredAt,
			"sluice_vs_kernel_before": differences(before, ownBefore),
			"producer_ports":          ports, "ports_bound_to_capped": bound, "capped_entity_id": cappedID,
			"attacked_ports": attacked, "streams_seen": streams, "ack_pokes_sent": pokes,
			"forged_sent": sent, "forged_by_kind": kinds, "forged_sent_over_s": forgeTook.Seconds(),
			"forged_arrived_at_broker_interface": arrivedN, "other_fin_rst_at_broker_interface": straysN,
			"broker_kernel_tcp_counter_deltas": delta,
			// Each forged FIN|ACK the broker's kernel sees out of its window
			// is counted: behind it DelayedACKLost, beyond it BeyondWindow
			// (both answered with a duplicate ACK). A forged RST is dropped
			// silently out of the window, or answered with a challenge ACK
			// within it (TCPChallengeACK, or TCPACKSkippedChallenge when
			// rate-limited); EstabResets counts connections it reset.
			"broker_kernel_saw_fin_ack":       delta["TcpExtDelayedACKLost"] + delta["TcpExtBeyondWindow"],
			"broker_kernel_challenged_rst":    delta["TcpExtTCPChallengeACK"] + delta["TcpExtTCPACKSkippedChallenge"],
			"broker_kernel_reset_connections": delta["TcpEstabResets"],
			"binding_before":                  bindingView(bindBefore), "binding_after_forged": bindingView(bindAfterForge),
			"binding_after_scan": bindingView(bindAfterScan), "scan_observed": scanned, "scan_observed_after_probe_close_s": scanAfter.Seconds(),
			"real_close_freed": freed, "real_close_freed_after_s": freedAfter.Seconds(), "left_in_table": left,
			"client_errors": errs},
		Expected: map[string]any{"before_bps": limit, "after_bps": limit, "tolerance": 0.03,
			"attacked": "every connection the data path binds to capped", "forged_arrived_at_broker_interface": "all sent",
			"binding_after_forged_and_after_scan": "the same entities as before, not closing",
			"scan_observed":                       "a probe connection closed after the forged segments is reaped (connections.reaped rises, its entry leaves the table)",
			"real_close_freed_within_s":           freeWithin.Seconds(), "client_errors": 0},
	})
}

// stream is where a connection stood when last seen: the client's next
// sequence number and the broker's.
type stream struct{ next, ack uint32 }

// learnStreams watches the connections' segments at the broker's
// interface and keeps, per client port, where the client's stream stands
// (the sequence number after the client's last payload, or the broker's
// last acknowledgement) and the broker's next sequence number. A
// connection silent for the whole while (a producer's metadata connection)
// is poked: a bare ACK far outside its window, which the broker's kernel
// answers with a duplicate ACK that tells both. (A bare ACK is neither FIN
// nor RST: it cannot end a connection in sluice's eyes.) It returns the
// pokes sent too.
func learnStreams(w *harness.World, ports []uint16, over time.Duration) (map[uint16]stream, int, error) {
	c, err := harness.CaptureTCP(w.Pair.Broker, w.Pair.BrokerDev, 0)
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	out := map[uint16]stream{}
	read := func(until time.Time) error {
		for time.Now().Before(until) {
			seg, err := c.Next(until)
			if err == harness.ErrCaptureTimeout {
				return nil
			}
			if err != nil {
				return err
			}
			switch {
			case !seg.Outgoing && seg.Src.Addr() == w.Pair.ClientIP && seg.Dst.Port() == 9092 && slices.Contains(ports, seg.Src.Port()) &&
				seg.Flags&harness.TCPAck != 0 && seg.Payload > 0:
				out[seg.Src.Port()] = stream{next: seg.Seq + uint32(seg.Payload), ack: seg.Ack}
			case seg.Outgoing && seg.Src.Port() == 9092 && seg.Dst.Addr() == w.Pair.ClientIP && slices.Contains(ports, seg.Dst.Port()) &&
				seg.Flags&harness.TCPAck != 0:
				out[seg.Dst.Port()] = stream{next: seg.Ack, ack: seg.Seq + uint32(seg.Payload)}
			}
		}
		return nil
	}
	if err := read(time.Now().Add(over)); err != nil {
		return nil, 0, err
	}
	pokes := 0
	broker := netip.AddrPortFrom(w.Pair.BrokerIP, 9092)
	for try := 0; try < 3; try++ {
		var pkts [][]byte
		for _, p := range ports {
			if _, ok := out[p]; !ok {
				pkts = append(pkts, harness.TCPSegment(netip.AddrPortFrom(w.Pair.ClientIP, p), broker, rand.Uint32(), rand.Uint32(), harness.TCPAck, 512))
			}
		}
		if len(pkts) == 0 {
			break
		}
		n, err := w.SendFromClient(pkts, 0)
		pokes += n
		if err != nil {
			return nil, pokes, err
		}
		// The broker rate-limits its answers to out-of-window bare ACKs
		// (tcp_invalid_ratelimit, 500 ms): wait longer before poking again.
		if err := read(time.Now().Add(700 * time.Millisecond)); err != nil {
			return nil, pokes, err
		}
	}
	return out, pokes, nil
}

// bindingsOf reads the data path's entries of a client's connections.
func bindingsOf(t *testing.T, w *harness.World, ports []uint16, keyOf func(uint16) maps.ConnKey) map[uint16]maps.Binding {
	t.Helper()
	all, err := w.Bindings()
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint16]maps.Binding{}
	for _, p := range ports {
		if b, ok := all[keyOf(p)]; ok {
			out[p] = b
		}
	}
	return out
}

func bindingView(b map[uint16]maps.Binding) map[string]any {
	out := map[string]any{}
	for p, v := range b {
		out[fmt.Sprint(p)] = map[string]any{"produce": v.Produce, "fetch": v.Fetch, "closing": v.Closing}
	}
	return out
}

// scanProbe opens a connection from the client namespace, asks the broker
// for its API versions (the broker's answer enters the connection in the
// data path's table), waits until the entry is there, and returns its key
// and a function that closes it.
func scanProbe(w *harness.World, broker netip.AddrPort) (maps.ConnKey, func(), error) {
	conn, err := w.Pair.Client.Dial(broker.String())
	if err != nil {
		return maps.ConnKey{}, nil, err
	}
	fail := func(err error) (maps.ConnKey, func(), error) { conn.Close(); return maps.ConnKey{}, nil, err }
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	id := "rst-scan-probe"
	body := binary.BigEndian.AppendUint16(nil, 18) // ApiVersions
	body = binary.BigEndian.AppendUint16(body, 0)  // v0
	body = binary.BigEndian.AppendUint32(body, 1)  // correlation id
	body = binary.BigEndian.AppendUint16(body, uint16(len(id)))
	body = append(body, id...)
	req := append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	if _, err := conn.Write(req); err != nil {
		return fail(fmt.Errorf("probe: %w", err))
	}
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		return fail(fmt.Errorf("probe: %w", err))
	}
	if _, err := io.CopyN(io.Discard, conn, int64(binary.BigEndian.Uint32(size[:]))); err != nil {
		return fail(fmt.Errorf("probe: %w", err))
	}
	local := conn.LocalAddr().(*net.TCPAddr).AddrPort()
	key := maps.ConnKey{Peer: netip.AddrPortFrom(local.Addr().Unmap(), local.Port()), Local: broker}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := w.Bindings()
		if err != nil {
			return fail(err)
		}
		if _, ok := b[key]; ok {
			return key, func() { conn.Close() }, nil
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("probe %s never entered the data path's table", key))
		}
		time.Sleep(50 * time.Millisecond) // polling the kernel's table, bounded by the deadline
	}
}
