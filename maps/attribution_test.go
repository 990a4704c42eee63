package maps

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"
)

func TestAttributionUnboundChargedToUnknown(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			h := newHarness(t, testOptions())
			if v, _ := h.run(Produce, toBroker(fam.client, fam.broker, 40000, 1, flagACK|flagPSH, make([]byte, 100))); v != actUnspec {
				t.Errorf("verdict %d, want pass", v)
			}
			h.run(Fetch, fromBroker(fam.client, fam.broker, 40000, 1, make([]byte, 300)))
			if c := h.counters(Produce, EntityUnknown); c.Bytes != 100 || c.Packets != 1 {
				t.Errorf("produce unknown %+v, want 100 bytes in 1 packet", c)
			}
			if c := h.counters(Fetch, EntityUnknown); c.Bytes != 300 || c.Packets != 1 {
				t.Errorf("fetch unknown %+v, want 300 bytes in 1 packet", c)
			}
		})
	}
}

func TestAttributionBoundChargedInBothDirections(t *testing.T) {
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			h := newHarness(t, testOptions())
			key := connKey(fam.client, fam.broker, 40001)
			if err := h.d.BindConns([]Binding{{Conn: key, Produce: 5, Fetch: 7}}); err != nil {
				t.Fatal(err)
			}
			if b, ok, err := h.d.Binding(key); err != nil || !ok || b.Produce != 5 || b.Fetch != 7 {
				t.Fatalf("binding %+v %v %v", b, ok, err)
			}
			h.run(Produce, toBroker(fam.client, fam.broker, 40001, 1, flagACK, make([]byte, 1000)))
			h.run(Fetch, fromBroker(fam.client, fam.broker, 40001, 1, make([]byte, 2000)))
			if c := h.counters(Produce, 5); c.Bytes != 1000 {
				t.Errorf("produce entity 5: %+v", c)
			}
			if c := h.counters(Fetch, 7); c.Bytes != 2000 {
				t.Errorf("fetch entity 7: %+v", c)
			}
			if c := h.counters(Produce, EntityUnknown); c.Bytes != 0 {
				t.Errorf("bound bytes also went to unknown: %+v", c)
			}
			if err := h.d.ForgetConns([]ConnKey{key}); err != nil {
				t.Fatal(err)
			}
			h.run(Produce, toBroker(fam.client, fam.broker, 40001, 1001, flagACK, make([]byte, 10)))
			if c := h.counters(Produce, EntityUnknown); c.Bytes != 10 {
				t.Errorf("after unbind, unknown got %+v", c)
			}
		})
	}
}

func TestAttributionUngovernedPassesUntouched(t *testing.T) {
	h := newHarness(t, testOptions())
	other := segment{src: netip.AddrPortFrom(client4, 40000), dst: netip.AddrPortFrom(broker4, 9093), seq: 1, flags: flagACK, payload: make([]byte, 500)}
	// The broker's own outgoing connection to another broker's 9092: the
	// local port is ephemeral, so it is not governed.
	outgoing := segment{src: netip.AddrPortFrom(broker4, 50000), dst: netip.AddrPortFrom(client4, brokerPort), seq: 1, flags: flagACK, payload: make([]byte, 500)}
	for _, s := range []struct {
		dir Direction
		seg segment
	}{{Produce, other}, {Fetch, outgoing}} {
		if v, p := h.run(s.dir, s.seg); v != actUnspec || p != 0 {
			t.Errorf("ungoverned segment: verdict %d priority %d", v, p)
		}
	}
	// Not TCP, not IP.
	udp := other.frame()
	udp[14+9] = 17
	arp := other.frame()
	arp[12], arp[13] = 0x08, 0x06
	for _, frame := range [][]byte{udp, arp, make([]byte, 14)} {
		ret, err := h.d.IngressProgram().Run(runOpts{Data: frame}.opts())
		if err != nil || ret != actUnspec {
			t.Errorf("non-TCP frame: %d %v", ret, err)
		}
	}
	for dir := Produce; dir <= Fetch; dir++ {
		for e := uint32(0); e < 8; e++ {
			if c := h.counters(dir, e); c.Bytes != 0 {
				t.Errorf("ungoverned traffic counted: dir %d entity %d %+v", dir, e, c)
			}
		}
	}
	// Listener changes apply at once.
	if err := h.d.SetListeners([]uint16{9093}); err != nil {
		t.Fatal(err)
	}
	h.run(Produce, other)
	h.run(Produce, toBroker(client4, broker4, 40000, 1, flagACK, make([]byte, 7)))
	if c := h.counters(Produce, EntityUnknown); c.Bytes != 500 {
		t.Errorf("after moving the listener to 9093: %+v, want only the 500 bytes to 9093", c)
	}
}

func TestAttributionExemptPeers(t *testing.T) {
	h := newHarness(t, testOptions())
	if err := h.d.SetExempt([]netip.Prefix{netip.MustParsePrefix("198.18.5.0/24"), netip.MustParsePrefix("2001:db8:5::/48")}); err != nil {
		t.Fatal(err)
	}
	peers := []netip.Addr{netip.MustParseAddr("198.18.5.7"), netip.MustParseAddr("2001:db8:5::9")}
	brokers := []netip.Addr{broker4, broker6}
	for i, peer := range peers {
		for n := 0; n < 3; n++ {
			h.run(Produce, toBroker(peer, brokers[i], 40000, uint32(1+n*100), flagACK, make([]byte, 100)))
			h.run(Fetch, fromBroker(peer, brokers[i], 40000, 1, make([]byte, 100)))
		}
		b, ok, err := h.d.Binding(connKey(peer, brokers[i], 40000))
		if err != nil || !ok || b.Produce != NotGoverned || b.Fetch != NotGoverned {
			t.Errorf("exempt peer %v not marked: %+v %v %v", peer, b, ok, err)
		}
	}
	for dir := Produce; dir <= Fetch; dir++ {
		if c := h.counters(dir, EntityUnknown); c.Bytes != 0 {
			t.Errorf("exempt traffic counted: %+v", c)
		}
	}
	st, _ := h.d.Stats()
	if st.ExemptConnections != 2 {
		t.Errorf("exempt connections %d, want 2", st.ExemptConnections)
	}
	// A peer just outside the prefix is governed.
	h.run(Produce, toBroker(netip.MustParseAddr("198.18.6.1"), broker4, 40000, 1, flagACK, make([]byte, 50)))
	if c := h.counters(Produce, EntityUnknown); c.Bytes != 50 {
		t.Errorf("non-exempt peer: %+v", c)
	}
	// Removing a prefix unmarks its connections.
	if err := h.d.SetExempt([]netip.Prefix{netip.MustParsePrefix("2001:db8:5::/48")}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := h.d.Binding(connKey(peers[0], broker4, 40000)); ok {
		t.Error("connection of a no longer exempt peer still marked")
	}
	if _, ok, _ := h.d.Binding(connKey(peers[1], broker6, 40000)); !ok {
		t.Error("connection of a still exempt peer unmarked")
	}
}

func TestAttributionPureACKsAndControlSegmentsAreNotCounted(t *testing.T) {
	h := newHarness(t, testOptions())
	key := connKey(client4, broker4, 40002)
	h.d.BindConns([]Binding{{Conn: key, Produce: 3, Fetch: 3}})
	for _, flags := range []uint8{flagACK, flagFIN | flagACK, flagRST} {
		h.run(Produce, toBroker(client4, broker4, 40002, 1, flags, nil))
	}
	if c := h.counters(Produce, 3); c.Packets != 0 {
		t.Errorf("control segments counted: %+v", c)
	}
}

// Connections enter the table only on the broker's own segment, a SYN-ACK
// on a 4-tuple ends whatever an earlier connection there left, and FIN or
// RST marks the entry for the agent to reclaim.
func TestAttributionConnectionLifecycle(t *testing.T) {
	h := newHarness(t, testOptions())
	key := connKey(client4, broker4, 40002)
	h.d.BindConns([]Binding{{Conn: key, Produce: 3, Fetch: 3}})
	// A client's SYN on a live 4-tuple proves nothing (the kernel answers
	// it with a challenge ACK): the binding stays.
	h.run(Produce, toBroker(client4, broker4, 40002, 5000, flagSYN, nil))
	if b, ok, _ := h.d.Binding(key); !ok || b.Produce != 3 {
		t.Errorf("a client's SYN disturbed a live binding: %+v %v", b, ok)
	}
	// The broker's SYN-ACK: its kernel took a new connection here.
	h.run(Fetch, segment{src: netipPort(broker4, brokerPort), dst: netipPort(client4, 40002), seq: 1, ack: 5001, flags: flagSYN | flagACK})
	var listed []Binding
	h.d.EachBinding(func(b Binding) { listed = append(listed, b) })
	if len(listed) != 0 {
		t.Errorf("after the broker's SYN-ACK: %+v, want the old connection gone", listed)
	}
	// The client's first request comes before the broker has answered:
	// charged to unknown, not entered.
	h.run(Produce, toBroker(client4, broker4, 40002, 5001, flagACK|flagPSH, make([]byte, 40)))
	if _, ok, _ := h.d.Binding(key); ok {
		t.Error("a client's segment entered a connection the broker never answered")
	}
	if c := h.counters(Produce, EntityUnknown); c.Bytes != 40 {
		t.Errorf("unproven bytes: %+v, want 40 charged to unknown", c)
	}
	// The broker's ACK enters it, unknown both ways until the agent binds.
	h.run(Fetch, brokerACK(client4, broker4, 40002, 5041))
	listed = nil
	h.d.EachBinding(func(b Binding) { listed = append(listed, b) })
	if len(listed) != 1 || listed[0].Conn != key || listed[0].Produce != EntityUnknown || listed[0].Fetch != EntityUnknown || listed[0].Closing {
		t.Errorf("after the broker's ACK: %+v, want the connection, unknown both ways", listed)
	}
	// The client's FIN alone does not end it (identity_test.go: only what
	// proves the end does); the broker's FIN marks it for the agent to
	// reclaim.
	h.run(Produce, toBroker(client4, broker4, 40002, 5041, flagFIN|flagACK, nil))
	h.run(Fetch, segment{src: netipPort(broker4, brokerPort), dst: netipPort(client4, 40002), seq: 1, ack: 5042, flags: flagFIN | flagACK})
	listed = nil
	h.d.EachBinding(func(b Binding) { listed = append(listed, b) })
	if len(listed) != 1 || !listed[0].Closing {
		t.Errorf("after both FINs: %+v, want the connection marked closing", listed)
	}
	// An exempt peer is marked not governed by the broker's first segment,
	// and its bytes are counted as exempt.
	if err := h.d.SetExempt([]netip.Prefix{netip.MustParsePrefix("198.18.9.0/24")}); err != nil {
		t.Fatal(err)
	}
	exemptPeer := netip.MustParseAddr("198.18.9.9")
	h.run(Produce, toBroker(exemptPeer, broker4, 40003, 1, flagACK|flagPSH, make([]byte, 70)))
	h.run(Fetch, fromBroker(exemptPeer, broker4, 40003, 1, make([]byte, 30)))
	if b, ok, _ := h.d.Binding(connKey(exemptPeer, broker4, 40003)); !ok || b.Produce != NotGoverned || b.Fetch != NotGoverned {
		t.Errorf("exempt peer: binding %+v %v, want not governed", b, ok)
	}
	h.run(Produce, toBroker(exemptPeer, broker4, 40003, 71, flagACK|flagPSH, make([]byte, 5)))
	if st, _ := h.d.Stats(); st.ExemptBytes != [2]uint64{75, 30} || st.Unproven != 1 {
		t.Errorf("exempt bytes %v (want [75 30]), unproven %d (want 1)", st.ExemptBytes, st.Unproven)
	}
}

// A flood of spoofed SYNs and stray segments on fresh 4-tuples, ten times
// the table's size, cannot push an established connection out of the LRU
// table: none of them is entered.
func TestAttributionSYNFloodEvictsNothing(t *testing.T) {
	opts := testOptions()
	opts.MaxConnections = 1024
	h := newHarness(t, opts)
	live := connKey(client4, broker4, 40010)
	h.handshake(client4, broker4, 40010, 100)
	h.d.BindConns([]Binding{{Conn: live, Produce: 4, Fetch: 4}})
	for i := range 10 * opts.MaxConnections {
		peer := netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
		port := uint16(1024 + i%50000)
		h.run(Produce, toBroker(peer, broker4, port, uint32(i), flagSYN, nil))
		h.run(Fetch, segment{src: netipPort(broker4, brokerPort), dst: netipPort(peer, port), seq: 1, ack: uint32(i) + 1, flags: flagSYN | flagACK})
		h.run(Produce, toBroker(peer, broker4, port, uint32(i)+1, flagACK|flagPSH, make([]byte, 20)))
	}
	n := 0
	h.d.EachBinding(func(Binding) { n++ })
	if b, ok, _ := h.d.Binding(live); !ok || b.Produce != 4 || n != 1 {
		t.Errorf("after the flood: live binding %+v %v, %d entries (want the live one only)", b, ok, n)
	}
}

// Counters are exact over many random segments: every payload byte of a
// governed connection is charged to exactly one entity, nothing else is.
func TestAttributionCountersExactOverRandomPackets(t *testing.T) {
	h := newHarness(t, testOptions())
	r := rand.New(rand.NewPCG(3, 4))
	type conn struct {
		client, broker netip.Addr
		port           uint16
		produce, fetch uint32
	}
	var conns []conn
	var bindings []Binding
	for i := 0; i < 24; i++ {
		c := conn{client: client4, broker: broker4, port: uint16(41000 + i), produce: EntityUnknown, fetch: EntityUnknown}
		if i%2 == 1 {
			c.client, c.broker = client6, broker6
		}
		if i%3 != 0 {
			c.produce, c.fetch = uint32(2+r.IntN(60)), uint32(2+r.IntN(60))
			bindings = append(bindings, Binding{Conn: connKey(c.client, c.broker, c.port), Produce: c.produce, Fetch: c.fetch})
		}
		conns = append(conns, c)
	}
	if err := h.d.BindConns(bindings); err != nil {
		t.Fatal(err)
	}
	want := [2]map[uint32]uint64{{}, {}}
	seq := uint32(1)
	const packets = 10000
	for i := 0; i < packets; i++ {
		c := conns[r.IntN(len(conns))]
		n := r.IntN(1449)
		payload := make([]byte, n)
		for j := range payload {
			payload[j] = byte(r.Uint32())
		}
		port := c.port
		if r.IntN(10) == 0 {
			port = 1 // wrong broker port: not governed
			s := segment{src: netip.AddrPortFrom(c.client, 40000), dst: netip.AddrPortFrom(c.broker, 9999), seq: seq, flags: flagACK, payload: payload}
			h.run(Produce, s)
			continue
		}
		if r.IntN(2) == 0 {
			h.run(Produce, toBroker(c.client, c.broker, port, seq, flagACK|flagPSH, payload))
			want[Produce][c.produce] += uint64(n)
		} else {
			h.run(Fetch, fromBroker(c.client, c.broker, port, seq, payload))
			want[Fetch][c.fetch] += uint64(n)
		}
		seq += uint32(n)
	}
	reader, err := h.d.NewCounterReader()
	if err != nil {
		t.Fatal(err)
	}
	var got [2][]Counters
	got[0] = make([]Counters, h.d.MaxEntities())
	got[1] = make([]Counters, h.d.MaxEntities())
	if err := reader.Read(&got, h.d.MaxEntities()); err != nil {
		t.Fatal(err)
	}
	var total uint64
	for dir := 0; dir < 2; dir++ {
		for e := range got[dir] {
			if got[dir][e].Bytes != want[dir][uint32(e)] {
				t.Errorf("dir %d entity %d: %d bytes, want %d", dir, e, got[dir][e].Bytes, want[dir][uint32(e)])
			}
			total += got[dir][e].Bytes
		}
	}
	if total == 0 {
		t.Fatal("nothing counted")
	}
	t.Logf("%d packets, %d payload bytes counted exactly", packets, total)
}

func TestFailOpenWithStaleHeartbeat(t *testing.T) {
	h := newHarness(t, testOptions())
	key := connKey(client4, broker4, 40003)
	h.d.BindConns([]Binding{{Conn: key, Produce: 5, Fetch: 5}})
	if err := h.d.SetClass(Produce, 5, 0x00010005); err != nil {
		t.Fatal(err)
	}
	if err := h.d.SetClass(Fetch, 5, 0x00020005); err != nil {
		t.Fatal(err)
	}
	if err := h.d.SetSettings(Settings{Shaper: ShaperHTB, IFBIndex: 42, StaleAfter: 10 * time.Second, SamplesPerSecond: 200}); err != nil {
		t.Fatal(err)
	}
	ingress := toBroker(client4, broker4, 40003, 1, flagACK, make([]byte, 100))
	egress := fromBroker(client4, broker4, 40003, 1, make([]byte, 100))

	// Fresh heartbeat: ingress goes to the IFB with its class, egress gets its class.
	if err := h.d.Heartbeat(MonotonicNow()); err != nil {
		t.Fatal(err)
	}
	if v, p := h.run(Produce, ingress); v != actRedirect || p != 0x00010005 {
		t.Errorf("fresh ingress: verdict %d priority %#x, want redirect with class 1:5", v, p)
	}
	if v, p := h.run(Fetch, egress); v != actUnspec || p != 0x00020005 {
		t.Errorf("fresh egress: verdict %d priority %#x, want pass with class 2:5", v, p)
	}
	// A pure ACK is never held back.
	if v, p := h.run(Produce, toBroker(client4, broker4, 40003, 101, flagACK, nil)); v != actUnspec || p != 0 {
		t.Errorf("pure ACK: verdict %d priority %#x", v, p)
	}

	// Stale heartbeat (11 s old, stale_after 10 s): nothing is held back,
	// counting continues.
	before := h.counters(Produce, 5).Bytes
	if err := h.d.Heartbeat(MonotonicNow() - 11*time.Second); err != nil {
		t.Fatal(err)
	}
	if v, p := h.run(Produce, ingress); v != actUnspec || p != 0 {
		t.Errorf("stale ingress: verdict %d priority %#x, want pass untouched", v, p)
	}
	if v, p := h.run(Fetch, egress); v != actUnspec || p != 0 {
		t.Errorf("stale egress: verdict %d priority %#x, want pass untouched", v, p)
	}
	if got := h.counters(Produce, 5).Bytes; got != before+100 {
		t.Errorf("counting stopped when failing open: %d, want %d", got, before+100)
	}
	if st, _ := h.d.Stats(); st.FailOpenPackets != 2 {
		t.Errorf("fail-open packets %d, want 2", st.FailOpenPackets)
	}
	// The agent comes back: enforcement resumes.
	h.d.Heartbeat(MonotonicNow())
	if v, _ := h.run(Produce, ingress); v != actRedirect {
		t.Errorf("after a fresh heartbeat: verdict %d, want redirect", v)
	}
	// Shadow mode holds nothing back even with a fresh heartbeat.
	h.d.SetSettings(Settings{Shaper: ShaperNone, StaleAfter: 10 * time.Second, SamplesPerSecond: 200})
	if v, p := h.run(Produce, ingress); v != actUnspec || p != 0 {
		t.Errorf("shadow: verdict %d priority %#x", v, p)
	}
}

// Bindings go through the kernel in batches (bind_queue), and scans read
// the tables in batches: more than one batch of each, IPv4 and IPv6 mixed,
// all land and are listed, and rebinding replaces.
func TestAttributionBindManyConnections(t *testing.T) {
	opts := testOptions()
	opts.MaxConnections = 16384
	h := newHarness(t, opts)
	var bindings []Binding
	for i := 0; i < 2*scanBatch; i++ {
		client, broker := client4, broker4
		if i%3 == 0 {
			client, broker = client6, broker6
		}
		bindings = append(bindings, Binding{Conn: connKey(client, broker, uint16(10000+i)), Produce: uint32(1 + i%60), Fetch: uint32(2 + i%60)})
	}
	if err := h.d.BindConns(bindings); err != nil {
		t.Fatal(err)
	}
	bindings[7].Produce, bindings[8000].Fetch = 33, 44
	if err := h.d.BindConns([]Binding{bindings[7], bindings[8000]}); err != nil {
		t.Fatal(err)
	}
	for _, want := range bindings {
		got, ok, err := h.d.Binding(want.Conn)
		if err != nil || !ok || got != want {
			t.Fatalf("binding of %s: %+v %v %v, want %+v", want.Conn, got, ok, err, want)
		}
	}
	seen := 0
	if err := h.d.EachBinding(func(Binding) { seen++ }); err != nil {
		t.Fatal(err)
	}
	if seen != len(bindings) {
		t.Errorf("EachBinding saw %d connections, want %d", seen, len(bindings))
	}
}
