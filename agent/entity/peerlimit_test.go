package entity

import (
	"net/netip"
	"testing"
	"time"
)

func TestPeerLimiterCapsNewEntitiesPerPeer(t *testing.T) {
	l := NewPeerLimiter(5, 2)
	t0 := time.Unix(0, 0)
	a, b, c := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3"), netip.MustParseAddr("198.18.0.4")
	allowed := 0
	for range 200 {
		if l.Allow(a, t0) {
			allowed++
		}
	}
	if allowed != 50 { // a burst of ten seconds' worth
		t.Errorf("burst allowed %d, want 50", allowed)
	}
	// Another peer has its own bucket; a third is refused while two are held.
	if !l.Allow(b, t0) || l.Allow(c, t0) {
		t.Error("peers do not have buckets of their own, or the peer cap failed")
	}
	// One second later, a has five more.
	allowed = 0
	for range 20 {
		if l.Allow(a, t0.Add(time.Second)) {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("after 1 s allowed %d, want 5", allowed)
	}
	// Buckets that refilled are forgotten.
	l.Prune(t0.Add(time.Minute))
	if l.Peers() != 0 {
		t.Errorf("%d peers held after they all refilled", l.Peers())
	}
	if l.Refused != 150+1+15 {
		t.Errorf("refused %d, want %d", l.Refused, 150+1+15)
	}
}
