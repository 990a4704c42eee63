package allocator

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func cycleOnce(t *testing.T, cfg Config, entities []Entity) (Summary, []Allocation) {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Allocation, len(entities))
	s, err := a.Cycle(entities, out)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkInvariants(cfg, entities, out, s); err != nil {
		t.Fatal(err)
	}
	return s, out
}

func TestEdgeNoEntities(t *testing.T) {
	s, _ := cycleOnce(t, DefaultConfig(1000), nil)
	if s.Active != 0 || s.Scale != 1 || s.PromisedRatio != 0 || s.Overcommitted {
		t.Errorf("empty cycle summary %+v", s)
	}
	if s.Unallocated != 1000 {
		t.Errorf("unallocated %v, want the whole capacity", s.Unallocated)
	}
}

func TestEdgeAllStandby(t *testing.T) {
	cfg := DefaultConfig(1000)
	cfg.SafetyRatio = 0.8
	s, out := cycleOnce(t, cfg, []Entity{
		{Slot: 0, Reservation: 300, Weight: 1, Limit: Unlimited},
		{Slot: 1, Weight: 1, Limit: Unlimited},
		{Slot: 2, Weight: 1, Limit: 50},
		{Slot: 3, Reservation: 500, Weight: 1, Limit: 400},
	})
	if s.Standby != 4 || s.Active != 0 {
		t.Fatalf("states %+v", s)
	}
	// min(L, max(res, H)) with H = 200
	for i, want := range []float64{300, 200, 50, 400} {
		if out[i].State != Standby || math.Abs(out[i].DynamicLimit-want) > 1e-9 {
			t.Errorf("entity %d: %+v, want standby at %v", i, out[i], want)
		}
	}
}

func TestEdgeCapacityZero(t *testing.T) {
	s, out := cycleOnce(t, DefaultConfig(0), []Entity{
		{Slot: 0, Reservation: 100, Weight: 1, Limit: Unlimited, Usage: 10},
		{Slot: 1, Weight: 1, Limit: Unlimited, Usage: 10, Throttled: true},
	})
	if !s.Overcommitted || s.Scale != 0 || !math.IsInf(s.PromisedRatio, 1) {
		t.Errorf("summary %+v", s)
	}
	for i := range out {
		if out[i].DynamicLimit != 0 {
			t.Errorf("entity %d gets %v from zero capacity", i, out[i].DynamicLimit)
		}
	}
}

func TestEdgeReservationAboveLimitIsClamped(t *testing.T) {
	_, out := cycleOnce(t, DefaultConfig(1000), []Entity{
		{Slot: 0, Reservation: 500, Weight: 1, Limit: 200, Usage: 300, Throttled: true},
	})
	if out[0].EffectiveReservation != 200 || out[0].DynamicLimit != 200 {
		t.Errorf("got %+v, want effRes and limit 200", out[0])
	}
}

func TestEdgeExtremeWeights(t *testing.T) {
	_, out := cycleOnce(t, DefaultConfig(1000), []Entity{
		{Slot: 0, Weight: 1e-6, Limit: Unlimited, Usage: 1, Throttled: true},
		{Slot: 1, Weight: 1e6, Limit: Unlimited, Usage: 1, Throttled: true},
	})
	want0 := 1000 * 1e-6 / (1e6 + 1e-6)
	if math.Abs(out[0].DynamicLimit-want0) > 1e-12 || math.Abs(out[1].DynamicLimit-(1000-want0)) > 1e-9 {
		t.Errorf("got %v and %v, want %v and %v", out[0].DynamicLimit, out[1].DynamicLimit, want0, 1000-want0)
	}
}

func TestEdgeUseAboveLimit(t *testing.T) {
	_, out := cycleOnce(t, DefaultConfig(1000), []Entity{
		{Slot: 0, Weight: 1, Limit: 100, Usage: 400},
		{Slot: 1, Weight: 1, Limit: Unlimited, Usage: 100},
	})
	if out[0].DynamicLimit != 100 {
		t.Errorf("entity above its limit gets %v, want 100", out[0].DynamicLimit)
	}
	// The rest becomes headroom for the unlimited entity: 1000 − 100.
	if math.Abs(out[1].DynamicLimit-900) > 1e-9 {
		t.Errorf("other entity gets %v, want 900", out[1].DynamicLimit)
	}
}

func TestEdgeEveryClaimUnbounded(t *testing.T) {
	_, out := cycleOnce(t, DefaultConfig(900), []Entity{
		{Slot: 0, Weight: 1, Limit: Unlimited, Usage: 1, Throttled: true},
		{Slot: 1, Weight: 2, Limit: Unlimited, Usage: 1, Throttled: true},
	})
	if math.Abs(out[0].DynamicLimit-300) > 1e-9 || math.Abs(out[1].DynamicLimit-600) > 1e-9 {
		t.Errorf("got %v and %v, want 300 and 600", out[0].DynamicLimit, out[1].DynamicLimit)
	}
}

func TestEdgeOneEntityGetsEverythingUpToItsLimit(t *testing.T) {
	cfg := DefaultConfig(1000) // safety_ratio 1: C = capacity, H = 0
	s, out := cycleOnce(t, cfg, []Entity{{Slot: 0, Weight: 1, Limit: Unlimited, Usage: 10}})
	if s.C != 1000 || s.H != 0 {
		t.Errorf("C %v H %v", s.C, s.H)
	}
	if out[0].Extra != 10 || out[0].Headroom != 990 || out[0].DynamicLimit != 1000 {
		t.Errorf("lone entity %+v, want extra 10, headroom 990, limit 1000", out[0])
	}
	_, out = cycleOnce(t, cfg, []Entity{{Slot: 0, Weight: 1, Limit: 700, Usage: 10}})
	if out[0].DynamicLimit != 700 {
		t.Errorf("lone limited entity %v, want 700", out[0].DynamicLimit)
	}
}

func TestActivityMemory(t *testing.T) {
	cfg := DefaultConfig(1000)
	cfg.MemoryCycles = 3
	cfg.ActivityThreshold = 5
	a, _ := New(cfg)
	out := make([]Allocation, 1)
	states := []State{}
	for _, usage := range []float64{0, 10, 0, 0, 0, 4, 6} {
		if _, err := a.Cycle([]Entity{{Slot: 7, Weight: 1, Limit: Unlimited, Usage: usage}}, out); err != nil {
			t.Fatal(err)
		}
		states = append(states, out[0].State)
	}
	want := []State{Standby, Active, Active, Active, Standby, Standby, Active}
	for i := range want {
		if states[i] != want[i] {
			t.Fatalf("states %v, want %v", states, want)
		}
	}
	a.Forget(7)
	if _, err := a.Cycle([]Entity{{Slot: 7, Weight: 1, Limit: Unlimited}}, out); err != nil || out[0].State != Standby {
		t.Errorf("forgotten slot still %v (%v)", out[0].State, err)
	}
}

func TestOvercommitAlertHysteresis(t *testing.T) {
	cfg := DefaultConfig(1000)
	cfg.OvercommitConfirmCycles = 2
	a, _ := New(cfg)
	out := make([]Allocation, 2)
	run := func(res float64) Summary {
		s, err := a.Cycle([]Entity{
			{Slot: 0, Reservation: res, Weight: 1, Limit: Unlimited, Usage: 1},
			{Slot: 1, Reservation: 600, Weight: 1, Limit: Unlimited, Usage: 1},
		}, out)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var alerts []bool
	// over, under (resets the count), over, over (enters), under, under (leaves)
	for _, res := range []float64{600, 100, 600, 600, 100, 100} {
		alerts = append(alerts, run(res).Overcommit)
	}
	want := []bool{false, false, false, true, true, false}
	for i := range want {
		if alerts[i] != want[i] {
			t.Fatalf("alerts %v, want %v", alerts, want)
		}
	}
}

func TestInvalidInputChangesNothing(t *testing.T) {
	a, _ := New(DefaultConfig(1000))
	out := make([]Allocation, 2)
	bad := [][]Entity{
		{{Slot: 0, Weight: 0, Limit: Unlimited}},
		{{Slot: 0, Weight: math.NaN(), Limit: Unlimited}},
		{{Slot: 0, Weight: 1, Limit: -1}},
		{{Slot: 0, Weight: 1, Limit: Unlimited, Usage: -5}},
		{{Slot: 0, Weight: 1, Limit: Unlimited, Reservation: math.Inf(1)}},
		{{Slot: 0, Weight: 1, Limit: Unlimited, Usage: 50}, {Slot: 0, Weight: 1, Limit: Unlimited}},
	}
	for i, entities := range bad {
		if _, err := a.Cycle(entities, out); !errors.Is(err, ErrInvalidEntity) {
			t.Errorf("case %d: err %v, want ErrInvalidEntity", i, err)
		}
	}
	s, err := a.Cycle([]Entity{{Slot: 0, Weight: 1, Limit: Unlimited}}, out)
	if err != nil || s.Cycle != 1 || out[0].State != Standby {
		t.Errorf("after rejected cycles: %+v %+v %v; want the first cycle, slot 0 never active", s, out[0], err)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	cases := map[string]func(*Config){
		"capacity":                  func(c *Config) { c.Capacity = -1 },
		"safety_ratio":              func(c *Config) { c.SafetyRatio = 1.5 },
		"min_demand":                func(c *Config) { c.MinDemand = math.NaN() },
		"activity_threshold":        func(c *Config) { c.ActivityThreshold = -1 },
		"memory_cycles":             func(c *Config) { c.MemoryCycles = 0 },
		"overcommit_confirm_cycles": func(c *Config) { c.OvercommitConfirmCycles = 0 },
	}
	for field, mutate := range cases {
		cfg := DefaultConfig(100)
		mutate(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), field+":") {
			t.Errorf("%s: got %v", field, err)
		}
	}
}
