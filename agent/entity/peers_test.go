package entity

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/sluice-dev/sluice/agent/config"
)

// On TLS listeners the longest configured prefix holding the peer wins,
// else the listener's own entity; parameters come from the entity's own
// entry, then its section's <default>, then the global defaults.
func TestPeerPolicy(t *testing.T) {
	rate := func(v float64) *float64 { return &v }
	p := NewPolicy(config.Entities{
		Peers: map[string]config.Quota{
			"10.0.0.0/8":      {ConsumerByteRate: rate(8e6)},
			"10.1.0.0/16":     {ConsumerByteRate: rate(4e6)},
			"2001:db8::/32":   {},
			config.DefaultKey: {QuotaWeight: rate(3)},
		},
		Listeners: map[string]config.Quota{"9093": {ConsumerByteRate: rate(1e6)}, "9094": {}, config.DefaultKey: {QuotaWeight: rate(0.5)}},
	})
	for _, c := range []struct {
		addr string
		port uint16
		want Key
	}{
		{"10.1.2.3", 9093, Key{KindPeer, "10.1.0.0/16"}},
		{"::ffff:10.1.2.3", 9093, Key{KindPeer, "10.1.0.0/16"}}, // v4-mapped, as the data path names peers
		{"10.2.0.1", 9093, Key{KindPeer, "10.0.0.0/8"}},
		{"2001:db8::7", 9094, Key{KindPeer, "2001:db8::/32"}},
		{"192.0.2.1", 9094, Key{KindListener, "9094"}},
	} {
		if got := p.ByPeer(c.port, netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("%s on %d: %v, want %v", c.addr, c.port, got, c.want)
		}
	}
	if got := fmt.Sprint(p.Peers()); got != "[{10.1.0.0/16 peer:10.1.0.0/16} {10.0.0.0/8 peer:10.0.0.0/8} {2001:db8::/32 peer:2001:db8::/32}]" {
		t.Errorf("peer rules %s: want longest first (v4 counted as v4-mapped)", got)
	}
	params, from := p.Explain(Key{KindPeer, "10.0.0.0/8"}, Fetch)
	if params.Limit != 8e6 || params.Weight != 3 || from.Limit != SourceFile || from.Weight != SourceTemplate {
		t.Errorf("peer 10.0.0.0/8: %+v from %+v", params, from)
	}
	params, from = p.Explain(Key{KindListener, "9093"}, Fetch)
	if params.Limit != 1e6 || params.Weight != 0.5 || from.Limit != SourceFile || from.Weight != SourceTemplate {
		t.Errorf("listener 9093: %+v from %+v", params, from)
	}
	params, from = p.Explain(Key{KindListener, "9094"}, Produce)
	if params.Reservation != 0 || from.Limit != SourceGlobal {
		t.Errorf("listener 9094: %+v from %+v", params, from)
	}
	if got := fmt.Sprint(p.ConfiguredKeys()); got != "[peer:10.1.0.0/16 peer:10.0.0.0/8 peer:2001:db8::/32 listener:9093 listener:9094]" {
		t.Errorf("configured keys %s", got)
	}
}
