package latency

import (
	"strings"
	"testing"
	"time"
)

// The breaker's worked sequence (docs/design.md §9): three bad windows
// open it and lower best-effort traffic; while open each bad window
// lowers it again, judged only on what came after the last change; a
// window with too few requests decides nothing; after the cool-down with
// no bad window it probes, raising in steps; a bad window while probing
// opens it again and doubles the cool-down; good windows raise it back
// by 0.05 each, never within a step of the level that failed for 80 s,
// to full, and it closes once three were good, the last at full level.
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
		since   int // seconds after t0: the window the breaker asks to be judged on starts there
		state   State
		level   float64
		changed bool
	}{
		{0, 40 * ms, 100, -9, Closed, 1, false},
		{1, 80 * ms, 100, -8, Closed, 1, false},        // bad 1
		{2, 80 * ms, 5, -7, Closed, 1, false},          // too few: no decision
		{3, 80 * ms, 100, -6, Closed, 1, false},        // bad 2
		{4, 40 * ms, 100, -5, Closed, 1, false},        // good: the count starts again
		{5, 80 * ms, 100, -4, Closed, 1, false},        // bad 1
		{6, 80 * ms, 100, -3, Closed, 1, false},        // bad 2
		{7, 80 * ms, 100, -2, Open, 0.8, true},         // bad 3: open
		{8, 70 * ms, 100, 7, Open, 0.64, false},        // still bad since the change: lower
		{9, 45 * ms, 100, 8, Open, 0.64, false},        // good: hold for the cool-down
		{17, 45 * ms, 100, 8, Open, 0.64, false},       // (the window grows with the level's age)
		{18, 45 * ms, 100, 9, HalfOpen, 0.64, true},    // 10 s since the last bad window
		{19, 45 * ms, 100, 10, HalfOpen, 0.69, false},  // good 1: raise by 0.05
		{20, 60 * ms, 100, 19, Open, 0.552, true},      // bad while probing: the cool-down doubles
		{30, 45 * ms, 100, 21, Open, 0.552, false},     // 10 s is no longer enough
		{40, 45 * ms, 100, 31, HalfOpen, 0.552, true},  // 20 s
		{41, 45 * ms, 100, 32, HalfOpen, 0.552, false}, // good, but a step under the level that failed at 20 s
		{42, 45 * ms, 3, 33, HalfOpen, 0.552, false},   // too few
	}
	for _, s := range steps {
		now := t0.Add(time.Duration(s.at) * time.Second)
		if since := b.Since(now); !since.Equal(t0.Add(time.Duration(s.since) * time.Second)) {
			t.Fatalf("at %d s: judged since %v, want %d s", s.at, since.Sub(t0), s.since)
		}
		v := b.Evaluate(now, s.p99, s.samples)
		if v.State != s.state || abs(v.Level-s.level) > 1e-9 || v.Changed != s.changed || v.Why == "" {
			t.Fatalf("at %d s (p99 %v, %d samples): %+v, want %v level %g changed %v", s.at, s.p99, s.samples, v, s.state, s.level, s.changed)
		}
	}
	// Good windows raise it by 0.05 each to full level; the next good one
	// closes it.
	// 80 s after the level failed, probes may pass it again.
	if v := b.Evaluate(t0.Add(99*time.Second), 45*ms, 100); abs(v.Level-0.552) > 1e-9 {
		t.Fatalf("at 99 s: %+v, want still 0.552", v)
	}
	at := 100
	for want := 0.602; want < 1; want += 0.05 {
		if v := b.Evaluate(t0.Add(time.Duration(at)*time.Second), 45*ms, 100); v.State != HalfOpen || abs(v.Level-want) > 1e-9 {
			t.Fatalf("at %d s: %+v, want half open at %g", at, v, want)
		}
		at++
	}
	if v := b.Evaluate(t0.Add(time.Duration(at)*time.Second), 45*ms, 100); v.State != HalfOpen || v.Level != 1 {
		t.Fatalf("at %d s: %+v, want half open at full level", at, v)
	}
	at++
	if v := b.Evaluate(t0.Add(time.Duration(at)*time.Second), 45*ms, 100); v.State != Closed || !v.Changed {
		t.Fatalf("at %d s: %+v, want closed (good at full level)", at, v)
	}
	// Closing restored the cool-down: the next probe comes after 10 s.
	for range 3 {
		at++
		b.Evaluate(t0.Add(time.Duration(at)*time.Second), 80*ms, 100)
	}
	if v := b.Evaluate(t0.Add(time.Duration(at+10)*time.Second), 45*ms, 100); v.State != HalfOpen {
		t.Fatalf("10 s after opening again: %+v, want half open (the cool-down back at 10 s)", v)
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
		{func(o *Objective) { o.MaxCoolDown = time.Second }, "cool-down"},
		{func(o *Objective) { o.Window = 0 }, "window"},
		{func(o *Objective) { o.MinSamples = 0 }, "min samples"},
		{func(o *Objective) { o.Step = 1 }, "step"},
		{func(o *Objective) { o.Floor = 0 }, "floor"},
		{func(o *Objective) { o.Raise = 0 }, "raise"},
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

// A protected tenant that goes quiet while its breaker probes releases it
// after a window with too few requests to decide: best-effort traffic is
// not held for nobody (issue #51: an hour later a probe still held it at
// 0.51). Quiet windows while open decide nothing but the cool-down.
func TestBreakerReleasesWhenTheProtectedTenantGoesQuiet(t *testing.T) {
	o := DefaultObjective(50 * time.Millisecond)
	b := NewBreaker(o)
	t0 := time.Unix(1_800_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for s := range 3 {
		b.Evaluate(at(s), 80*time.Millisecond, 100)
	}
	if b.State() != Open {
		t.Fatalf("three bad windows: %v", b.State())
	}
	// The tenant stops: no requests from second 3 on.
	s := 3
	for ; s < 2+int(o.CoolDown/time.Second); s++ { // the last bad window was at second 2
		if v := b.Evaluate(at(s), 0, 0); v.State != Open {
			t.Fatalf("second %d: %v before the cool-down passed", s, v.State)
		}
	}
	if v := b.Evaluate(at(s), 0, 0); v.State != HalfOpen {
		t.Fatalf("second %d: %v, want probing after the cool-down", s, v.State)
	}
	var v Verdict
	for end := s + int(o.Window/time.Second); s <= end && b.State() != Closed; s++ {
		v = b.Evaluate(at(s), 0, 0)
	}
	if b.State() != Closed || b.Level() != 1 || !strings.Contains(v.Why, "quiet") {
		t.Errorf("a window after the last decision: %v at %.2f (%s), want released at 1", b.State(), b.Level(), v.Why)
	}
	if last := t0.Add(2 * time.Second); at(s-1).Sub(last) > o.Window+o.CoolDown+time.Second {
		t.Errorf("released %v after the last decision, more than the cool-down and a window", at(s-1).Sub(last))
	}
}
