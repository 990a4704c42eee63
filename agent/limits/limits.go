// Package limits is the control cycle's resolve stage: the one place that
// decides an entity's reservation, weight and limit in a direction, and
// says where each came from. Its sources, in order of precedence:
//
//  1. a cluster budget's share (limit and reservation), when the cluster
//     section enforces and a budget governs the entity;
//  2. the policy: the configuration's entities compiled with Kafka's
//     imported client quotas (KIP-55 precedence, entity.Policy), templates
//     and defaults.
//
// The latency objectives are not a source of limits: they cap what the
// allocator distributes to best-effort entities (an allocation input,
// allocator.Trim). The unknown entity is outside the allocation (held to
// the strictest limit in force, agent/unknownlimit.go), and so outside
// this package.
package limits

import (
	"github.com/sluice-dev/sluice/agent/entity"
)

// Share replaces an entity's limit and reservation: its part of a
// cluster budget.
type Share struct{ Limit, Reservation float64 }

// Shares is the source of cluster shares (nil: none).
type Shares interface {
	// Share returns the share governing key in dir, if one does and is
	// enforced.
	Share(key entity.Key, dir entity.Direction) (Share, bool)
	// Governs says whether a budget governs key in dir at all: fixed for
	// the agent's life (the cluster section changes only with a restart),
	// so it is cached per id and the shares of the many entities no
	// budget names are never looked up.
	Governs(key entity.Key, dir entity.Direction) bool
}

// Resolver resolves entities' parameters. The policy's part is cached per
// entity id until the policy changes (resolving walks templates and
// prefixes); shares are read on every call, as they move between cycles.
type Resolver struct {
	policy *entity.Policy
	gen    uint64
	shares Shares
	cache  [2]cache
}

type cache struct {
	params   []entity.Params
	sources  []entity.Sources
	governed []bool   // a cluster budget governs the entity (Shares.Governs)
	gen      []uint64 // the policy generation params[id] was resolved under (0: none)
}

// New returns a resolver for entity ids below entities.
func New(policy *entity.Policy, shares Shares, entities int) *Resolver {
	r := &Resolver{policy: policy, gen: 1, shares: shares}
	for d := range r.cache {
		r.cache[d] = cache{params: make([]entity.Params, entities), sources: make([]entity.Sources, entities),
			governed: make([]bool, entities), gen: make([]uint64, entities)}
	}
	return r
}

// Policy is the policy in force.
func (r *Resolver) Policy() *entity.Policy { return r.policy }

// SetPolicy puts a policy in force (a reload, an import, an undo): every
// cached parameter is stale.
func (r *Resolver) SetPolicy(p *entity.Policy) {
	r.policy = p
	r.gen++
}

// Forget drops what is cached for a reclaimed id.
func (r *Resolver) Forget(id entity.ID) {
	for d := range r.cache {
		r.cache[d].gen[id] = 0
	}
}

// Resolve returns the parameters of entity id (key) in dir, where each
// came from, and whether a cluster share set them.
func (r *Resolver) Resolve(id entity.ID, key entity.Key, dir entity.Direction) (entity.Params, entity.Sources, bool) {
	c := &r.cache[dir]
	if c.gen[id] != r.gen {
		c.params[id], c.sources[id] = r.policy.Explain(key, dir)
		c.governed[id] = r.shares != nil && r.shares.Governs(key, dir)
		c.gen[id] = r.gen
	}
	if !c.governed[id] {
		return c.params[id], c.sources[id], false
	}
	return r.withShare(key, dir, c.params[id], c.sources[id])
}

// Governed says whether a cluster budget governs entity id in dir, as
// the last Resolve of it found (false before any).
func (r *Resolver) Governed(id entity.ID, dir entity.Direction) bool {
	c := &r.cache[dir]
	return c.gen[id] == r.gen && c.governed[id]
}

// withShare lets a cluster share override the policy's limit and
// reservation.
func (r *Resolver) withShare(key entity.Key, dir entity.Direction, p entity.Params, src entity.Sources) (entity.Params, entity.Sources, bool) {
	if r.shares == nil {
		return p, src, false
	}
	s, ok := r.shares.Share(key, dir)
	if !ok {
		return p, src, false
	}
	p.Limit, p.Reservation = s.Limit, s.Reservation
	src.Limit, src.Reservation = entity.SourceCluster, entity.SourceCluster
	return p, src, true
}

// ResolveKey is Resolve for an entity without an id yet or outside the
// cache (explain, a standby limit): nothing is cached.
func (r *Resolver) ResolveKey(key entity.Key, dir entity.Direction) (entity.Params, entity.Sources, bool) {
	p, src := r.policy.Explain(key, dir)
	return r.withShare(key, dir, p, src)
}
