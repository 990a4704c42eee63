package allocator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// tolerance for sums of floats: relative to the magnitudes involved.
func near(a, b, scale float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, scale)
}

// checkInvariants asserts every invariant of docs/design.md §4 on one cycle's
// output, plus the water-filling optimality that "weights only matter among
// entities that claim more" implies.
func checkInvariants(cfg Config, in []Entity, out []Allocation, s Summary) error {
	c := cfg.Distributable()
	var sumEffRes, sumGiven, sumExtra, sumClaims, spare float64
	scale := c + 1
	var level = math.NaN() // common extra/weight of entities whose claim was cut
	for i, e := range in {
		o := out[i]
		limit := e.Limit
		res := math.Min(e.Reservation, limit)
		scale = math.Max(scale, math.Max(res, math.Max(e.Usage, 0)))
		if o.State != Active {
			if want := cfg.StandbyLimit(e.Reservation, e.Limit); o.DynamicLimit != want {
				return fmt.Errorf("entity %d standby limit %v, want %v", i, o.DynamicLimit, want)
			}
			continue
		}
		tol := 1e-9 * math.Max(1, scale)
		if o.EffectiveReservation > o.DynamicLimit+tol || o.DynamicLimit > limit+tol {
			return fmt.Errorf("entity %d: effRes %v ≤ dyn %v ≤ L %v broken", i, o.EffectiveReservation, o.DynamicLimit, limit)
		}
		if floored := math.Max(res, cfg.Floor(limit)); o.EffectiveReservation > floored+tol {
			return fmt.Errorf("entity %d: effRes %v above max(reservation, floor) %v", i, o.EffectiveReservation, floored)
		}
		// Floors fit beside the reservations: every one is honoured.
		if s.ReservedTotal+s.FloorTopUp <= c && o.DynamicLimit < cfg.Floor(limit)-tol {
			return fmt.Errorf("entity %d: dyn %v below its floor %v though floors fit in C", i, o.DynamicLimit, cfg.Floor(limit))
		}
		// Floors never take from reservations.
		if s.Scale == 1 && o.EffectiveReservation < res-tol {
			return fmt.Errorf("entity %d: effRes %v below its unscaled reservation %v", i, o.EffectiveReservation, res)
		}
		if o.Demand <= o.Green+tol && o.DynamicLimit < o.Demand-tol {
			return fmt.Errorf("entity %d: demand %v fits in green %v but limited to %v", i, o.Demand, o.Green, o.DynamicLimit)
		}
		if o.Extra < -tol || o.Headroom < -tol || o.Green < -tol {
			return fmt.Errorf("entity %d: negative share %+v", i, o)
		}
		claim := math.Max(0, math.Min(o.Demand, limit)-o.Green)
		if o.Extra > claim+tol {
			return fmt.Errorf("entity %d: extra %v above claim %v", i, o.Extra, claim)
		}
		if o.Extra < claim-tol { // cut short: all such entities share one level
			l := o.Extra / e.Weight
			if !math.IsNaN(level) && math.Abs(l-level) > 1e-6*math.Max(1, level) {
				return fmt.Errorf("entity %d: water level %v, another cut entity has %v", i, l, level)
			}
			level = l
		}
		sumEffRes += o.EffectiveReservation
		sumGiven += o.Green + o.Extra + o.Headroom
		sumExtra += o.Extra
		sumClaims += claim
		spare -= o.Green
	}
	spare += c
	tol := 1e-9 * math.Max(1, scale) * float64(len(in)+1)
	if sumEffRes > c+tol {
		return fmt.Errorf("Σ effRes %v > C %v", sumEffRes, c)
	}
	if sumGiven > c+tol {
		return fmt.Errorf("Σ(green+extra+headroom) %v > C %v", sumGiven, c)
	}
	// Work conservation: spare goes to claims until they are met.
	if want := math.Min(math.Max(spare, 0), sumClaims); math.Abs(sumExtra-want) > tol {
		return fmt.Errorf("Σ extra %v, want min(spare %v, Σ claims %v)", sumExtra, spare, sumClaims)
	}
	// Nothing is lost: what is not given is reported as unallocated, and
	// only when every active entity has reached its limit.
	if c > 0 && math.Abs(sumGiven+s.Unallocated-math.Max(c, c-spare)) > tol {
		return fmt.Errorf("Σ given %v + unallocated %v != C %v", sumGiven, s.Unallocated, c)
	}
	if s.Unallocated > tol {
		for i, e := range in {
			if o := out[i]; o.State == Active && o.DynamicLimit < e.Limit-tol {
				return fmt.Errorf("capacity %v unallocated while entity %d is below its limit (%v < %v)", s.Unallocated, i, o.DynamicLimit, e.Limit)
			}
		}
	}
	// Satisfied entities sit at or below the level of the cut ones.
	if !math.IsNaN(level) {
		for i, e := range in {
			o := out[i]
			if o.State == Active && o.Extra > 0 && o.Extra/e.Weight > level*(1+1e-6)+1e-9 {
				return fmt.Errorf("entity %d got %v/w above the water level %v", i, o.Extra/e.Weight, level)
			}
		}
	}
	return nil
}

// randomEntity draws reservations, limits and weights across many orders of
// magnitude, including unlimited limits and reservations above the limit.
func randomEntity(r *rand.Rand, slot uint32, capacity float64) Entity {
	e := Entity{Slot: slot, Weight: math.Pow(10, r.Float64()*12-6), Limit: Unlimited}
	if r.IntN(3) == 0 {
		e.Reservation = r.Float64() * capacity * 0.8
	}
	if r.IntN(2) == 0 {
		e.Limit = r.Float64() * capacity * 1.5
	}
	switch r.IntN(4) {
	case 0: // idle
	case 1:
		e.Usage = r.Float64() * capacity * 0.1
	default:
		e.Usage = r.Float64() * capacity * 1.2
	}
	e.Throttled = r.IntN(3) == 0
	return e
}

func TestPropertyInvariantsAndOrderIndependence(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	scenarios := 100_000
	if testing.Short() {
		scenarios = 10_000
	}
	for n := 0; n < scenarios; n++ {
		cfg := DefaultConfig([]float64{0, 1, 1000, 1e9}[r.IntN(4)])
		cfg.SafetyRatio = []float64{1, 0.9, 0.5, 0.01}[r.IntN(4)]
		cfg.MinDemand = []float64{0, 0, 10}[r.IntN(3)]
		cfg.ActivityThreshold = []float64{0, 1}[r.IntN(2)]
		cfg.MemoryCycles = 1 + r.IntN(3)
		cfg.OvercommitConfirmCycles = 1 + r.IntN(3)
		cfg.MinLimit = []float64{0, 0, 1, cfg.Capacity / 20, cfg.Capacity / 3}[r.IntN(5)]
		inOrder, _ := New(cfg)
		shuffled, _ := New(cfg)
		entities := make([]Entity, r.IntN(12))
		for cycle := 0; cycle < 1+r.IntN(3); cycle++ {
			for i := range entities {
				entities[i] = randomEntity(r, uint32(i), cfg.Capacity)
			}
			out := make([]Allocation, len(entities))
			s, err := inOrder.Cycle(entities, out)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkInvariants(cfg, entities, out, s); err != nil {
				t.Fatalf("scenario %d cycle %d: %v\nconfig %+v\nentities %+v\nout %+v", n, cycle, err, cfg, entities, out)
			}
			perm := r.Perm(len(entities))
			permuted := make([]Entity, len(entities))
			for i, p := range perm {
				permuted[i] = entities[p]
			}
			outPermuted := make([]Allocation, len(entities))
			s2, err := shuffled.Cycle(permuted, outPermuted)
			if err != nil {
				t.Fatal(err)
			}
			if s2.Overcommit != s.Overcommit || s2.Active != s.Active {
				t.Fatalf("scenario %d: summary depends on order: %+v vs %+v", n, s, s2)
			}
			for i, p := range perm {
				x, y := out[p], outPermuted[i]
				if x.State != y.State || !near(x.DynamicLimit, y.DynamicLimit, cfg.Capacity+x.DynamicLimit) {
					t.Fatalf("scenario %d: entity %d depends on order: %+v vs %+v", n, p, x, y)
				}
			}
		}
	}
}
