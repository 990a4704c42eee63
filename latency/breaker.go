package latency

import (
	"fmt"
	"time"
)

// Objective is a latency an entity's requests of one API should stay under
// at the 99th percentile, and how the breaker defending it decides.
type Objective struct {
	P99 time.Duration
	// Trip is how many consecutive disjoint windows over P99 open the
	// breaker. Disjoint, not one evaluation a second of a trailing window:
	// those overlap, and one stall made ten of them bad (a 300 ms stall
	// held best-effort traffic at 0.8 for 83 s). No burst of slow requests
	// that all complete within (Trip−2)×Window + 1 s can make Trip
	// disjoint windows bad; a sustained violation trips (Trip−1)×Window
	// after its first bad window.
	Trip int
	// Recover is how many consecutive windows under P99, half open, close it.
	Recover int
	// CoolDown is how long the breaker stays open after its last bad window
	// before it probes (half open). A probe that misses doubles it, up to
	// MaxCoolDown, so that lasting contention is probed less and less
	// often; closing restores it.
	CoolDown, MaxCoolDown time.Duration
	// Window is the span a breaker judges: the trailing window, but never
	// the second its level last changed in or any before (Since): the
	// samples of an older level say nothing of the new one, and judging
	// them would lower the level again for every second they stay in the
	// window.
	Window time.Duration
	// MinSamples: a window with fewer requests decides nothing (too few to
	// have a 99th percentile).
	MinSamples int
	// Step is the factor the level falls by on each bad window while open
	// or half open.
	Step float64
	// Raise is what the level rises by on each good window while half open:
	// added, not multiplied, so that a probe nears the level that failed
	// last in small steps and misses it by little.
	Raise float64
	// Floor is the lowest level.
	Floor float64
	// Quiet is how many windows with too few requests to decide, open or
	// half open, release the breaker: the protected tenant went quiet (or
	// left), and best-effort traffic is not held for nobody. 0 means 1.
	Quiet int
	// GiveUp is how many consecutive disjoint windows over P99 at the
	// floor show the defence ineffective: the breaker releases and says
	// so (state Ineffective) rather than hold best-effort traffic at the
	// floor for nothing. 0 means 3.
	GiveUp int
	// Rearm is how long an ineffective breaker stays off when the
	// objective does not hold again before that; 0 means 10 minutes.
	Rearm time.Duration
}

// Defaults for the fields added after the first release, so that an
// Objective written without them keeps working.
const (
	defaultQuiet  = 1
	defaultGiveUp = 3
	defaultRearm  = 10 * time.Minute
)

func (o Objective) withDefaults() Objective {
	if o.Quiet == 0 {
		o.Quiet = defaultQuiet
	}
	if o.GiveUp == 0 {
		o.GiveUp = defaultGiveUp
	}
	if o.Rearm == 0 {
		o.Rearm = defaultRearm
	}
	return o
}

// DefaultObjective is p99 with the design's defaults: a 10 s window, 3
// disjoint windows to trip, 3 to recover, a 10 s cool-down doubling up to
// 80 s, 20 samples a window, steps down of 0.8 and up of 0.05, a floor of
// 0.05, released after 1 window too quiet to decide, given up after 3
// disjoint windows still over at the floor, re-armed after 10 minutes.
func DefaultObjective(p99 time.Duration) Objective {
	return Objective{P99: p99, Window: 10 * time.Second, Trip: 3, Recover: 3, CoolDown: 10 * time.Second, MaxCoolDown: 80 * time.Second,
		MinSamples: 20, Step: 0.8, Raise: 0.05, Floor: 0.05, Quiet: defaultQuiet, GiveUp: defaultGiveUp, Rearm: defaultRearm}
}

// Validate says what is wrong with an objective, naming the field.
func (o Objective) Validate() error {
	switch {
	case o.P99 <= 0 || o.P99 > MaxLatency:
		return fmt.Errorf("p99 %v: want more than 0 and at most %v", o.P99, MaxLatency)
	case o.Trip < 1 || o.Recover < 1:
		return fmt.Errorf("trip %d, recover %d: want at least 1 window each", o.Trip, o.Recover)
	case o.Window < time.Second:
		return fmt.Errorf("window %v: want at least 1s", o.Window)
	case o.CoolDown < 0 || o.MaxCoolDown < o.CoolDown:
		return fmt.Errorf("cool-down %v (at most %v): want 0 or more, and a maximum no lower", o.CoolDown, o.MaxCoolDown)
	case o.MinSamples < 1:
		return fmt.Errorf("min samples %d: want at least 1", o.MinSamples)
	case !(o.Step > 0 && o.Step < 1):
		return fmt.Errorf("step %g: want between 0 and 1", o.Step)
	case !(o.Raise > 0 && o.Raise <= 1):
		return fmt.Errorf("raise %g: want more than 0 and at most 1", o.Raise)
	case !(o.Floor > 0 && o.Floor <= 1):
		return fmt.Errorf("floor %g: want more than 0 and at most 1", o.Floor)
	case o.Quiet < 0:
		return fmt.Errorf("quiet %d: want 0 (the default) or more windows", o.Quiet)
	case o.GiveUp < 0:
		return fmt.Errorf("give up %d: want 0 (the default) or more windows", o.GiveUp)
	case o.Rearm < 0:
		return fmt.Errorf("rearm %v: want 0 (the default) or more", o.Rearm)
	}
	return nil
}

// State is a breaker's state.
type State uint8

const (
	// Closed: the objective holds; best-effort traffic runs at its allocation.
	Closed State = iota
	// Open: the objective was missed Trip disjoint windows in a row;
	// best-effort traffic is held below its allocation, lower on each bad
	// window.
	Open
	// HalfOpen: no bad window for CoolDown; best-effort traffic is let back
	// up in steps while the objective holds.
	HalfOpen
	// Ineffective: held at the floor, the objective was still missed
	// GiveUp disjoint windows in a row, so what is missing it is not
	// best-effort traffic; the breaker released it (level 1) and does not
	// trip again until the objective holds Recover windows or Rearm
	// passes. The agent counts and alerts on it.
	Ineffective
)

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", s)
}

var stateNames = [...]string{"closed", "open", "half_open", "ineffective"}

// Release is why an evaluation gave best-effort traffic its full level
// back (Verdict.Released): the agent counts releases by it and alerts on
// ReleasedIneffective.
type Release uint8

const (
	NotReleased Release = iota
	// ReleasedRecovered: the objective held Recover windows while half
	// open, the last at full level.
	ReleasedRecovered
	// ReleasedQuiet: open or half open, Quiet windows passed with fewer
	// than MinSamples of the protected tenant's requests.
	ReleasedQuiet
	// ReleasedIneffective: at the floor and still over the objective for
	// GiveUp disjoint windows (the breaker is then Ineffective).
	ReleasedIneffective
)

func (r Release) String() string {
	if int(r) < len(releaseNames) {
		return releaseNames[r]
	}
	return fmt.Sprintf("release(%d)", r)
}

var releaseNames = [...]string{"", "recovered", "quiet", "ineffective"}

// Breaker defends one objective. Level is what the defence asks of
// best-effort traffic (entities without a reservation): 1 when closed, a
// fraction of it while open or half open. How a level becomes limits
// (the largest best-effort consumers first, never below a reservation or
// min_limit) is the allocator's business, not this type's.
type Breaker struct {
	obj   Objective
	state State
	level float64
	// bad counts consecutive disjoint bad windows: toward Trip while
	// closed, toward GiveUp while open at the floor. counted is when the
	// last one counted was judged: its window ended in that second, and
	// only a window starting after it counts next.
	bad     int
	counted time.Time
	good    int
	lastBad time.Time
	// changed is when the level last changed; coolDown the present one.
	changed  time.Time
	coolDown time.Duration
	// failed is the level a bad window last came at, and when: a probe
	// stays a step below it for MaxCoolDown, so that under lasting
	// contention it does not walk back into the level that failed (a
	// broker's queue fills at once past it: measured, a probe to full
	// level cost the protected tenant two seconds at 85 ms). A trip
	// records full level: it takes Trip disjoint bad windows, so full
	// level did fail.
	failed   float64
	failedAt time.Time
	// decided is the last evaluation with enough samples to decide: open
	// or half open, a breaker that has seen none for Quiet windows
	// releases (the protected tenant went quiet, and best-effort traffic
	// is held for nobody).
	decided time.Time
	// gaveUp is when the breaker last became Ineffective.
	gaveUp time.Time
}

// NewBreaker starts closed at level 1. The objective must be valid.
func NewBreaker(o Objective) *Breaker {
	o = o.withDefaults()
	return &Breaker{obj: o, level: 1, coolDown: o.CoolDown}
}

// Since is where the window the next evaluation at now must be given
// starts: the objective's window back from now, but never before the
// whole second after the level's last change, so that each level is
// judged only on the requests that met it. The second the level changed
// in is left out: its requests before the change met the old level (and
// judging them lowered the level again for a cut that had worked: p99
// 88 ms where every request at the new level took 5 ms).
func (b *Breaker) Since(now time.Time) time.Time {
	from := now.Add(time.Second - b.obj.Window) // the window's seconds, now's included
	if after := time.Unix(b.changed.Unix()+1, 0); !b.changed.IsZero() && after.After(from) {
		return after
	}
	return from
}

func (b *Breaker) setLevel(now time.Time, level float64) {
	if level != b.level {
		b.level, b.changed = level, now
		b.bad = 0 // a new level starts its own count toward giving up
	}
}

// disjoint says whether the window judged at now shares no second with
// the last one counted (or none was).
func (b *Breaker) disjoint(now time.Time) bool {
	return b.bad == 0 || b.Since(now).Unix() > b.counted.Unix()
}

// count counts the bad window judged at now, when it is disjoint from the
// last one counted; a window or more with no decision between the two
// makes them not consecutive, and the count starts again.
func (b *Breaker) count(now time.Time) {
	if !b.disjoint(now) {
		return
	}
	if b.bad > 0 && now.Sub(b.counted) >= 2*b.obj.Window {
		b.bad = 0
	}
	b.bad++
	b.counted = now
}

// release gives best-effort traffic its full level back, closed.
func (b *Breaker) release(now time.Time) {
	b.state, b.bad, b.good, b.coolDown = Closed, 0, 0, b.obj.CoolDown
	b.setLevel(now, 1)
}

// Trip opens a closed breaker at now, as Trip bad windows would: the
// caller has that evidence already. A latency objective whose own
// direction's trim proved ineffective holds the other direction's
// best-effort traffic with a breaker of its own, opened this way, since
// the windows that proved the first trim ineffective were over the
// objective. A breaker that is not closed is left as it is (Changed
// false).
func (b *Breaker) Trip(now time.Time, why string) Verdict {
	from := b.state
	if b.state != Closed {
		return Verdict{State: b.state, Level: b.level, From: from, Why: why}
	}
	b.state, b.lastBad, b.decided = Open, now, now
	b.failed, b.failedAt = b.level, now
	b.setLevel(now, max(b.obj.Floor, b.obj.Step))
	return Verdict{State: b.state, Level: b.level, From: from, Changed: true, Judged: true,
		Why: fmt.Sprintf("%s: best-effort traffic held to %.2f", why, b.level)}
}

// Verdict is one evaluation's outcome.
type Verdict struct {
	State State
	Level float64
	// From is the state before, when this evaluation changed it.
	From    State
	Changed bool
	// Why says what decided, for the log and `sluice explain`.
	Why string
	// Released says why this evaluation gave best-effort traffic its full
	// level back, when it did (NotReleased otherwise).
	Released Release
	// Judged: the evaluation had at least MinSamples requests, enough to
	// decide. An objective that is not judged for long is an objective
	// nothing defends (a TLS listener, a tenant that stopped).
	Judged bool
}

// Evaluate takes one window's p99 and sample count at now (once a cycle,
// over the requests since Since(now)) and moves the breaker.
func (b *Breaker) Evaluate(now time.Time, p99 time.Duration, samples int) Verdict {
	from := b.state
	why := ""
	released := NotReleased
	enough := samples >= b.obj.MinSamples
	bad := enough && p99 > b.obj.P99
	good := enough && !bad
	// quiet: too few requests to decide for Quiet windows on end.
	quiet := !enough && now.Sub(b.decided) >= time.Duration(b.obj.Quiet)*b.obj.Window
	if enough {
		b.decided = now
	}
	switch b.state {
	case Closed:
		switch {
		case bad && !b.disjoint(now):
			// Overlaps the window counted last: the same slow requests
			// would count again (one stall, ten bad trailing windows).
			why = fmt.Sprintf("p99 %v over %v (%d of %d disjoint windows; this one overlaps the last counted, which ended at %s)",
				p99, b.obj.P99, b.bad, b.obj.Trip, b.counted.Format(time.TimeOnly))
		case bad:
			b.count(now)
			why = fmt.Sprintf("p99 %v over %v (%d of %d disjoint windows)", p99, b.obj.P99, b.bad, b.obj.Trip)
			if b.bad >= b.obj.Trip {
				b.state, b.lastBad = Open, now
				b.failed, b.failedAt = b.level, now
				b.setLevel(now, max(b.obj.Floor, b.obj.Step))
				why = fmt.Sprintf("p99 %v over %v for %d disjoint windows: best-effort traffic held to %.2f", p99, b.obj.P99, b.obj.Trip, b.level)
			}
		case good:
			if b.disjoint(now) {
				b.bad = 0
			}
			why = fmt.Sprintf("p99 %v within %v", p99, b.obj.P99)
		default:
			why = fmt.Sprintf("%d requests in the window, fewer than %d: no decision", samples, b.obj.MinSamples)
		}
	case Open:
		switch {
		case bad && b.level > b.obj.Floor:
			b.lastBad = now
			b.setLevel(now, max(b.obj.Floor, b.level*b.obj.Step))
			why = fmt.Sprintf("p99 %v still over %v: best-effort traffic held to %.2f", p99, b.obj.P99, b.level)
		case bad:
			b.lastBad = now
			b.count(now)
			why = fmt.Sprintf("p99 %v still over %v at the floor %.2f (%d of %d disjoint windows before giving up)", p99, b.obj.P99, b.level, b.bad, b.obj.GiveUp)
			if b.bad >= b.obj.GiveUp {
				// Cutting best-effort traffic to the floor did not bring
				// the p99 under: something else misses the objective
				// (its own load, a slow disk, GC). Held on, best-effort
				// traffic would starve for nothing, silently.
				b.release(now)
				b.state, b.gaveUp, released = Ineffective, now, ReleasedIneffective
				why = fmt.Sprintf("p99 %v still over %v after %d disjoint windows at the floor: the defence is ineffective, released; re-armed once the objective holds, or after %v",
					p99, b.obj.P99, b.obj.GiveUp, b.obj.Rearm)
			}
		case quiet:
			b.release(now)
			released = ReleasedQuiet
			why = fmt.Sprintf("fewer than %d requests a window for %v: the protected tenant is quiet, released", b.obj.MinSamples, now.Sub(b.decided))
		case now.Sub(b.lastBad) >= b.coolDown:
			b.state, b.good = HalfOpen, 0
			why = fmt.Sprintf("no window over %v for %v: probing", b.obj.P99, b.coolDown)
		default:
			if good && b.disjoint(now) {
				b.bad = 0
			}
			why = fmt.Sprintf("holding at %.2f for the cool-down (%v)", b.level, b.coolDown)
		}
	case HalfOpen:
		switch {
		case bad:
			b.state, b.good, b.bad, b.lastBad = Open, 0, 0, now
			b.coolDown = min(b.obj.MaxCoolDown, 2*b.coolDown)
			b.failed, b.failedAt = b.level, now
			b.setLevel(now, max(b.obj.Floor, b.level*b.obj.Step))
			why = fmt.Sprintf("p99 %v over %v while probing: held to %.2f again, next probe after %v", p99, b.obj.P99, b.level, b.coolDown)
		case good && b.level >= 1 && b.good+1 >= b.obj.Recover:
			b.release(now)
			released = ReleasedRecovered
			why = fmt.Sprintf("p99 within %v for %d windows, the last at full level: released", b.obj.P99, b.obj.Recover)
		case good:
			b.good++
			want := min(1, b.level+b.obj.Raise)
			next := want
			if now.Sub(b.failedAt) < b.obj.MaxCoolDown {
				next = min(next, max(b.level, b.failed*b.obj.Step))
			}
			verb := "raised to"
			if next == b.level {
				verb = "held at"
			}
			b.setLevel(now, next)
			why = fmt.Sprintf("p99 %v within %v (%d of %d windows): %s %.2f", p99, b.obj.P99, min(b.good, b.obj.Recover), b.obj.Recover, verb, b.level)
			if next < want {
				why += fmt.Sprintf(", a step under %.2f, which failed %v ago (for %v)", b.failed, now.Sub(b.failedAt), b.obj.MaxCoolDown)
			}
		case quiet:
			// Too few requests for Quiet windows: nothing left to defend.
			// Held on, best-effort traffic would stay cut for a tenant
			// that sends nothing (an hour at 0.51 in a probe).
			b.release(now)
			released = ReleasedQuiet
			why = fmt.Sprintf("fewer than %d requests a window for %v: the protected tenant is quiet, released", b.obj.MinSamples, now.Sub(b.decided))
		default:
			why = fmt.Sprintf("%d requests in the window, fewer than %d: no decision", samples, b.obj.MinSamples)
		}
	case Ineffective:
		switch {
		case good && b.good+1 >= b.obj.Recover:
			b.state, b.good, b.bad = Closed, 0, 0
			why = fmt.Sprintf("p99 within %v for %d windows at full level: the defence is re-armed", b.obj.P99, b.obj.Recover)
		case now.Sub(b.gaveUp) >= b.obj.Rearm:
			b.state, b.good, b.bad = Closed, 0, 0
			why = fmt.Sprintf("ineffective for %v: the defence is re-armed, to try again", b.obj.Rearm)
		case good:
			b.good++
			why = fmt.Sprintf("p99 %v within %v at full level (%d of %d windows to re-arm)", p99, b.obj.P99, b.good, b.obj.Recover)
		case bad:
			b.good = 0
			why = fmt.Sprintf("p99 %v over %v, but cutting best-effort traffic did not help: not defended until it holds again or %v pass",
				p99, b.obj.P99, b.obj.Rearm-now.Sub(b.gaveUp))
		default:
			why = fmt.Sprintf("%d requests in the window, fewer than %d: no decision", samples, b.obj.MinSamples)
		}
	}
	return Verdict{State: b.state, Level: b.level, From: from, Changed: from != b.state, Why: why, Released: released, Judged: enough}
}

// State and Level are the breaker's present state and level.
func (b *Breaker) State() State   { return b.state }
func (b *Breaker) Level() float64 { return b.level }
