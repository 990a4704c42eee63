package entity

import (
	"net/netip"
	"slices"
	"strconv"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/internal/addr"
)

// configuredPeer is one entities.peers prefix.
type configuredPeer struct {
	prefix netip.Prefix
	name   string // the canonical prefix, the entity's name
	quota  config.Quota
}

// compilePeers orders the configured prefixes longest first (the data
// path's trie decides the same way), equal lengths in a fixed order.
func compilePeers(peers map[string]config.Quota) []configuredPeer {
	var out []configuredPeer
	for name, q := range peers {
		if name == config.DefaultKey {
			continue
		}
		p, err := netip.ParsePrefix(name)
		if err != nil {
			continue // validated by the config loader; unreachable
		}
		out = append(out, configuredPeer{prefix: p, name: name, quota: q})
	}
	slices.SortFunc(out, func(a, b configuredPeer) int {
		if ab, bb := prefixBits(a.prefix), prefixBits(b.prefix); ab != bb {
			return bb - ab
		}
		return a.prefix.Addr().Compare(b.prefix.Addr())
	})
	return out
}

// prefixBits counts an IPv4 prefix as its v4-mapped IPv6 length, as the
// data path's trie does.
func prefixBits(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 96 + p.Bits()
	}
	return p.Bits()
}

// Peers lists the configured peer prefixes and their entities, longest
// first: what the data path's trie holds for each TLS listener.
func (p *Policy) Peers() []PeerRule {
	out := make([]PeerRule, len(p.peers))
	for i, c := range p.peers {
		out[i] = PeerRule{Prefix: c.prefix, Key: Key{Kind: KindPeer, Name: c.name}}
	}
	return out
}

// PeerRule is one prefix and the entity its peers share.
type PeerRule struct {
	Prefix netip.Prefix
	Key    Key
}

// ByPeer returns the entity of a TLS listener's connection from addr: the
// longest configured prefix holding it, else the listener's own entity.
// The data path decides the same at connection start; the agent asks this
// for connections that were open before the table changed.
func (p *Policy) ByPeer(port uint16, a netip.Addr) Key {
	for _, c := range p.peers {
		if addr.PrefixHolds(c.prefix, a) {
			return Key{Kind: KindPeer, Name: c.name}
		}
	}
	return ListenerKey(port)
}

// ListenerKey names a TLS listener's entity.
func ListenerKey(port uint16) Key { return Key{Kind: KindListener, Name: strconv.Itoa(int(port))} }
