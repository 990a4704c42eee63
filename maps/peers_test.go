package maps

import (
	"bytes"
	"net/netip"
	"testing"
)

// On a TLS listener the peer decides a connection's entities when it
// starts: the longest configured prefix holding the peer, else the
// listener's own entry. Nothing of its stream is tracked or sampled (the
// bytes are ciphertext, whatever they look like), exempt peers stay
// exempt, and a listener with no entry is learned from requests again.
func TestAttributionByPeerOnTLSListener(t *testing.T) {
	h := newHarness(t, testOptions())
	r, err := h.d.NewSampleReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	table := []PeerEntity{
		{Port: brokerPort, Produce: 9, Fetch: 9}, // the listener's own entity
		{Port: brokerPort, Prefix: netip.MustParsePrefix("198.18.0.0/24"), Produce: 11, Fetch: 11},
		{Port: brokerPort, Prefix: netip.MustParsePrefix("198.18.0.2/32"), Produce: 12, Fetch: 12},
		{Port: brokerPort, Prefix: netip.MustParsePrefix("2001:db8::/32"), Produce: 13, Fetch: 13},
		{Port: brokerPort + 1, Prefix: netip.MustParsePrefix("198.18.0.0/16"), Produce: 14, Fetch: 14}, // another listener's
	}
	if err := h.d.SetPeerEntities(table); err != nil {
		t.Fatal(err)
	}
	if err := h.d.SetExempt([]netip.Prefix{netip.MustParsePrefix("198.18.0.9/32")}); err != nil {
		t.Fatal(err)
	}
	// Plaintext Kafka requests, as a hostile client could put them on the
	// wire of a TLS listener: they must not be sampled.
	stream := bytes.Join(kafkaRequests(), nil)
	for _, c := range []struct {
		peer netip.Addr
		port uint16
		want uint32
	}{
		{netip.MustParseAddr("198.18.0.2"), 41000, 12},  // the /32 beats the /24
		{netip.MustParseAddr("198.18.0.3"), 41001, 11},  // the /24
		{netip.MustParseAddr("198.18.5.5"), 41002, 9},   // no prefix of this listener: its own entity
		{netip.MustParseAddr("2001:db8::2"), 41003, 13}, // IPv6
		{netip.MustParseAddr("198.18.0.9"), 41004, NotGoverned},
	} {
		broker := broker4
		if c.peer.Is6() {
			broker = broker6
		}
		h.handshake(c.peer, broker, c.port, 1000)
		for seq, off := uint32(1001), 0; off < len(stream); off += 100 {
			part := stream[off:min(off+100, len(stream))]
			h.run(Produce, toBroker(c.peer, broker, c.port, seq, flagACK|flagPSH, part))
			seq += uint32(len(part))
		}
		b, ok, err := h.d.Binding(connKey(c.peer, broker, c.port))
		if err != nil || !ok || b.Produce != c.want || b.Fetch != c.want {
			t.Errorf("%v: binding %+v (%v, %v), want entity %d both ways", c.peer, b, ok, err, c.want)
		}
		if c.want != NotGoverned {
			if got := h.counters(Produce, c.want); got.Bytes == 0 {
				t.Errorf("%v: entity %d counted nothing", c.peer, c.want)
			}
		}
	}
	if s := drain(t, r); len(s) != 0 {
		t.Errorf("%d samples from TLS connections, want none", len(s))
	}
	if c := h.counters(Produce, EntityUnknown); c.Bytes != 0 {
		t.Errorf("unknown entity counted %+v: every TLS connection was decided at its start", c)
	}

	// Without the table the listener is learned from requests again.
	if err := h.d.SetPeerEntities(nil); err != nil {
		t.Fatal(err)
	}
	s := h.connect(netip.MustParseAddr("198.18.0.3"), 41010, 1000)
	s.send(stream, 100)
	if b, _, _ := h.d.Binding(connKey(s.client, broker4, s.port)); b.Produce != EntityUnknown {
		t.Errorf("binding %+v, want unknown until the agent learns it", b)
	}
	if n := len(drain(t, r)); n == 0 {
		t.Error("no samples from a plaintext listener's connection")
	}
}

func TestSetPeerEntitiesRefusesPortZero(t *testing.T) {
	h := newHarness(t, testOptions())
	if err := h.d.SetPeerEntities([]PeerEntity{{Port: 0}}); err == nil {
		t.Error("port 0 accepted")
	}
}
