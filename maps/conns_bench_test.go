package maps

import (
	"net/netip"
	"testing"
)

// BenchmarkEachBinding scans 100,000 connections (the agent does once a
// minute, inside a cycle): one op is one whole scan.
func BenchmarkEachBinding(b *testing.B) {
	opts := testOptions()
	opts.MaxConnections = 131072
	h := newHarness(b, opts)
	bindings := make([]Binding, 100_000)
	for i := range bindings {
		client := netip.AddrFrom4([4]byte{198, 18, byte(i >> 16), byte(i >> 8)})
		bindings[i] = Binding{Conn: connKey(client, broker4, uint16(i)), Produce: 1, Fetch: 2}
	}
	if err := h.d.BindConns(bindings); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		n := 0
		if err := h.d.EachBinding(func(Binding) { n++ }); err != nil {
			b.Fatal(err)
		}
		if n != len(bindings) {
			b.Fatalf("scanned %d connections, want %d", n, len(bindings))
		}
	}
}
