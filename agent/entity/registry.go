package entity

import (
	"maps"
	"math"
	"slices"
	"time"
)

// ID is an entity's dense index in the data path's per-entity maps.
type ID uint32

const (
	// UnknownID is the entity of bytes not yet attributed (one per direction:
	// counters and rates are per direction).
	UnknownID ID = 0
	// OverflowID takes every new entity once the registry is full.
	OverflowID ID = 1
	// NotGoverned marks a connection the data path passes untouched
	// (replication, internal topics). It is never an index.
	NotGoverned ID = math.MaxUint32

	firstDynamicID ID = 2
)

// Registry gives entities stable dense ids, at most max of them, and
// reclaims idle ones. Configured entities are pinned: registered before any
// traffic, never reclaimed, never pushed into overflow. Entities nobody
// configured (client-ids chosen by clients) draw from a budget of their
// own, so however many a client invents, configured tenants keep theirs. Reclaiming is two-phase so an id is never reused
// while the data path may still hold state for its old entity: Reclaim
// takes idle entities out of the table (a new request for the same key gets
// a new id), the agent clears their map slots and allocator memory, and only
// Release makes the ids available again. Not safe for concurrent use.
type Registry struct {
	max int
	// unconfiguredMax bounds the live entities that are not pinned.
	unconfiguredMax int
	unconfigured    int // live unpinned entities, and the unresolved one
	byKey           map[Key]ID
	slots           []slot // indexed by ID; the first two are UnknownID and OverflowID
	free            []ID
	// reclaiming: ids Reclaim took out and Release has not made free yet
	// (their cleanup may have failed: the agent retries them).
	reclaiming []ID
	// Overflowed counts the acquisitions that got OverflowID.
	Overflowed uint64
}

type slot struct {
	key        Key
	used       bool // in byKey
	pinned     bool // configured: never reclaimed
	reclaiming bool // taken out, not yet released
	lastActive time.Time
}

// NewRegistry returns a registry for at most max dynamic entities.
func NewRegistry(max int) *Registry {
	r := &Registry{max: max, unconfiguredMax: max, byKey: make(map[Key]ID)}
	r.slots = []slot{
		{key: Key{Kind: KindUnknown}, used: true},
		{key: Key{Kind: KindOverflow}, used: true},
	}
	return r
}

// SetUnconfiguredBudget bounds the entities that are not pinned (at most
// max). Lowering it below the live count reclaims nothing: new unpinned
// keys overflow until idle ones are reclaimed.
func (r *Registry) SetUnconfiguredBudget(n int) { r.unconfiguredMax = min(n, r.max) }

// UnconfiguredBudget is how many live unconfigured entities the registry
// takes before new ones go to overflow.
func (r *Registry) UnconfiguredBudget() int { return r.unconfiguredMax }

// Pin makes exactly the given keys the pinned (configured) ones: each is
// registered if new and is never reclaimed; keys pinned before and absent
// now become ordinary entities. It returns the ids it assigned to keys that
// were not registered. Pinned keys are never refused while the registry
// has ids: callers keep Σ pinned + unconfigured budget ≤ max.
func (r *Registry) Pin(keys []Key, now time.Time) (added []ID) {
	want := make(map[Key]bool, len(keys))
	for _, k := range keys {
		want[k] = true
	}
	for id := firstDynamicID; int(id) < len(r.slots); id++ {
		s := &r.slots[id]
		if s.used && s.pinned && !want[s.key] && s.key.Kind != KindUnresolved {
			s.pinned = false
			s.lastActive = now // idle from now on, not since it was configured
			r.unconfigured++
		}
	}
	for _, k := range keys {
		if id, ok := r.byKey[k]; ok {
			if s := &r.slots[id]; !s.pinned {
				s.pinned = true
				r.unconfigured--
			}
			continue
		}
		id, ok := r.assign(k, now)
		if !ok {
			r.Overflowed++
			continue
		}
		r.slots[id].pinned = true
		added = append(added, id)
	}
	return added
}

// assign gives k a free id (not counting it against any budget). It never
// hands out an id at or past Limit, the size of every per-entity array: ids
// held by reclaims not yet released count against it.
func (r *Registry) assign(k Key, now time.Time) (ID, bool) {
	if len(r.byKey) >= r.max {
		return 0, false
	}
	var id ID
	if n := len(r.free); n > 0 {
		id, r.free = r.free[n-1], r.free[:n-1]
	} else {
		if len(r.slots) >= r.Limit() {
			return 0, false
		}
		id = ID(len(r.slots))
		r.slots = append(r.slots, slot{})
	}
	r.slots[id] = slot{key: k, used: true, lastActive: now}
	r.byKey[k] = id
	return id, true
}

// Acquire returns the id of k, assigning one if k is new. A new key is an
// unconfigured entity: when their budget (or the registry) is full it gets
// OverflowID, and Overflowed counts it.
func (r *Registry) Acquire(k Key, now time.Time) ID {
	switch k.Kind {
	case KindUnknown:
		return UnknownID
	case KindOverflow:
		return OverflowID
	}
	if id, ok := r.byKey[k]; ok {
		r.slots[id].lastActive = now
		return id
	}
	if k.Kind == KindUnresolved {
		// Registered on first use, pinned so that idling never reclaims
		// it, and not refused by the unconfigured budget, though it counts
		// against it: nobody configured it, and counted there the
		// configured entities' room (max less the budget) stays theirs
		// across reloads. The caller keeps room for it (the agent
		// registers it before a client's entity would take the budget's
		// or the registry's last id).
		id, ok := r.assign(k, now)
		if !ok {
			r.Overflowed++
			return OverflowID
		}
		r.slots[id].pinned = true
		r.unconfigured++
		return id
	}
	if r.unconfigured >= r.unconfiguredMax {
		r.Overflowed++
		return OverflowID
	}
	id, ok := r.assign(k, now)
	if !ok {
		r.Overflowed++
		return OverflowID
	}
	r.unconfigured++
	return id
}

// Pinned reports whether id is a live configured entity.
func (r *Registry) Pinned(id ID) bool {
	return int(id) < len(r.slots) && r.slots[id].used && r.slots[id].pinned
}

// Unconfigured is the number of live entities nobody configured: those
// that are not pinned, and the unresolved entity once registered.
func (r *Registry) Unconfigured() int { return r.unconfigured }

// Lookup returns the id of a known key.
func (r *Registry) Lookup(k Key) (ID, bool) {
	switch k.Kind {
	case KindUnknown:
		return UnknownID, true
	case KindOverflow:
		return OverflowID, true
	}
	id, ok := r.byKey[k]
	return id, ok
}

// Key returns the key of a live id.
func (r *Registry) Key(id ID) (Key, bool) {
	if int(id) >= len(r.slots) || !r.slots[id].used {
		return Key{}, false
	}
	return r.slots[id].key, true
}

// Touch records activity (bytes counted, or a live connection bound to it).
func (r *Registry) Touch(id ID, now time.Time) {
	if int(id) < len(r.slots) && r.slots[id].used {
		r.slots[id].lastActive = now
	}
}

// Reclaim takes every dynamic entity idle for at least idle out of the
// table and returns their ids. They are not reused until Release.
func (r *Registry) Reclaim(now time.Time, idle time.Duration) []ID {
	var out []ID
	// Idle for at least idle: last active no later than cutoff (one
	// comparison per entity instead of a subtraction's overflow checks).
	cutoff := now.Add(-idle)
	for id := firstDynamicID; int(id) < len(r.slots); id++ {
		s := &r.slots[id]
		if s.used && !s.pinned && !s.lastActive.After(cutoff) {
			delete(r.byKey, s.key)
			s.used, s.reclaiming = false, true
			r.unconfigured--
			out = append(out, id)
		}
	}
	r.reclaiming = append(r.reclaiming, out...)
	return out
}

// Reclaiming lists the ids taken out and not released yet: those of the
// last Reclaim and those whose cleanup failed before.
func (r *Registry) Reclaiming() []ID { return slices.Clone(r.reclaiming) }

// Release makes reclaimed ids available, once the caller has cleared every
// trace of their old entities.
func (r *Registry) Release(ids []ID) {
	for _, id := range ids {
		if int(id) < len(r.slots) && r.slots[id].reclaiming {
			r.slots[id] = slot{}
			r.free = append(r.free, id)
		}
	}
	r.reclaiming = slices.DeleteFunc(r.reclaiming, func(id ID) bool { return !r.slots[id].reclaiming })
}

// Len is the number of live dynamic entities.
func (r *Registry) Len() int { return len(r.byKey) }

// Limit is the highest id the registry can hand out plus one: the size the
// data path's per-entity maps need.
func (r *Registry) Limit() int { return r.max + int(firstDynamicID) }

// Extent is one past the highest id the registry ever handed out (or
// restored): no id at or past it belongs to an entity, so the data path
// counts nothing there.
func (r *Registry) Extent() int { return len(r.slots) }

// Each calls fn for every live entity, unknown and overflow included, in id order.
func (r *Registry) Each(fn func(ID, Key)) {
	for id := range r.slots {
		if r.slots[id].used {
			fn(ID(id), r.slots[id].key)
		}
	}
}

// Restore rebuilds the registry from saved (id, key) pairs, so that ids the
// data path still holds (pinned connection bindings) keep their entities
// after an agent restart. Ids outside the registry's range, reserved ids
// and duplicate keys are skipped and returned.
func (r *Registry) Restore(saved map[ID]Key, now time.Time) (skipped []ID) {
	highest := ID(0)
	for id := range saved {
		highest = max(highest, id)
	}
	for id, key := range saved {
		if id < firstDynamicID || int(id) >= r.Limit() || key.Kind == KindUnknown || key.Kind == KindOverflow {
			skipped = append(skipped, id)
			continue
		}
		if _, dup := r.byKey[key]; dup {
			skipped = append(skipped, id)
			continue
		}
		for int(id) >= len(r.slots) {
			r.free = append(r.free, ID(len(r.slots)))
			r.slots = append(r.slots, slot{})
		}
		r.slots[id] = slot{key: key, used: true, lastActive: now}
		r.byKey[key] = id
		if key.Kind == KindUnresolved {
			r.slots[id].pinned = true // as Acquire registers it
		}
		r.unconfigured++ // until Pin says it is configured (unresolved: never)
	}
	// Free ids are those below the highest restored id that stayed empty.
	free := r.free[:0]
	for _, id := range r.free {
		if !r.slots[id].used {
			free = append(free, id)
		}
	}
	r.free = free
	return skipped
}

// Clone is a deep copy: a reload keeps one to put the registry back
// exactly (pinning, ids, free list) when it is refused after pinning.
func (r *Registry) Clone() *Registry {
	c := *r
	c.byKey = maps.Clone(r.byKey)
	c.slots = slices.Clone(r.slots)
	c.free = slices.Clone(r.free)
	c.reclaiming = slices.Clone(r.reclaiming)
	return &c
}

// RestoreFrom makes r what the clone c was.
func (r *Registry) RestoreFrom(c *Registry) { *r = *c.Clone() }
