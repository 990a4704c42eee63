package allocator

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// capSumOfLimits is the trim as it was before it became an allocator
// input (agent/objectives, after the allocation): every best-effort
// limit, idle or not, came down towards one common ceiling until the
// limits summed to the target, never below floor. Kept here only to show
// what the allocator input fixes.
func capSumOfLimits(limits []float64, floor, target float64) []float64 {
	sorted := append([]float64(nil), limits...)
	sort.Float64s(sorted)
	out := make([]float64, len(limits))
	sumAt := func(ceiling float64) float64 {
		s := 0.0
		for _, l := range limits {
			s += max(min(floor, l), min(l, ceiling))
		}
		return s
	}
	lo, hi := 0.0, sorted[len(sorted)-1]
	if sumAt(hi) <= target {
		copy(out, limits)
		return out
	}
	for range 200 {
		mid := (lo + hi) / 2
		if sumAt(mid) > target {
			hi = mid
		} else {
			lo = mid
		}
	}
	for i, l := range limits {
		out[i] = max(min(floor, l), min(l, lo))
	}
	return out
}

// trimCase is a produce direction of 100 MB/s (90 % distributed): core,
// reserved and protected, the backfill sending 60 MB/s, and idle
// best-effort entities: clients that sent a little within the activity
// memory (so active, with a share of the headroom) and nothing now.
func trimCase(idle int) (Config, []Entity) {
	cfg := DefaultConfig(100e6)
	cfg.SafetyRatio = 0.9
	cfg.MinLimit = 128 << 10
	cfg.ActivityThreshold = 1
	cfg.MemoryCycles = 10
	ents := []Entity{
		{Slot: 0, Reservation: 20e6, Weight: 1, Limit: Unlimited, Usage: 10e6, Protected: true}, // core
		{Slot: 1, Weight: 1, Limit: Unlimited, Usage: 60e6},                                     // the backfill
	}
	for i := range idle {
		ents = append(ents, Entity{Slot: uint32(2 + i), Weight: 1, Limit: Unlimited})
	}
	return cfg, ents
}

// At level 0.80 the active backfill is held to 80 % of its usage however
// many idle best-effort entities share the direction; capping the sum of
// limits (before) cut it to a fraction of that, the smaller the more idle
// ids there were.
func TestTrimIdleBestEffortTakeNothing(t *testing.T) {
	for _, idle := range []int{4, 50} {
		cfg, ents := trimCase(idle)
		// The idle ones sent a little once: active, within the memory.
		warm := append([]Entity(nil), ents...)
		for i := 2; i < len(warm); i++ {
			warm[i].Usage = 1000
		}
		out := make([]Allocation, len(ents))
		a, _ := New(cfg)
		twin, _ := New(cfg)
		for _, x := range []*Allocator{a, twin} {
			if _, err := x.Cycle(warm, out); err != nil {
				t.Fatal(err)
			}
		}
		// Untrimmed, then the old trim on it: the breaker opened at this
		// best-effort usage, level 0.8.
		if _, err := twin.Cycle(ents, out); err != nil {
			t.Fatal(err)
		}
		base := BestEffortUsage(ents)
		var limits []float64
		for i := range ents {
			if ents[i].BestEffort() {
				limits = append(limits, out[i].DynamicLimit)
			}
		}
		before := capSumOfLimits(limits, cfg.MinLimit, 0.8*base)[0] / ents[1].Usage

		s, err := a.CycleTrim(ents, Trim{Enabled: true, Cap: 0.8 * base}, out)
		if err != nil {
			t.Fatal(err)
		}
		after := out[1].DynamicLimit / ents[1].Usage
		t.Logf("%d idle best-effort entities: the backfill held to %.0f %% of its usage before, %.1f %% now", idle, 100*before, 100*after)
		if math.Abs(after-0.8) > 0.01 {
			t.Errorf("%d idle: backfill held to %.3f of its usage, want 0.80", idle, after)
		}
		if before > 0.7 {
			t.Errorf("%d idle: the sum-of-limits trim held the backfill to %.3f: this case no longer shows what the input fixes", idle, before)
		}
		for i := 2; i < len(ents); i++ {
			if out[i].DynamicLimit < cfg.MinLimit {
				t.Errorf("idle entity %d below its floor: %+v", i, out[i])
			}
		}
		if out[0].Trimmed != 0 || out[0].DynamicLimit < 20e6 {
			t.Errorf("core trimmed: %+v", out[0])
		}
		if want := out[1].Trimmed; s.Trimmed < want {
			t.Errorf("summary trimmed %v, less than the backfill's %v", s.Trimmed, want)
		}
	}
}

// Best-effort tenants keep their weights under the cap; reserved and
// protected entities, and two objective entities without reservations,
// give nothing.
func TestTrimKeepsWeightsAndProtects(t *testing.T) {
	cfg := DefaultConfig(1000)
	a, _ := New(cfg)
	ents := []Entity{
		{Slot: 0, Weight: 1, Limit: Unlimited, Usage: 300, Throttled: true},
		{Slot: 1, Weight: 3, Limit: Unlimited, Usage: 300, Throttled: true},
		{Slot: 2, Weight: 1, Limit: Unlimited, Usage: 100, Protected: true},
		{Slot: 3, Weight: 1, Limit: Unlimited, Usage: 100, Protected: true},
		{Slot: 4, Reservation: 50, Weight: 1, Limit: Unlimited, Usage: 100},
	}
	out := make([]Allocation, len(ents))
	if _, err := a.CycleTrim(ents, Trim{Enabled: true, Cap: 400}, out); err != nil {
		t.Fatal(err)
	}
	if math.Abs(out[0].DynamicLimit-100) > 1e-6 || math.Abs(out[1].DynamicLimit-300) > 1e-6 {
		t.Errorf("weights 1 and 3 under a cap of 400: %v and %v, want 100 and 300", out[0].DynamicLimit, out[1].DynamicLimit)
	}
	ref, _ := New(cfg)
	untrimmed := make([]Allocation, len(ents))
	if _, err := ref.Cycle(ents, untrimmed); err != nil {
		t.Fatal(err)
	}
	for i := 2; i < len(ents); i++ {
		if out[i].DynamicLimit != untrimmed[i].DynamicLimit || out[i].Trimmed != 0 {
			t.Errorf("entity %d (protected or reserved) trimmed: %v, untrimmed %v", i, out[i].DynamicLimit, untrimmed[i].DynamicLimit)
		}
	}
	for i := range 2 {
		if got := untrimmed[i].DynamicLimit - out[i].DynamicLimit; math.Abs(got-out[i].Trimmed) > 1e-9 {
			t.Errorf("entity %d: Trimmed %v, limits differ by %v", i, out[i].Trimmed, got)
		}
	}
}

// A cap under the floors holds every best-effort entity at its floor; a
// cap above what they claim leaves each at least its claim and spreads
// the rest by weight, never above the allocation.
func TestTrimFloorsAndSlack(t *testing.T) {
	cfg := DefaultConfig(1000)
	cfg.MinLimit = 50
	ents := []Entity{
		{Slot: 0, Weight: 1, Limit: Unlimited, Usage: 400},
		{Slot: 1, Weight: 1, Limit: Unlimited, Usage: 100},
	}
	out := make([]Allocation, 2)
	a, _ := New(cfg)
	if _, err := a.CycleTrim(ents, Trim{Enabled: true, Cap: 10}, out); err != nil {
		t.Fatal(err)
	}
	if out[0].DynamicLimit != 50 || out[1].DynamicLimit != 50 {
		t.Errorf("cap under the floors: %v, %v; want both at min_limit 50", out[0].DynamicLimit, out[1].DynamicLimit)
	}
	ref, _ := New(cfg)
	untrimmed := make([]Allocation, 2)
	if _, err := ref.Cycle(ents, untrimmed); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CycleTrim(ents, Trim{Enabled: true, Cap: 700}, out); err != nil {
		t.Fatal(err)
	}
	// Claims 400 and 100 are met; 200 more is spread 100 and 100.
	if math.Abs(out[0].DynamicLimit-500) > 1e-6 || math.Abs(out[1].DynamicLimit-200) > 1e-6 {
		t.Errorf("cap 700 over claims of 400 and 100: %v, %v; want 500 and 200", out[0].DynamicLimit, out[1].DynamicLimit)
	}
	if _, err := a.CycleTrim(ents, Trim{Enabled: true, Cap: 1e9}, out); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if out[i].DynamicLimit != untrimmed[i].DynamicLimit || out[i].Trimmed != 0 {
			t.Errorf("a cap above the allocation changed entity %d: %v, want %v", i, out[i].DynamicLimit, untrimmed[i].DynamicLimit)
		}
	}
	if _, err := a.CycleTrim(ents, Trim{Enabled: true, Cap: math.NaN()}, out); err == nil {
		t.Error("a NaN cap was accepted")
	}
}

// On random inputs: only active best-effort limits move, only down, never
// under their effective reservation; what best-effort entities can use
// (each its demand up to its limit) fits the cap, or its floors; when the
// cap covers every claim nobody is held below its claim.
func TestTrimProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 51))
	for n := range 20_000 {
		cfg := DefaultConfig([]float64{1000, 1e9}[r.IntN(2)])
		cfg.SafetyRatio = []float64{1, 0.9}[r.IntN(2)]
		cfg.MinDemand = []float64{0, 10}[r.IntN(2)]
		cfg.MinLimit = []float64{0, 1, cfg.Capacity / 50}[r.IntN(3)]
		ents := make([]Entity, r.IntN(10))
		for i := range ents {
			ents[i] = randomEntity(r, uint32(i), cfg.Capacity)
			ents[i].Protected = r.IntN(5) == 0
		}
		trim := Trim{Enabled: true, Cap: r.Float64() * 1.2 * BestEffortUsage(ents)}
		plain, _ := New(cfg)
		trimmed, _ := New(cfg)
		want, got := make([]Allocation, len(ents)), make([]Allocation, len(ents))
		if _, err := plain.Cycle(ents, want); err != nil {
			t.Fatal(err)
		}
		s, err := trimmed.CycleTrim(ents, trim, got)
		if err != nil {
			t.Fatal(err)
		}
		tol := 1e-9 * cfg.Capacity * float64(len(ents)+1)
		var use, floors, claims, sum float64
		for i, e := range ents {
			w, g := want[i], got[i]
			if !e.BestEffort() || w.State != Active {
				if g.DynamicLimit != w.DynamicLimit || g.Trimmed != 0 {
					t.Fatalf("case %d: entity %d (not active best-effort) moved: %+v → %+v", n, i, w, g)
				}
				continue
			}
			if g.DynamicLimit > w.DynamicLimit+tol || g.DynamicLimit < g.EffectiveReservation-tol {
				t.Fatalf("case %d: entity %d: %v not in [effRes %v, allocation %v]", n, i, g.DynamicLimit, g.EffectiveReservation, w.DynamicLimit)
			}
			if math.Abs(w.DynamicLimit-g.DynamicLimit-g.Trimmed) > tol {
				t.Fatalf("case %d: entity %d: Trimmed %v, moved %v", n, i, g.Trimmed, w.DynamicLimit-g.DynamicLimit)
			}
			claim := min(g.Demand, w.DynamicLimit)
			use += min(claim, g.DynamicLimit)
			floors += min(claim, g.EffectiveReservation)
			claims += claim
			sum += g.Trimmed
		}
		standby := 0.0
		for i, e := range ents {
			if e.BestEffort() && want[i].State != Active {
				standby += e.Usage
			}
		}
		budget := max(0, trim.Cap-standby)
		if use > max(budget, floors)+tol {
			t.Fatalf("case %d: best-effort can use %v, cap leaves %v (floors %v)", n, use, budget, floors)
		}
		if budget >= claims && use < claims-tol {
			t.Fatalf("case %d: cap %v covers the claims %v, yet they are held to %v", n, budget, claims, use)
		}
		if math.Abs(s.Trimmed-sum) > tol {
			t.Fatalf("case %d: summary trimmed %v, entities %v", n, s.Trimmed, sum)
		}
	}
}

// The trim keeps a steady-state cycle free of allocations.
func TestTrimAllocatesNothing(t *testing.T) {
	ents, cfg := realisticMix(1000, 9)
	a, _ := New(cfg)
	out := make([]Allocation, len(ents))
	trim := Trim{Enabled: true, Cap: 0.5 * BestEffortUsage(ents)}
	if _, err := a.CycleTrim(ents, trim, out); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(20, func() { _, _ = a.CycleTrim(ents, trim, out) }); n != 0 {
		t.Errorf("%v allocations per trimmed cycle, want 0", n)
	}
}
