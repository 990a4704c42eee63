package allocator

import (
	"math"
	"testing"
)

// The worked examples of docs/design.md §4 are the test vectors: each cycle's
// expected dynamic limits to ±0.01.

type step struct {
	entities []Entity
	want     map[uint32]float64 // slot → dynamic limit
	check    func(t *testing.T, s Summary, out []Allocation)
}

func runSteps(t *testing.T, cfg Config, steps []step) {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for n, st := range steps {
		out := make([]Allocation, len(st.entities))
		s, err := a.Cycle(st.entities, out)
		if err != nil {
			t.Fatalf("cycle %d: %v", n+1, err)
		}
		for i, e := range st.entities {
			want, ok := st.want[e.Slot]
			if !ok {
				continue
			}
			if math.Abs(out[i].DynamicLimit-want) > 0.01 {
				t.Errorf("cycle %d slot %d: dynamic limit %.4f, want %.2f (%+v)", n+1, e.Slot, out[i].DynamicLimit, want, out[i])
			}
		}
		if st.check != nil {
			st.check(t, s, out)
		}
	}
}

const (
	slotA = iota
	slotB
	slotC
)

func TestWorkedExample1NormalAllocation(t *testing.T) {
	cfg := DefaultConfig(1000)
	cfg.SafetyRatio = 0.9
	runSteps(t, cfg, []step{{
		entities: []Entity{
			{Slot: slotA, Weight: 1, Limit: 800, Usage: 800, Throttled: true},
			{Slot: slotB, Reservation: 300, Weight: 1, Limit: Unlimited, Usage: 200},
			{Slot: slotC, Weight: 0.1, Limit: Unlimited, Usage: 100},
		},
		want: map[uint32]float64{slotA: 636.36, slotB: 300, slotC: 63.64},
		check: func(t *testing.T, s Summary, out []Allocation) {
			if s.C != 900 || math.Abs(s.H-100) > 1e-9 {
				t.Errorf("C %v H %v, want 900 and 100", s.C, s.H)
			}
			if out[1].Green != 200 || out[0].Green != 0 || out[2].Green != 0 {
				t.Errorf("green %v %v %v, want 0 200 0", out[0].Green, out[1].Green, out[2].Green)
			}
			if math.Abs(s.PromisedRatio-1.0/3) > 1e-9 || s.Overcommit {
				t.Errorf("promised ratio %v overcommit %v", s.PromisedRatio, s.Overcommit)
			}
		},
	}})
}

func TestWorkedExample2ContentionReclaims(t *testing.T) {
	cfg := DefaultConfig(1000)
	cfg.SafetyRatio = 0.9
	a := func(u float64) Entity { return Entity{Slot: slotA, Weight: 1, Limit: 800, Usage: u, Throttled: true} }
	runSteps(t, cfg, []step{
		{ // example 1 first: the state example 2 continues from
			entities: []Entity{a(636), {Slot: slotB, Reservation: 300, Weight: 1, Limit: Unlimited, Usage: 200}, {Slot: slotC, Weight: 0.1, Limit: Unlimited, Usage: 100}},
			want:     map[uint32]float64{slotA: 636.36, slotB: 300, slotC: 63.64},
		},
		{ // B now throttled: borrowed bandwidth is taken back by weight
			entities: []Entity{a(636), {Slot: slotB, Reservation: 300, Weight: 1, Limit: Unlimited, Usage: 300, Throttled: true}, {Slot: slotC, Weight: 0.1, Limit: Unlimited, Usage: 100}},
			want:     map[uint32]float64{slotB: 585.71, slotA: 285.71, slotC: 28.57},
			check: func(t *testing.T, s Summary, out []Allocation) {
				if !math.IsInf(out[1].Demand, 1) {
					t.Errorf("throttled unlimited B demand %v, want +Inf", out[1].Demand)
				}
			},
		},
		{ // B uses 350 unthrottled: it leaves the fill with 50
			entities: []Entity{a(285), {Slot: slotB, Reservation: 300, Weight: 1, Limit: Unlimited, Usage: 350}, {Slot: slotC, Weight: 0.1, Limit: Unlimited, Usage: 100}},
			want:     map[uint32]float64{slotB: 350, slotA: 500, slotC: 50},
		},
	})
}

func TestWorkedExample3Overcommit(t *testing.T) {
	cfg := DefaultConfig(1000)
	both := []Entity{
		{Slot: slotA, Reservation: 600, Weight: 1, Limit: Unlimited, Usage: 500, Throttled: true},
		{Slot: slotB, Reservation: 600, Weight: 1, Limit: Unlimited, Usage: 500, Throttled: true},
	}
	alert := func(want bool) func(*testing.T, Summary, []Allocation) {
		return func(t *testing.T, s Summary, out []Allocation) {
			if !s.Overcommitted || math.Abs(s.Scale-1000.0/1200) > 1e-9 {
				t.Errorf("raw overcommit %v scale %v, want true 0.8333", s.Overcommitted, s.Scale)
			}
			if s.Overcommit != want {
				t.Errorf("cycle %d: alert %v, want %v", s.Cycle, s.Overcommit, want)
			}
			for i := range out {
				if math.Abs(out[i].EffectiveReservation-500) > 0.01 {
					t.Errorf("effRes %v, want 500", out[i].EffectiveReservation)
				}
			}
		}
	}
	want := map[uint32]float64{slotA: 500, slotB: 500}
	runSteps(t, cfg, []step{
		{entities: both, want: want, check: alert(false)},
		{entities: both, want: want, check: alert(false)},
		{entities: both, want: want, check: func(t *testing.T, s Summary, out []Allocation) {
			alert(true)(t, s, out)
			if !s.OvercommitChanged {
				t.Error("alert entered without OvercommitChanged")
			}
		}},
	})
}

func TestWorkedExample4PaperOvercommitRealIdleness(t *testing.T) {
	cfg := DefaultConfig(1000)
	y := Entity{Slot: slotB, Reservation: 600, Weight: 1, Limit: Unlimited, Usage: 50}
	z := Entity{Slot: slotC, Weight: 1, Limit: Unlimited, Usage: 400, Throttled: true}
	runSteps(t, cfg, []step{
		{
			entities: []Entity{{Slot: slotA, Reservation: 800, Weight: 1, Limit: Unlimited, Usage: 100}, y, z},
			want:     map[uint32]float64{slotA: 571.43, slotB: 428.57, slotC: 850},
		},
		{
			entities: []Entity{{Slot: slotA, Reservation: 800, Weight: 1, Limit: Unlimited, Usage: 571, Throttled: true}, y, z},
			want:     map[uint32]float64{slotA: 760.71, slotB: 428.57, slotC: 189.29},
		},
	})
}

// Worked example 5 of docs/design.md §4: floors. C = 900, min_limit 50. A and B
// are greedy without reservations (weights 1 and 0.01), R uses exactly its
// 300 reservation. Without the floor B would get 600 × 0.01/1.01 = 5.94,
// too little to finish a large request inside a client's timeout.
func TestWorkedExample5Floors(t *testing.T) {
	cfg := DefaultConfig(1000)
	cfg.SafetyRatio = 0.9
	cfg.MinLimit = 50
	entities := []Entity{
		{Slot: slotA, Weight: 1, Limit: Unlimited, Usage: 500, Throttled: true},
		{Slot: slotB, Weight: 0.01, Limit: Unlimited, Usage: 50, Throttled: true},
		{Slot: slotC, Reservation: 300, Weight: 1, Limit: Unlimited, Usage: 300},
	}
	runSteps(t, cfg, []step{{
		entities: entities,
		// T = 100 fits beside R = 300: effRes A 50, B 50, R 300; spare 500
		// shared 1 : 0.01.
		want: map[uint32]float64{slotA: 545.05, slotB: 54.95, slotC: 300},
		check: func(t *testing.T, s Summary, out []Allocation) {
			if s.FloorTopUp != 100 || s.FloorScale != 1 || s.Overcommitted {
				t.Errorf("floor top-up %v scale %v overcommitted %v, want 100 1 false", s.FloorTopUp, s.FloorScale, s.Overcommitted)
			}
		},
	}})

	// Floors of 400 do not fit beside the reservation: T = 400 + 400 + 100
	// against the 600 that R leaves, so each top-up is scaled by 2/3. The
	// reservation stays whole and the overcommit alert is raised.
	cfg.MinLimit = 400
	cfg.OvercommitConfirmCycles = 1
	runSteps(t, cfg, []step{{
		entities: entities,
		want:     map[uint32]float64{slotA: 332.67, slotB: 267.33, slotC: 366.67},
		check: func(t *testing.T, s Summary, out []Allocation) {
			if !s.Overcommitted || !s.Overcommit || math.Abs(s.FloorScale-2.0/3) > 1e-9 {
				t.Errorf("overcommitted %v alert %v floor scale %v, want true true 0.6667", s.Overcommitted, s.Overcommit, s.FloorScale)
			}
			if out[2].EffectiveReservation < 300 {
				t.Errorf("R's effective reservation %v fell below its reservation 300: floors took it", out[2].EffectiveReservation)
			}
		},
	}})
}

// A configured limit below min_limit wins: the floor is capped by L, for
// active and standby entities alike.
func TestFloorCappedByLimit(t *testing.T) {
	cfg := DefaultConfig(1000)
	cfg.MinLimit = 50
	if got := cfg.StandbyLimit(0, 20); got != 20 {
		t.Errorf("standby limit with L 20 under floor 50: %v, want 20", got)
	}
	if got := cfg.StandbyLimit(0, Unlimited); got != 50 {
		t.Errorf("standby limit without reservation, H 0, floor 50: %v, want 50", got)
	}
	runSteps(t, cfg, []step{{
		entities: []Entity{
			{Slot: slotA, Weight: 1, Limit: Unlimited, Usage: 1000, Throttled: true},
			{Slot: slotB, Weight: 0.001, Limit: 20, Usage: 20, Throttled: true},
		},
		want: map[uint32]float64{slotA: 980, slotB: 20},
	}})
}
