package agent

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/agent/entity"
	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
	"github.com/sluice-dev/sluice/maps"
)

const tlsConfig = `
interfaces: [eth0]
listeners: [9092, {port: 9093, protocol: SSL}]
refresh_interval: 1s
rate_window: 1
produce: {capacity: 1000, safety_ratio: 1, activity_threshold: 0, memory_cycles: 3, min_limit: 0}
fetch:   {capacity: 1000, safety_ratio: 0.9, activity_threshold: 0, memory_cycles: 3, min_limit: 0}
`

func tlsConn(peer string, port uint16) maps.ConnKey {
	return maps.ConnKey{Peer: netip.AddrPortFrom(netip.MustParseAddr(peer), port), Local: netip.MustParseAddrPort("198.18.0.1:9093")}
}

// The agent writes each TLS listener's peer table (its own entity, then
// every prefix) with the pinned entities' ids, rebinds the listener's open
// connections when the table changes, and ignores samples of them.
func TestAgentPeerTable(t *testing.T) {
	r := newRigFrom(t, tlsConfig+"entities: {peers: {198.18.1.0/24: {consumer_byte_rate: 400}}, listeners: {9093: {consumer_byte_rate: 100}}}\n")
	id := func(k entity.Key) uint32 {
		got, ok := r.a.registry.Lookup(k)
		if !ok {
			t.Fatalf("%v not registered", k)
		}
		return uint32(got)
	}
	listener, peer := id(entity.ListenerKey(9093)), id(entity.Key{Kind: entity.KindPeer, Name: "198.18.1.0/24"})
	want := []maps.PeerEntity{{Port: 9093, Produce: listener, Fetch: listener},
		{Port: 9093, Prefix: netip.MustParsePrefix("198.18.1.0/24"), Produce: peer, Fetch: peer}}
	if len(r.dp.peers) != 2 || r.dp.peers[0] != want[0] || r.dp.peers[1] != want[1] {
		t.Fatalf("peer table %+v, want %+v", r.dp.peers, want)
	}

	// A connection the data path entered before the table existed (learned
	// as unknown) and one in the prefix, bound to the listener by an older
	// table, are rebound on reload; a plaintext listener's is left alone.
	early, moved := tlsConn("198.18.2.5", 50000), tlsConn("198.18.1.9", 50001)
	r.dp.bindings[early] = maps.Binding{Conn: early, Produce: maps.EntityUnknown, Fetch: maps.EntityUnknown}
	r.dp.bindings[moved] = maps.Binding{Conn: moved, Produce: listener, Fetch: listener}
	plain := conn(50002)
	r.dp.bindings[plain] = maps.Binding{Conn: plain, Produce: maps.EntityUnknown, Fetch: maps.EntityUnknown}
	if err := reloadWith(t, r, tlsConfig+"entities: {peers: {198.18.1.0/24: {consumer_byte_rate: 400}, 198.18.2.0/24: {}}, listeners: {9093: {consumer_byte_rate: 100}}}\n"); err != nil {
		t.Fatal(err)
	}
	second := id(entity.Key{Kind: entity.KindPeer, Name: "198.18.2.0/24"})
	if b := r.dp.bindings[early]; b.Produce != second || b.Fetch != second {
		t.Errorf("early connection %+v, want the new prefix's entity %d", b, second)
	}
	if b := r.dp.bindings[moved]; b.Produce != peer || b.Fetch != peer {
		t.Errorf("connection in 198.18.1.0/24 %+v, want %d", b, peer)
	}
	if b := r.dp.bindings[plain]; b.Produce != maps.EntityUnknown {
		t.Errorf("plaintext connection rebound: %+v", b)
	}
	if len(r.dp.peers) != 3 {
		t.Errorf("peer table %+v, want the listener and two prefixes", r.dp.peers)
	}

	// A sample of a TLS connection changes nothing, whatever it says.
	if err := r.a.Learn(maps.Sample{Conn: early, Data: kt.Frame(apiVersions(), 1, kt.Str("forged")), Complete: true}); err != nil {
		t.Fatal(err)
	}
	if b := r.dp.bindings[early]; b.Produce != second {
		t.Errorf("a TLS connection's sample rebound it: %+v", b)
	}
	if _, ok := r.a.registry.Lookup(entity.Key{Kind: entity.KindClient, Name: "forged"}); ok {
		t.Error("a TLS connection's sample created a client entity")
	}

	// The listener's entity has its configured limit.
	r.cycle()
	s := r.cycle()
	if e := entityView(s, entity.Fetch, "9093"); e.Kind != "listener" || float64(e.Limit) != 100 || !e.Configured {
		t.Errorf("listener entity %+v", e)
	}
	if e := entityView(s, entity.Fetch, "198.18.1.0/24"); e.Kind != "peer" || float64(e.Limit) != 400 {
		t.Errorf("peer entity %+v", e)
	}
}

// A listener that stops being TLS on reload: its connections, decided by
// their peers and tracking no requests, are forgotten so that the data
// path enters them again and the learner decides them.
func TestAgentListenerNoLongerTLS(t *testing.T) {
	r := newRigFrom(t, tlsConfig)
	c := tlsConn("198.18.2.5", 50000)
	listener, _ := r.a.registry.Lookup(entity.ListenerKey(9093))
	r.dp.bindings[c] = maps.Binding{Conn: c, Produce: uint32(listener), Fetch: uint32(listener)}
	plain := conn(50002)
	r.dp.bindings[plain] = maps.Binding{Conn: plain, Produce: maps.EntityUnknown, Fetch: maps.EntityUnknown}
	if err := reloadWith(t, r, strings.Replace(tlsConfig, "{port: 9093, protocol: SSL}", "9093", 1)); err != nil {
		t.Fatal(err)
	}
	if _, kept := r.dp.bindings[c]; kept {
		t.Error("a connection of a listener no longer TLS kept its peer binding")
	}
	if _, kept := r.dp.bindings[plain]; !kept {
		t.Error("a plaintext listener's connection was forgotten")
	}
	if len(r.dp.peers) != 0 {
		t.Errorf("peer table %+v, want empty", r.dp.peers)
	}
}
