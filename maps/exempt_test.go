package maps

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/internal/addr"
	"github.com/sluice-dev/sluice/internal/netns"
)

// The data path's exempt trie and Go's matching (internal/addr, used for
// live connections and peer entities) agree on every prefix, v4-mapped
// and v4-covering IPv6 prefixes included.
func TestExemptTrieAgreesWithGo(t *testing.T) {
	h := newHarness(t, testOptions())
	cases := []struct{ prefix, peer string }{
		{"198.18.7.0/24", "198.18.7.9"},
		{"198.18.7.0/24", "198.18.8.9"},
		{"::/0", "198.18.7.9"},
		{"::ffff:198.18.0.0/111", "198.18.7.9"},
		{"::ffff:198.18.0.0/111", "198.20.7.9"},
		{"::ffff:0:0/96", "198.18.7.9"},
		{"2001:db8::/32", "198.18.7.9"},
		{"2001:db8::/32", "2001:db8::7"},
		{"0.0.0.0/0", "2001:db8::7"},
		{"::/0", "2001:db8::7"},
	}
	for i, c := range cases {
		p, peer := netip.MustParsePrefix(c.prefix), netip.MustParseAddr(c.peer)
		if err := h.d.SetExempt([]netip.Prefix{p}); err != nil {
			t.Fatal(err)
		}
		broker := broker4
		if peer.Is6() {
			broker = broker6
		}
		port := uint16(43000 + i)
		h.run(Fetch, brokerACK(peer, broker, port, 1))
		b, ok, err := h.d.Binding(connKey(peer, broker, port))
		if err != nil {
			t.Fatal(err)
		}
		inBPF := ok && b.Produce == NotGoverned && b.Fetch == NotGoverned
		if inGo := addr.PrefixHolds(p, peer); inBPF != inGo {
			t.Errorf("%s holds %s: data path %v, Go %v", p, peer, inBPF, inGo)
		}
	}
}

// Exempt peers are reconciled with the configuration at every start: a
// range an earlier agent pinned and the configuration dropped is removed
// (its live connections governed from their next segment), and a range
// added reaches live governed connections from it.
func TestExemptReconciledAcrossRestart(t *testing.T) {
	netns.RequireRoot(t, "loads BPF programs")
	opts := testOptions()
	opts.PinDir = filepath.Join(bpffs(t), "sluice")
	load := func() *harness {
		d, err := Load(opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.SetListeners([]uint16{brokerPort}); err != nil {
			t.Fatal(err)
		}
		return &harness{t: t, d: d}
	}
	dropped := netip.MustParseAddr("198.18.5.5")
	kept := netip.MustParseAddr("198.18.6.6")
	added := netip.MustParseAddr("198.18.7.7")
	first := load()
	if err := first.d.SetExempt([]netip.Prefix{netip.MustParsePrefix("198.18.5.0/24"), netip.MustParsePrefix("198.18.6.0/24")}); err != nil {
		t.Fatal(err)
	}
	for i, peer := range []netip.Addr{dropped, kept, added} {
		first.run(Fetch, brokerACK(peer, broker4, uint16(44000+i), 1))
	}
	if err := first.d.BindConns([]Binding{{Conn: connKey(added, broker4, 44002), Produce: 3, Fetch: 3}}); err != nil {
		t.Fatal(err)
	}
	first.d.Close()

	h := load()
	t.Cleanup(func() { h.d.Close(); Unpin(opts.PinDir) })
	if b, ok, _ := h.d.Binding(connKey(added, broker4, 44002)); !ok || b.Produce != 3 {
		t.Fatalf("before the new list: %+v %v, want the connection bound to 3", b, ok)
	}
	if err := h.d.SetExempt([]netip.Prefix{netip.MustParsePrefix("198.18.6.0/24"), netip.MustParsePrefix("198.18.7.0/24")}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := h.d.Binding(connKey(dropped, broker4, 44000)); ok {
		t.Error("a live connection from a dropped range is still marked exempt")
	}
	if b, ok, _ := h.d.Binding(connKey(kept, broker4, 44001)); !ok || b.Produce != NotGoverned {
		t.Errorf("a kept range's connection: %+v %v, want still exempt", b, ok)
	}
	if b, ok, _ := h.d.Binding(connKey(added, broker4, 44002)); ok {
		t.Errorf("a governed connection from an added range was not forgotten: %+v", b)
	}
	// The broker's next segments: the dropped peer is governed (unknown),
	// the added one exempt.
	h.run(Fetch, brokerACK(dropped, broker4, 44000, 1))
	h.run(Fetch, brokerACK(added, broker4, 44002, 1))
	if b, ok, _ := h.d.Binding(connKey(dropped, broker4, 44000)); ok {
		t.Errorf("dropped range after a restart: %+v, want governed (unbound)", b)
	}
	if b, ok, _ := h.d.Binding(connKey(added, broker4, 44002)); !ok || b.Produce != NotGoverned || b.Fetch != NotGoverned {
		t.Errorf("added range after a restart: %+v %v, want exempt", b, ok)
	}
}
