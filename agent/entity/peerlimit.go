package entity

import (
	"net/netip"
	"time"
)

// PeerLimiter caps how fast one peer address may create new unconfigured
// entities: a token bucket per peer (rate per second, burst of ten
// seconds' worth). It keeps at most maxPeers buckets; a peer beyond that
// is refused until Prune frees idle ones, so a host rotating addresses
// cannot grow the limiter either. Not safe for concurrent use.
type PeerLimiter struct {
	rate     float64
	burst    float64
	maxPeers int
	peers    map[netip.Addr]*peerBucket
	// Refused counts new entities refused.
	Refused uint64
}

type peerBucket struct {
	tokens float64
	last   time.Time
}

// NewPeerLimiter allows each peer rate new entities per second.
func NewPeerLimiter(rate float64, maxPeers int) *PeerLimiter {
	return &PeerLimiter{rate: rate, burst: 10 * rate, maxPeers: maxPeers, peers: map[netip.Addr]*peerBucket{}}
}

// SetRate changes the rate (configuration reload); buckets keep their tokens.
func (l *PeerLimiter) SetRate(rate float64) { l.rate, l.burst = rate, 10*rate }

// Allow takes a token for one new entity from peer, or reports false.
func (l *PeerLimiter) Allow(peer netip.Addr, now time.Time) bool {
	b := l.peers[peer]
	if b == nil {
		if len(l.peers) >= l.maxPeers {
			l.Refused++
			return false
		}
		b = &peerBucket{tokens: l.burst, last: now}
		l.peers[peer] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens < 1 {
		l.Refused++
		return false
	}
	b.tokens--
	return true
}

// Prune forgets peers whose buckets have refilled (they would start full
// anyway): what the limiter holds stays bounded by the active peers.
func (l *PeerLimiter) Prune(now time.Time) {
	for peer, b := range l.peers {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.peers, peer)
		}
	}
}

// Peers is how many buckets the limiter holds.
func (l *PeerLimiter) Peers() int { return len(l.peers) }
