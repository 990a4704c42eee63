// Package addr matches peer addresses against prefixes the way the data
// path's LPM tries do, so that Go and BPF agree on every address.
package addr

import "net/netip"

// PrefixHolds reports whether p holds a as the data path's tries decide:
// they key IPv4 as v4-mapped IPv6, so an IPv6 prefix that covers
// ::ffff:0:0/96 (::/0, ::ffff:10.0.0.0/104) holds IPv4 addresses too, and
// an IPv4 prefix holds a v4-mapped address. netip.Prefix.Contains says no
// across families.
func PrefixHolds(p netip.Prefix, a netip.Addr) bool {
	if !p.IsValid() || !a.IsValid() {
		return false
	}
	if p.Addr().Is4() {
		return a.Unmap().Is4() && p.Contains(a.Unmap())
	}
	return p.Contains(netip.AddrFrom16(a.As16()))
}

// AnyHolds reports whether one of prefixes holds a (PrefixHolds).
func AnyHolds(prefixes []netip.Prefix, a netip.Addr) bool {
	for _, p := range prefixes {
		if PrefixHolds(p, a) {
			return true
		}
	}
	return false
}
