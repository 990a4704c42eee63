package latency

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The breaker's worked sequence (docs/design.md §9, docs/latency.md):
// three disjoint bad windows open it and lower best-effort traffic (bad
// windows overlapping the last one counted count nothing, a good disjoint
// one starts the count again); while open each bad window lowers it
// again, judged only on the whole seconds after the last change; a window
// with too few requests decides nothing; after the cool-down with no bad
// window it probes, raising in steps; a bad window while probing opens it
// again and doubles the cool-down; good windows raise it back by 0.05
// each, never within a step of the level that failed for 80 s, to full,
// and it closes once three were good, the last at full level.
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
		{1, 80 * ms, 100, -8, Closed, 1, false},        // bad 1: its window ends at 1
		{2, 80 * ms, 100, -7, Closed, 1, false},        // overlaps it: counts nothing
		{5, 40 * ms, 100, -4, Closed, 1, false},        // overlaps it too: resets nothing
		{11, 80 * ms, 5, 2, Closed, 1, false},          // disjoint, but too few: no decision
		{12, 80 * ms, 100, 3, Closed, 1, false},        // bad 2
		{22, 40 * ms, 100, 13, Closed, 1, false},       // good and disjoint: the count starts again
		{23, 80 * ms, 100, 14, Closed, 1, false},       // bad 1
		{33, 80 * ms, 100, 24, Closed, 1, false},       // bad 2
		{43, 80 * ms, 100, 34, Open, 0.8, true},        // bad 3: open
		{44, 70 * ms, 100, 44, Open, 0.64, false},      // bad since the second after the change: lower
		{45, 45 * ms, 100, 45, Open, 0.64, false},      // good: hold for the cool-down
		{53, 45 * ms, 100, 45, Open, 0.64, false},      // (the window grows with the level's age)
		{54, 45 * ms, 100, 45, HalfOpen, 0.64, true},   // 10 s since the last bad window
		{55, 45 * ms, 100, 46, HalfOpen, 0.69, false},  // good 1: raise by 0.05
		{56, 60 * ms, 100, 56, Open, 0.552, true},      // bad while probing: the cool-down doubles
		{66, 45 * ms, 100, 57, Open, 0.552, false},     // 10 s is no longer enough
		{76, 45 * ms, 100, 67, HalfOpen, 0.552, true},  // 20 s
		{77, 45 * ms, 100, 68, HalfOpen, 0.552, false}, // good, but a step under the level that failed at 56
		{78, 45 * ms, 3, 69, HalfOpen, 0.552, false},   // too few
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
	// 80 s after the level failed, probes may pass it again. Good windows
	// raise it by 0.05 each to full level; the next good one closes it.
	if v := b.Evaluate(t0.Add(135*time.Second), 45*ms, 100); abs(v.Level-0.552) > 1e-9 {
		t.Fatalf("at 135 s: %+v, want still 0.552", v)
	}
	at := 136
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
	if v := b.Evaluate(t0.Add(time.Duration(at)*time.Second), 45*ms, 100); v.State != Closed || !v.Changed || v.Released != ReleasedRecovered {
		t.Fatalf("at %d s: %+v, want closed (good at full level), released recovered", at, v)
	}
	// Closing restored the cool-down: the next probe comes 10 s after
	// opening again (three disjoint bad windows, 10 s apart).
	for range 3 {
		at += 10
		b.Evaluate(t0.Add(time.Duration(at)*time.Second), 80*ms, 100)
	}
	if b.State() != Open {
		t.Fatalf("three disjoint bad windows: %v", b.State())
	}
	if v := b.Evaluate(t0.Add(time.Duration(at+10)*time.Second), 45*ms, 100); v.State != HalfOpen {
		t.Fatalf("10 s after opening again: %+v, want half open (the cool-down back at 10 s)", v)
	}
	// The level never goes below the floor, however long it stays bad;
	// there, the breaker gives up (TestBreakerGivesUpWhenTheDefenceIsIneffective).
	at += 10
	atFloor := false
	for i := range 100 {
		v := b.Evaluate(t0.Add(time.Duration(at+1+i)*time.Second), time.Second, 100)
		if v.State == Ineffective {
			break
		}
		if v.Level < o.Floor {
			t.Fatalf("at %d s: level %g under the floor %g", at+1+i, v.Level, o.Floor)
		}
		atFloor = atFloor || v.Level == o.Floor
	}
	if !atFloor || b.State() != Ineffective || b.Level() != 1 {
		t.Errorf("after 100 bad windows: %v at %g (floor reached: %v), want the floor reached, then ineffective at 1", b.State(), b.Level(), atFloor)
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
		{func(o *Objective) { o.Quiet = -1 }, "quiet"},
		{func(o *Objective) { o.GiveUp = -1 }, "give up"},
		{func(o *Objective) { o.Rearm = -time.Second }, "rearm"},
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

// sim drives a breaker as the agent does: each second's requests are
// observed into a Window through the second (to .9 of it), and the
// breaker is evaluated once, at .95, on the requests since Since(now).
// requests says what second s's requests took (nil: none came).
type sim struct {
	t0       time.Time
	w        Window
	b        *Breaker
	verdicts []Verdict // one a second
}

func newSim(o Objective) *sim {
	return &sim{t0: time.Unix(1_800_000_000, 0), b: NewBreaker(o)}
}

func (s *sim) run(seconds int, requests func(sec int) []time.Duration) {
	for range seconds {
		sec := len(s.verdicts)
		start := s.t0.Add(time.Duration(sec) * time.Second)
		reqs := requests(sec)
		for i, d := range reqs {
			s.w.Observe(start.Add(time.Duration(i)*900*time.Millisecond/time.Duration(len(reqs))), d)
		}
		now := start.Add(950 * time.Millisecond)
		p99, n := s.w.QuantileSince(now, s.b.Since(now), 0.99)
		s.verdicts = append(s.verdicts, s.b.Evaluate(now, p99, n))
	}
}

// first is the first second whose verdict satisfies ok, or -1.
func (s *sim) first(ok func(Verdict) bool) int {
	for sec, v := range s.verdicts {
		if ok(v) {
			return sec
		}
	}
	return -1
}

func (s *sim) releases(r Release) int {
	n := 0
	for _, v := range s.verdicts {
		if v.Released == r {
			n++
		}
	}
	return n
}

// steady is a second's n requests, each taking d.
func steady(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

const ms = time.Millisecond

// A breaker trips on Trip consecutive disjoint windows over the
// objective, not on overlapping evaluations of one trailing window: one
// stall (its slow requests all complete together, in a second or two)
// made ten trailing windows bad and, before, opened the breaker 3 s
// later (issue #51: a 300 ms stall cost best-effort traffic 20 % for
// 84 s). Slow requests confined to Window + 1 s cannot trip it with
// Trip 3; a sustained violation trips (Trip−1)×Window after the first bad
// window.
func TestBreakerTripsOnDisjointWindows(t *testing.T) {
	good := steady(100, 5*ms) // 100 requests a second at 5 ms; the objective is 50 ms
	stall := append(steady(100, 5*ms), steady(30, 300*ms)...)
	slow15 := append(steady(100, 5*ms), steady(15, 300*ms)...)
	for _, c := range []struct {
		name     string
		requests func(sec int) []time.Duration
		trip     int // the second it opens at, -1 never
	}{
		{"one 300 ms stall", func(s int) []time.Duration {
			if s == 30 {
				return stall
			}
			return good
		}, -1},
		{"a stall whose slow requests complete over two seconds", func(s int) []time.Duration {
			if s == 30 || s == 31 {
				return append(steady(100, 5*ms), steady(20, 300*ms)...)
			}
			return good
		}, -1},
		{"slow requests for 11 s (a window and a second): still no trip", func(s int) []time.Duration {
			if s >= 30 && s <= 40 {
				return slow15
			}
			return good
		}, -1},
		{"slow requests for 12 s: three disjoint windows bad", func(s int) []time.Duration {
			if s >= 30 && s <= 41 {
				return slow15
			}
			return good
		}, 50},
		{"sustained from second 30: trips two windows after the first bad one", func(s int) []time.Duration {
			if s >= 30 {
				return steady(100, 80*ms)
			}
			return good
		}, 50},
		{"a stall every 5 s: every window misses the p99", func(s int) []time.Duration {
			if s >= 30 && s%5 == 0 {
				return stall
			}
			return good
		}, 50},
		{"sustained at 3 requests a second (30 a window)", func(s int) []time.Duration {
			if s >= 30 {
				return steady(3, 80*ms)
			}
			return steady(3, 5*ms)
		}, 50},
		{"a stall, then a sustained violation starting inside its windows", func(s int) []time.Duration {
			switch {
			case s == 30:
				return stall
			case s >= 35:
				return steady(100, 80*ms)
			}
			return good
		}, 50},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(DefaultObjective(50 * ms))
			s.run(120, c.requests)
			trip := s.first(func(v Verdict) bool { return v.State == Open })
			if trip != c.trip {
				t.Fatalf("opened at second %d, want %d (verdicts %d–%d: %+v)", trip, c.trip, max(trip, 0), max(trip, 0)+1, s.verdicts[max(trip, 0):max(trip, 0)+2])
			}
			if c.trip < 0 {
				for sec, v := range s.verdicts {
					if v.Level != 1 {
						t.Fatalf("second %d: level %g, want 1 throughout", sec, v.Level)
					}
				}
			}
		})
	}
}

// Each level is judged only on requests that met it: Since leaves out the
// second the level changed in, whatever the fraction of it left. Before,
// the window began at the change itself, and the Window counts whole
// seconds, so the old level's slow requests of that second counted
// against the new level and lowered it again (p99 88 ms where every
// request at the new level took 5 ms).
func TestBreakerJudgesALevelOnRequestsThatMetIt(t *testing.T) {
	for _, offset := range []time.Duration{0, 300 * ms, 999 * ms} {
		t.Run(offset.String(), func(t *testing.T) {
			b := NewBreaker(DefaultObjective(50 * ms))
			t0 := time.Unix(1_800_000_000, 0).Add(offset)
			for _, s := range []int{0, 10, 20} { // three disjoint bad windows
				b.Evaluate(t0.Add(time.Duration(s)*time.Second), 80*ms, 100)
			}
			changed := t0.Add(20 * time.Second)
			if b.State() != Open || b.Level() != 0.8 {
				t.Fatalf("after three disjoint bad windows: %v at %g", b.State(), b.Level())
			}
			next := time.Unix(changed.Unix()+1, 0) // the whole second after the change
			for _, after := range []time.Duration{0, 1 * ms, time.Second, 5 * time.Second, 9 * time.Second} {
				if got := b.Since(changed.Add(after)); !got.Equal(next) {
					t.Errorf("Since(change + %v) = %v, want %v, the second after the change's", after, got.Sub(changed), next.Sub(changed))
				}
			}
			// A window on, the trailing window (its seconds, now's included).
			if got := b.Since(changed.Add(10 * time.Second)); !got.Equal(changed.Add(time.Second)) {
				t.Errorf("Since(change + 10s) = %v, want the trailing window from 1s", got.Sub(changed))
			}
			// The change's second: slow requests before the change (they met
			// the old level), fast ones after; the next second all fast.
			var w Window
			second := time.Unix(changed.Unix(), 0)
			for i := range 100 {
				at := second.Add(time.Duration(i) * 10 * ms)
				d := 5 * ms
				if at.Before(changed) {
					d = 80 * ms
				}
				w.Observe(at, d)
			}
			for i := range 100 {
				w.Observe(second.Add(time.Second+time.Duration(i)*9*ms), 5*ms)
			}
			now := changed.Add(time.Second)
			p99, n := w.QuantileSince(now, b.Since(now), 0.99)
			if v := b.Evaluate(now, p99, n); v.State != Open || v.Level != 0.8 {
				t.Errorf("judged %v over %d requests: %v at %g, want held at 0.8 (the new level met the objective)", p99, n, v.State, v.Level)
			}
			// Evaluated again within the change's second, the window is
			// empty: nothing is decided on it.
			b2 := NewBreaker(DefaultObjective(50 * ms))
			for _, s := range []int{0, 10, 20} {
				b2.Evaluate(t0.Add(time.Duration(s)*time.Second), 80*ms, 100)
			}
			if _, n := w.QuantileSince(changed, b2.Since(changed), 0.99); n != 0 {
				t.Errorf("in the change's own second: %d requests judged, want 0", n)
			}
		})
	}
}

// Open or half open, a breaker releases (closed, full level) once Quiet
// windows pass with too few of the protected tenant's requests to decide:
// best-effort traffic is not held for nobody (issue #51: an hour later a
// probe still held it at 0.51; open, it waited out a cool-down of up to
// 80 s first). A trickle under MinSamples is as quiet as silence. Closed,
// there is nothing to release.
func TestBreakerReleasesWhenTheProtectedTenantGoesQuiet(t *testing.T) {
	bad, good := steady(100, 80*ms), steady(100, 5*ms)
	quietQuiet := DefaultObjective(50 * ms)
	quietQuiet.Quiet = 3
	for _, c := range []struct {
		name     string
		obj      Objective
		requests func(sec int) []time.Duration
		decided  int // the last second with enough requests to decide
		release  int // when it releases, -1 never
	}{
		{"open, just tripped", DefaultObjective(50 * ms), func(s int) []time.Duration {
			if s <= 20 {
				return bad
			}
			return nil
		}, 20, 30},
		{"open, in a cool-down doubled by a probe that missed", DefaultObjective(50 * ms), func(s int) []time.Duration {
			switch {
			case s <= 21 || s == 33 || s == 34:
				return bad // trips at 20; probes at 31, misses at 33 (cool-down 20 s)
			case s <= 32:
				return good
			}
			return nil
		}, 34, 44},
		{"half open, probing", DefaultObjective(50 * ms), func(s int) []time.Duration {
			switch {
			case s <= 20:
				return bad
			case s <= 30:
				return good // probes at 30
			}
			return nil
		}, 39, 49}, // probing at 30, judged on the trailing window until it empties
		{"a trickle under MinSamples is quiet", DefaultObjective(50 * ms), func(s int) []time.Duration {
			if s <= 20 {
				return bad
			}
			return steady(1, 5*ms)
		}, 20, 30},
		{"Quiet: 3 windows", quietQuiet, func(s int) []time.Duration {
			if s <= 20 {
				return bad
			}
			return nil
		}, 20, 50},
		{"closed: nothing to release", DefaultObjective(50 * ms), func(s int) []time.Duration { return nil }, -1, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(c.obj)
			s.run(300, c.requests)
			if d := s.first(func(v Verdict) bool { return !v.Judged }) - 1; c.decided >= 0 && d != c.decided {
				t.Fatalf("last decided at %d, want %d", d, c.decided)
			}
			rel := s.first(func(v Verdict) bool { return v.Released == ReleasedQuiet })
			if rel != c.release {
				t.Fatalf("released (quiet) at second %d, want %d; verdict then: %+v", rel, c.release, s.verdicts[max(c.release, 0)])
			}
			if c.release < 0 {
				if s.b.State() != Closed || s.b.Level() != 1 {
					t.Errorf("%v at %g, want closed at 1", s.b.State(), s.b.Level())
				}
				return
			}
			if v := s.verdicts[rel]; v.State != Closed || v.Level != 1 || !v.Changed || !strings.Contains(v.Why, "quiet") {
				t.Errorf("the release: %+v, want closed at 1, changed, saying quiet", v)
			}
			if bound := time.Duration(c.obj.Quiet) * c.obj.Window; time.Duration(rel-c.decided)*time.Second > bound {
				t.Errorf("released %d s after the last decision, more than %v", rel-c.decided, bound)
			}
			lastRequest := -1
			for sec := range s.verdicts {
				if len(c.requests(sec)) >= c.obj.MinSamples {
					lastRequest = sec
				}
			}
			if bound := time.Duration(c.obj.Quiet+1) * c.obj.Window; time.Duration(rel-lastRequest)*time.Second > bound {
				t.Errorf("released %d s after its last second with MinSamples requests, more than %v", rel-lastRequest, bound)
			}
			if s.b.State() != Closed || s.releases(ReleasedQuiet) != 1 {
				t.Errorf("at the end: %v, %d quiet releases, want closed after one", s.b.State(), s.releases(ReleasedQuiet))
			}
		})
	}
}

// Held at the floor and still over the objective for GiveUp disjoint
// windows, the breaker gives up: what misses the objective is not
// best-effort traffic (its own load, a slow disk), and holding best-effort
// traffic at the floor would starve it for nothing, silently (issue #51:
// an hour at 0.05 with one transition and no alert). It releases, says
// ReleasedIneffective once, stays Ineffective at full level while the
// objective is missed, and re-arms once it holds Recover windows, or
// after Rearm.
func TestBreakerGivesUpWhenTheDefenceIsIneffective(t *testing.T) {
	bad, good := steady(100, 80*ms), steady(100, 5*ms)
	for _, c := range []struct {
		name     string
		requests func(sec int) []time.Duration
		seconds  int
		gaveUp   int // the first ReleasedIneffective
		count    int // how many in the run
		rearmed  int // the first ineffective → closed, -1 never
		end      State
	}{
		// Trips at 20 (0.8), a cut a second to the floor at 33, bad at
		// the floor at 34, 44, 54.
		{"unattainable: gives up, and holds nothing while still missed", func(int) []time.Duration { return bad }, 600, 54, 1, -1, Ineffective},
		{"the objective holds again: re-armed after Recover windows", func(s int) []time.Duration {
			if s <= 54 {
				return bad
			}
			return good
		}, 300, 54, 1, 57, Closed},
		{"still missed: re-armed after Rearm (10 min), gives up again", func(int) []time.Duration { return bad }, 720, 54, 2, 654, Ineffective},
		{"a window within the objective at the floor starts the count again", func(s int) []time.Duration {
			if s >= 35 && s <= 44 {
				return good // the window judged at 44 is [35, 44]: good
			}
			return bad
		}, 300, 65, 1, -1, Ineffective},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := DefaultObjective(50 * ms)
			s := newSim(o)
			s.run(c.seconds, c.requests)
			trip := s.first(func(v Verdict) bool { return v.State == Open })
			floor := s.first(func(v Verdict) bool { return v.Level == o.Floor })
			gaveUp := s.first(func(v Verdict) bool { return v.Released == ReleasedIneffective })
			if gaveUp != c.gaveUp {
				t.Fatalf("gave up at second %d, want %d (tripped at %d, floor at %d)", gaveUp, c.gaveUp, trip, floor)
			}
			if v := s.verdicts[gaveUp]; v.State != Ineffective || v.From != Open || !v.Changed || v.Level != 1 || !strings.Contains(v.Why, "ineffective") {
				t.Errorf("giving up: %+v, want ineffective at level 1, changed from open, saying so", v)
			}
			// The bound the package states: (levels from Step to the floor) +
			// 1 decisions, a second each here, then GiveUp−1 windows.
			cuts := int(math.Ceil(math.Log(o.Floor/o.Step) / math.Log(o.Step)))
			if bound := trip + cuts + 1 + (o.GiveUp-1)*int(o.Window/time.Second); c.gaveUp <= 54 && gaveUp > bound {
				t.Errorf("gave up at %d, past the bound %d (trip %d + %d cuts + 1 + %d windows)", gaveUp, bound, trip, cuts, o.GiveUp-1)
			}
			if n := s.releases(ReleasedIneffective); n != c.count {
				t.Errorf("%d ineffective releases, want %d", n, c.count)
			}
			rearmed := -1
			for sec := gaveUp + 1; sec < len(s.verdicts); sec++ {
				v := s.verdicts[sec]
				if v.From == Ineffective && v.Changed {
					rearmed = sec
					break
				}
				if v.State != Ineffective || v.Level != 1 {
					t.Fatalf("second %d, after giving up: %+v, want ineffective at full level", sec, v)
				}
			}
			if rearmed != c.rearmed {
				t.Errorf("re-armed at %d, want %d", rearmed, c.rearmed)
			}
			if rearmed >= 0 && s.verdicts[rearmed].State != Closed {
				t.Errorf("re-armed: %+v, want closed", s.verdicts[rearmed])
			}
			if s.b.State() != c.end {
				t.Errorf("at the end: %v, want %v", s.b.State(), c.end)
			}
		})
	}
}

// The release bounds the package states: a violation that ends as the
// breaker trips is released 84 s after the trip (held at 0.8, a step under
// the full level that failed, for 80 s, then four raises and a good window
// at full level); an objective missed for an hour for reasons best-effort
// traffic does not cause is given up on six times, and best-effort traffic
// is trimmed for at most 6 % of the hour (before: held at the floor for
// the whole hour, with one transition).
func TestBreakerReleaseBounds(t *testing.T) {
	bad, good := steady(100, 80*ms), steady(100, 5*ms)
	s := newSim(DefaultObjective(50 * ms))
	s.run(300, func(sec int) []time.Duration {
		if sec >= 30 && sec < 50 {
			return bad
		}
		return good
	})
	trip := s.first(func(v Verdict) bool { return v.State == Open })
	rel := s.first(func(v Verdict) bool { return v.Released == ReleasedRecovered })
	if trip != 50 || rel != trip+84 {
		t.Errorf("violation from 30 to 49: tripped at %d, released at %d, want 50 and 134", trip, rel)
	}
	if n := s.releases(ReleasedRecovered); n != 1 || s.b.State() != Closed {
		t.Errorf("%d recovered releases, %v at the end; want one, closed", n, s.b.State())
	}

	s = newSim(DefaultObjective(50 * ms))
	s.run(3600, func(int) []time.Duration { return bad })
	held := 0
	for _, v := range s.verdicts {
		if v.Level < 1 {
			held++
		}
	}
	if n := s.releases(ReleasedIneffective); n != 6 || float64(held) > 0.06*3600 {
		t.Errorf("an hour over the objective at any level: %d ineffective, held %d s; want 6, at most 6 %% of the hour", n, held)
	}
}

// Trip opens a closed breaker at once, at the first level down, judged
// from the second after it; it then runs as any open breaker (lower on a
// bad window, probe after the cool-down). A breaker that is not closed
// is not tripped.
func TestBreakerTrip(t *testing.T) {
	o := DefaultObjective(50 * time.Millisecond)
	b := NewBreaker(o)
	t0 := time.Unix(1_800_000_000, 0)
	v := b.Trip(t0, "the produce trim was ineffective")
	if !v.Changed || v.From != Closed || v.State != Open || v.Level != 0.8 || b.Level() != 0.8 ||
		!strings.Contains(v.Why, "produce trim was ineffective") {
		t.Fatalf("tripped: %+v, level %v", v, b.Level())
	}
	if since := b.Since(t0.Add(time.Second)); !since.Equal(t0.Add(time.Second)) {
		t.Errorf("judged from %v, want the second after the trip", since)
	}
	if again := b.Trip(t0.Add(time.Second), "again"); again.Changed || b.Level() != 0.8 {
		t.Errorf("an open breaker tripped again: %+v, level %v", again, b.Level())
	}
	if v := b.Evaluate(t0.Add(2*time.Second), 80*time.Millisecond, 100); v.State != Open || math.Abs(v.Level-0.64) > 1e-9 {
		t.Errorf("a bad window after the trip: %+v, want open at 0.64", v)
	}
	if v := b.Evaluate(t0.Add(12*time.Second), 40*time.Millisecond, 100); v.State != HalfOpen {
		t.Errorf("10 s with no bad window after the trip: %+v, want probing", v)
	}
}

// A breaker whose probes missed releases within a bound the objective
// states, once the load that made them miss leaves: its last bad window
// at L doubled the cool-down to at most MaxCoolDown, the level may climb
// only to a step under the one that failed until MaxCoolDown after L,
// then by Raise a window from wherever it is (the floor at worst) to full
// level, and Recover good windows close it: released by L + MaxCoolDown
// + ⌈(1 − Floor) ÷ Raise⌉ + Recover seconds at one evaluation a second.
// Here best-effort traffic hurts the objective above level 0.3 until
// 300 s, so every probe past it misses.
func TestBreakerReleasesAfterMissedProbes(t *testing.T) {
	o := DefaultObjective(50 * ms)
	bad, good := steady(100, 80*ms), steady(100, 5*ms)
	s := newSim(o)
	const loadUntil = 300
	last := -1 // the last second the load made slow
	s.run(600, func(sec int) []time.Duration {
		if sec < loadUntil && s.b.Level() > 0.3 {
			last = sec
			return bad
		}
		return good
	})
	missed := 0
	for _, v := range s.verdicts {
		if v.Changed && v.From == HalfOpen && v.State == Open {
			missed++
		}
	}
	rel := -1
	for sec, v := range s.verdicts {
		if sec > last && v.Released == ReleasedRecovered {
			rel = sec
			break
		}
	}
	climb := int(math.Ceil((1 - o.Floor) / o.Raise))
	bound := last + int(o.MaxCoolDown/time.Second) + climb + o.Recover
	if missed < 3 || rel < 0 || rel > bound {
		t.Fatalf("%d probes missed (want 3 or more), the last bad window at %d s, released at %d s: want by %d", missed, last, rel, bound)
	}
	if s.b.State() != Closed || s.b.Level() != 1 {
		t.Errorf("at the end: %v at %v, want closed at full level", s.b.State(), s.b.Level())
	}
	t.Logf("%d probes missed, last bad window %d s, released %d s (bound %d)", missed, last, rel, bound)
}
