package entity

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestRegistryDenseStableIDs(t *testing.T) {
	r := NewRegistry(3)
	now := time.Unix(1000, 0)
	a := r.Acquire(Key{KindClient, "a"}, now)
	b := r.Acquire(Key{KindTopicPartition, "t-0"}, now)
	if a != firstDynamicID || b != firstDynamicID+1 {
		t.Fatalf("ids %d %d, want dense from %d", a, b, firstDynamicID)
	}
	if again := r.Acquire(Key{KindClient, "a"}, now); again != a {
		t.Errorf("same key got %d then %d", a, again)
	}
	if r.Acquire(Key{Kind: KindUnknown}, now) != UnknownID || r.Acquire(Key{Kind: KindOverflow}, now) != OverflowID {
		t.Error("unknown and overflow have fixed ids")
	}
	// A client and a topic-partition with the same name are different entities.
	if x := r.Acquire(Key{KindClient, "t-0"}, now); x == b {
		t.Error("kinds share an id")
	}
	if r.Len() != 3 || r.Limit() != 5 {
		t.Errorf("len %d limit %d", r.Len(), r.Limit())
	}
}

func TestRegistryOverflow(t *testing.T) {
	r := NewRegistry(2)
	now := time.Unix(0, 0)
	r.Acquire(Key{KindClient, "a"}, now)
	r.Acquire(Key{KindClient, "b"}, now)
	for i, name := range []string{"c", "d", "c"} {
		if id := r.Acquire(Key{KindClient, name}, now); id != OverflowID {
			t.Errorf("acquire %d beyond max: %d, want overflow", i, id)
		}
	}
	if r.Overflowed != 3 {
		t.Errorf("overflow counted %d, want 3", r.Overflowed)
	}
	if _, ok := r.Lookup(Key{KindClient, "c"}); ok {
		t.Error("an overflowed key is registered")
	}
}

// An idle entity is reclaimed in two phases: out of the table at once (the
// same key comes back with a new id), reusable only after Release.
func TestRegistryReclaimIsSafe(t *testing.T) {
	r := NewRegistry(10)
	t0 := time.Unix(0, 0)
	idle := time.Hour
	a := r.Acquire(Key{KindClient, "a"}, t0)
	b := r.Acquire(Key{KindClient, "b"}, t0)
	r.Touch(b, t0.Add(30*time.Minute))
	reclaimed := r.Reclaim(t0.Add(idle), idle)
	if len(reclaimed) != 1 || reclaimed[0] != a {
		t.Fatalf("reclaimed %v, want only %d", reclaimed, a)
	}
	if _, ok := r.Key(a); ok {
		t.Error("reclaimed id still live")
	}
	// Before Release, a new entity must not get the old id.
	c := r.Acquire(Key{KindClient, "c"}, t0.Add(idle))
	again := r.Acquire(Key{KindClient, "a"}, t0.Add(idle))
	if c == a || again == a {
		t.Fatalf("id %d reused before Release (c=%d, a again=%d)", a, c, again)
	}
	r.Release(reclaimed)
	d := r.Acquire(Key{KindClient, "d"}, t0.Add(idle))
	if d != a {
		t.Errorf("released id %d not reused (got %d)", a, d)
	}
	// Releasing twice, or releasing a live id, changes nothing.
	r.Release(reclaimed)
	r.Release([]ID{b})
	if k, ok := r.Key(b); !ok || k.Name != "b" {
		t.Error("release of a live id removed it")
	}
	e := r.Acquire(Key{KindClient, "e"}, t0)
	if e == d || e == b {
		t.Errorf("double release handed out a live id %d", e)
	}
	var seen []string
	r.Each(func(id ID, k Key) { seen = append(seen, k.String()) })
	if len(seen) != 2+r.Len() {
		t.Errorf("Each saw %v", seen)
	}
}

func TestRegistryRestoreKeepsIDs(t *testing.T) {
	now := time.Unix(0, 0)
	r := NewRegistry(10)
	skipped := r.Restore(map[ID]Key{
		5:  {KindClient, "core"},
		3:  {KindTopicPartition, "orders-0"},
		0:  {KindClient, "bad"},  // reserved
		99: {KindClient, "far"},  // beyond max
		7:  {KindClient, "core"}, // duplicate key
	}, now)
	if len(skipped) != 3 {
		t.Errorf("skipped %v, want 3", skipped)
	}
	if id, ok := r.Lookup(Key{KindClient, "core"}); !ok || (id != 5 && id != 7) {
		t.Errorf("core at %d %v", id, ok)
	}
	if id, _ := r.Lookup(Key{KindTopicPartition, "orders-0"}); id != 3 {
		t.Errorf("orders-0 at %d, want 3", id)
	}
	// New entities fill the gaps, never a restored id.
	seen := map[ID]bool{}
	for i := 0; i < 6; i++ {
		id := r.Acquire(Key{KindClient, string(rune('a' + i))}, now)
		if id == 3 || seen[id] {
			t.Fatalf("new entity got id %d (taken)", id)
		}
		seen[id] = true
	}
}

// Configured entities are pinned: registered up front, never reclaimed,
// never pushed into overflow however many unconfigured ids clients invent.
func TestRegistryPinnedEntitiesCannotBeTaken(t *testing.T) {
	r := NewRegistry(10)
	r.SetUnconfiguredBudget(6)
	t0 := time.Unix(0, 0)
	core, orders := Key{KindClient, "core"}, Key{KindTopicPartition, "orders-0"}
	added := r.Pin([]Key{core, orders}, t0)
	if len(added) != 2 {
		t.Fatalf("pinned ids %v, want two", added)
	}
	for i := range 100 {
		r.Acquire(Key{KindClient, fmt.Sprint("random-", i)}, t0)
	}
	if r.Unconfigured() != 6 || r.Len() != 8 || r.Overflowed != 94 {
		t.Errorf("unconfigured %d, live %d, overflowed %d; want 6, 8, 94", r.Unconfigured(), r.Len(), r.Overflowed)
	}
	if id, ok := r.Lookup(core); !ok || id != added[0] {
		t.Errorf("core is %d %v, want %d", id, ok, added[0])
	}
	// Idle for ever: the unconfigured go, the pinned stay.
	reclaimed := r.Reclaim(t0.Add(48*time.Hour), time.Hour)
	r.Release(reclaimed)
	if len(reclaimed) != 6 || r.Len() != 2 || r.Unconfigured() != 0 {
		t.Errorf("reclaimed %d, live %d, unconfigured %d; want 6, 2, 0", len(reclaimed), r.Len(), r.Unconfigured())
	}
	// A reload that drops core from the configuration unpins it: it is an
	// ordinary entity again, idle from the reload on.
	t1 := t0.Add(49 * time.Hour)
	if added := r.Pin([]Key{orders}, t1); len(added) != 0 {
		t.Errorf("re-pinning a registered key assigned %v", added)
	}
	if r.Unconfigured() != 1 {
		t.Errorf("unconfigured %d after unpinning core, want 1", r.Unconfigured())
	}
	if got := r.Reclaim(t1.Add(time.Minute), time.Hour); len(got) != 0 {
		t.Errorf("an unpinned entity was reclaimed before its idle timeout: %v", got)
	}
	if got := r.Reclaim(t1.Add(time.Hour), time.Hour); len(got) != 1 || got[0] != added[0] {
		t.Errorf("reclaimed %v, want core's id %d", got, added[0])
	}
}

// The unresolved entity is registered as if configured (never reclaimed,
// never unpinned by a Pin of the configured set) yet counts against the
// unconfigured budget, registered or restored: the room configured
// entities have (max less the budget) stays theirs.
func TestRegistryUnresolvedCountsAgainstTheBudget(t *testing.T) {
	now := time.Unix(0, 0)
	r := NewRegistry(4)
	r.SetUnconfiguredBudget(2)
	id := r.Acquire(UnresolvedKey, now)
	if id == OverflowID || !r.Pinned(id) || r.Unconfigured() != 1 {
		t.Fatalf("unresolved: id %d pinned %v unconfigured %d, want its own pinned id counted once", id, r.Pinned(id), r.Unconfigured())
	}
	r.Pin([]Key{{KindClient, "c1"}, {KindClient, "c2"}}, now)
	r.Pin([]Key{{KindClient, "c3"}}, now) // a reload: c1 and c2 become ordinary
	if got, _ := r.Lookup(UnresolvedKey); got != id || !r.Pinned(id) {
		t.Errorf("after a reload's Pin: unresolved %d pinned %v, want %d pinned", got, r.Pinned(got), id)
	}
	if out := r.Reclaim(now.Add(time.Hour), time.Minute); slices.Contains(out, id) {
		t.Errorf("unresolved reclaimed: %v", out)
	}
	restored := NewRegistry(4)
	restored.SetUnconfiguredBudget(2)
	restored.Restore(map[ID]Key{id: UnresolvedKey}, now)
	if restored.Unconfigured() != 1 || !restored.Pinned(id) {
		t.Errorf("restored: unconfigured %d pinned %v, want 1 and pinned", restored.Unconfigured(), restored.Pinned(id))
	}
}

// Idle means idle for at least the timeout, to the nanosecond, on wall and
// monotonic clock readings alike.
func TestRegistryReclaimBoundary(t *testing.T) {
	idle := time.Minute
	for name, t0 := range map[string]time.Time{"wall": time.Unix(1_000_000, 0), "monotonic": time.Now()} {
		r := NewRegistry(10)
		id := r.Acquire(Key{KindClient, "a"}, t0)
		if got := r.Reclaim(t0.Add(idle-time.Nanosecond), idle); len(got) != 0 {
			t.Errorf("%s: reclaimed %v a nanosecond before the timeout", name, got)
		}
		if got := r.Reclaim(t0.Add(idle), idle); len(got) != 1 || got[0] != id {
			t.Errorf("%s: reclaimed %v at the timeout, want [%d]", name, got, id)
		}
	}
}
