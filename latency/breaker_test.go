package latency

import (
	"strings"
	"testing"
	"time"
)

// The breaker's worked sequence (docs/design.md §9): three bad windows
// open it and lower best-effort traffic; while open each bad window
// lowers it again; a window with too few requests decides nothing; after
// the cool-down with no bad window it probes, raising in steps; a bad
// window while probing opens it again; three good ones close it.
func TestBreakerSequence(t *testing.T) {
	o := DefaultObjective(50 * time.Millisecond)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	b := NewBreaker(o)
	t0 := time.Unix(1_800_000_000, 0)
	ms := time.Millisecond
	steps := []struct {
		at      int // seconds after t0
		p99     time.Duration
		samples int
		state   State
		level   float64
		changed bool
	}{
		{0, 40 * ms, 100, Closed, 1, false},
		{1, 80 * ms, 100, Closed, 1, false},  // bad 1
		{2, 80 * ms, 5, Closed, 1, false},    // too few: no decision
		{3, 80 * ms, 100, Closed, 1, false},  // bad 2
		{4, 40 * ms, 100, Closed, 1, false},  // good: the count starts again
		{5, 80 * ms, 100, Closed, 1, false},  // bad 1
		{6, 80 * ms, 100, Closed, 1, false},  // bad 2
		{7, 80 * ms, 100, Open, 0.8, true},   // bad 3: open
		{8, 70 * ms, 100, Open, 0.64, false}, // still bad: lower
		{9, 45 * ms, 100, Open, 0.64, false}, // good: hold for the cool-down
		{17, 45 * ms, 100, Open, 0.64, false},
		{18, 45 * ms, 100, HalfOpen, 0.64, true}, // 10 s since the last bad window
		{19, 45 * ms, 100, HalfOpen, 0.8, false}, // good 1: raise
		{20, 60 * ms, 100, Open, 0.64, true},     // bad while probing
		{30, 45 * ms, 100, HalfOpen, 0.64, true},
		{31, 45 * ms, 100, HalfOpen, 0.8, false},
		{32, 45 * ms, 3, HalfOpen, 0.8, false}, // too few
		{33, 45 * ms, 100, HalfOpen, 1, false},
		{34, 45 * ms, 100, Closed, 1, true}, // good 3: closed
	}
	for _, s := range steps {
		v := b.Evaluate(t0.Add(time.Duration(s.at)*time.Second), s.p99, s.samples)
		if v.State != s.state || abs(v.Level-s.level) > 1e-9 || v.Changed != s.changed || v.Why == "" {
			t.Fatalf("at %d s (p99 %v, %d samples): %+v, want %v level %g changed %v", s.at, s.p99, s.samples, v, s.state, s.level, s.changed)
		}
	}
	// The level never goes below the floor, however long it stays bad.
	for i := range 100 {
		b.Evaluate(t0.Add(time.Duration(100+i)*time.Second), time.Second, 100)
	}
	if b.State() != Open || abs(b.Level()-o.Floor) > 1e-9 {
		t.Errorf("after 100 bad windows: %v at %g, want open at the floor %g", b.State(), b.Level(), o.Floor)
	}
}

func TestObjectiveValidate(t *testing.T) {
	for _, c := range []struct {
		mutate func(*Objective)
		field  string
	}{
		{func(o *Objective) { o.P99 = 0 }, "p99"},
		{func(o *Objective) { o.P99 = 2 * time.Minute }, "p99"},
		{func(o *Objective) { o.Trip = 0 }, "trip"},
		{func(o *Objective) { o.CoolDown = -time.Second }, "cool-down"},
		{func(o *Objective) { o.MinSamples = 0 }, "min samples"},
		{func(o *Objective) { o.Step = 1 }, "step"},
		{func(o *Objective) { o.Floor = 0 }, "floor"},
	} {
		o := DefaultObjective(50 * time.Millisecond)
		c.mutate(&o)
		if err := o.Validate(); err == nil || !strings.HasPrefix(err.Error(), c.field) {
			t.Errorf("%+v: %v, want an error naming %s", o, err, c.field)
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
