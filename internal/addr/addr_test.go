package addr

import (
	"net/netip"
	"testing"
)

// Every pair the data path's tries match by v4-mapped keys, and only
// those, is held.
func TestPrefixHoldsAsTheTriesDo(t *testing.T) {
	cases := []struct {
		prefix, addr string
		want         bool
	}{
		{"10.0.0.0/8", "10.1.2.3", true},
		{"10.0.0.0/8", "::ffff:10.1.2.3", true},
		{"10.0.0.0/8", "11.0.0.1", false},
		{"::/0", "10.1.2.3", true},
		{"::/0", "2001:db8::1", true},
		{"::ffff:10.0.0.0/104", "10.9.9.9", true},
		{"::ffff:10.0.0.0/104", "11.9.9.9", false},
		{"::ffff:0:0/96", "192.0.2.1", true},
		{"2001:db8::/32", "10.1.2.3", false},
		{"2001:db8::/32", "2001:db8::5", true},
		{"10.0.0.0/8", "2001:db8::5", false},
		{"0.0.0.0/0", "2001:db8::5", false},
		{"0.0.0.0/0", "::ffff:1.2.3.4", true},
	}
	for _, c := range cases {
		p, a := netip.MustParsePrefix(c.prefix), netip.MustParseAddr(c.addr)
		if got := PrefixHolds(p, a); got != c.want {
			t.Errorf("PrefixHolds(%s, %s) = %v, want %v", p, a, got, c.want)
		}
	}
	if PrefixHolds(netip.Prefix{}, netip.MustParseAddr("10.0.0.1")) || AnyHolds(nil, netip.MustParseAddr("10.0.0.1")) {
		t.Error("an invalid prefix or an empty list holds an address")
	}
}
