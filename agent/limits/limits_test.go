package limits

import (
	"testing"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
)

func ptr(v float64) *float64 { return &v }

type fixedShares map[entity.Key]Share

func (f fixedShares) Share(k entity.Key, _ entity.Direction) (Share, bool) {
	s, ok := f[k]
	return s, ok
}

func (f fixedShares) Governs(k entity.Key, _ entity.Direction) bool {
	_, ok := f[k]
	return ok
}

func policy(rate float64) *entity.Policy {
	return entity.NewPolicy(config.Entities{Clients: map[string]config.Quota{
		"orders": {ConsumerByteRate: ptr(rate), ConsumerByteReservation: ptr(rate / 10), QuotaWeight: ptr(3)},
		"shared": {ConsumerByteRate: ptr(rate)},
	}})
}

// Every source and its precedence: the cluster share over the policy's
// limit and reservation (weight from the policy whatever), the policy
// over defaults.
func TestResolvePrecedence(t *testing.T) {
	orders := entity.Key{Kind: entity.KindClient, Name: "orders"}
	shared := entity.Key{Kind: entity.KindClient, Name: "shared"}
	other := entity.Key{Kind: entity.KindClient, Name: "nobody-configured"}
	r := New(policy(1000), fixedShares{shared: {Limit: 300, Reservation: 40}}, 8)
	cases := []struct {
		name        string
		id          entity.ID
		key         entity.Key
		limit, res  float64
		weight      float64
		limitSource entity.Source
		fromCluster bool
	}{
		{"configured client", 2, orders, 1000, 100, 3, entity.SourceFile, false},
		{"cluster share over the file", 3, shared, 300, 40, 1, entity.SourceCluster, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, src, fromCluster := r.Resolve(c.id, c.key, entity.Fetch)
			if p.Limit != c.limit || p.Reservation != c.res || p.Weight != c.weight || src.Limit != c.limitSource || fromCluster != c.fromCluster {
				t.Errorf("got %+v from %+v (cluster %v); want limit %v res %v weight %v from %v", p, src, fromCluster, c.limit, c.res, c.weight, c.limitSource)
			}
			kp, ksrc, kc := r.ResolveKey(c.key, entity.Fetch)
			if kp != p || ksrc != src || kc != fromCluster {
				t.Errorf("ResolveKey %+v %+v %v differs from Resolve", kp, ksrc, kc)
			}
		})
	}
	p, src, _ := r.Resolve(4, other, entity.Fetch)
	if src.Limit == entity.SourceFile || src.Limit == entity.SourceCluster {
		t.Errorf("an unconfigured client resolved from %v (%+v)", src.Limit, p)
	}
}

// A new policy (reload, import, undo) is never answered from the cache.
func TestResolveFollowsPolicy(t *testing.T) {
	orders := entity.Key{Kind: entity.KindClient, Name: "orders"}
	r := New(policy(1000), nil, 8)
	if p, _, _ := r.Resolve(2, orders, entity.Fetch); p.Limit != 1000 {
		t.Fatalf("limit %v", p.Limit)
	}
	r.SetPolicy(policy(500))
	if p, _, _ := r.Resolve(2, orders, entity.Fetch); p.Limit != 500 {
		t.Errorf("after a new policy the cached limit %v stayed; want 500", p.Limit)
	}
	// A reclaimed id reused by another entity resolves that entity.
	r.Forget(2)
	if p, _, _ := r.Resolve(2, entity.Key{Kind: entity.KindClient, Name: "shared"}, entity.Fetch); p.Weight != 1 {
		t.Errorf("reused id answered with the old entity's weight %v", p.Weight)
	}
}

// Governed follows the shares' membership per id, as the last Resolve
// found it, and forgets a reclaimed id.
func TestGoverned(t *testing.T) {
	orders := entity.Key{Kind: entity.KindClient, Name: "orders"}
	shared := entity.Key{Kind: entity.KindClient, Name: "shared"}
	r := New(policy(100), fixedShares{orders: {Limit: 10}}, 8)
	if r.Governed(2, entity.Fetch) {
		t.Error("governed before any resolve")
	}
	r.Resolve(2, orders, entity.Fetch)
	r.Resolve(3, shared, entity.Fetch)
	if !r.Governed(2, entity.Fetch) || r.Governed(3, entity.Fetch) {
		t.Errorf("governed: orders %v, shared %v; want true, false", r.Governed(2, entity.Fetch), r.Governed(3, entity.Fetch))
	}
	r.Forget(2)
	if r.Governed(2, entity.Fetch) {
		t.Error("a reclaimed id is still governed")
	}
}
