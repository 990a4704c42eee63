package latency

import (
	"fmt"
	"time"
)

// Objective is a latency an entity's requests of one API should stay under
// at the 99th percentile, and how the breaker defending it decides.
type Objective struct {
	P99 time.Duration
	// Trip is how many consecutive windows over P99 open the breaker.
	Trip int
	// Recover is how many consecutive windows under P99, half open, close it.
	Recover int
	// CoolDown is how long the breaker stays open after its last bad window
	// before it probes (half open). A probe that misses doubles it, up to
	// MaxCoolDown, so that lasting contention is probed less and less
	// often; closing restores it.
	CoolDown, MaxCoolDown time.Duration
	// Window is the span a closed breaker judges: the trailing window.
	// Open or half open, it judges only what came after its last change
	// of level (at most Window): the samples of an older level say
	// nothing of the new one, and judging them would lower the level
	// again for every second they stay in the window.
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
}

// DefaultObjective is p99 with the design's defaults: a 10 s window, 3
// windows to trip and to recover, a 10 s cool-down doubling up to 80 s,
// 20 samples a window, steps down of 0.8 and up of 0.05, a floor of 0.05.
func DefaultObjective(p99 time.Duration) Objective {
	return Objective{P99: p99, Window: 10 * time.Second, Trip: 3, Recover: 3, CoolDown: 10 * time.Second, MaxCoolDown: 80 * time.Second,
		MinSamples: 20, Step: 0.8, Raise: 0.05, Floor: 0.05}
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
	}
	return nil
}

// State is a breaker's state.
type State uint8

const (
	// Closed: the objective holds; best-effort traffic runs at its allocation.
	Closed State = iota
	// Open: the objective was missed Trip windows in a row; best-effort
	// traffic is held below its allocation, lower on each bad window.
	Open
	// HalfOpen: no bad window for CoolDown; best-effort traffic is let back
	// up in steps while the objective holds.
	HalfOpen
)

func (s State) String() string { return [...]string{"closed", "open", "half_open"}[s] }

// Breaker defends one objective. Level is what the defence asks of
// best-effort traffic (entities without a reservation): 1 when closed, a
// fraction of it while open or half open. How a level becomes limits
// (the largest best-effort consumers first, never below a reservation or
// min_limit) is the allocator's business, not this type's.
type Breaker struct {
	obj       Objective
	state     State
	level     float64
	bad, good int
	lastBad   time.Time
	// changed is when the level last changed; coolDown the present one.
	changed  time.Time
	coolDown time.Duration
	// failed is the level a bad window last came at, and when: a probe
	// stays a step below it for MaxCoolDown, so that under lasting
	// contention it does not walk back into the level that failed (a
	// broker's queue fills at once past it: measured, a probe to full
	// level cost the protected tenant two seconds at 85 ms).
	failed   float64
	failedAt time.Time
	// decided is the last evaluation with enough samples to decide: a
	// probe that has seen none for a window releases (the protected tenant
	// went quiet, and best-effort traffic is held for nobody).
	decided time.Time
}

// NewBreaker starts closed at level 1. The objective must be valid.
func NewBreaker(o Objective) *Breaker { return &Breaker{obj: o, level: 1, coolDown: o.CoolDown} }

// Since is where the window the next evaluation at now must be given
// starts: the objective's window back from now while closed; open or half
// open, the level's last change (at most the window back), so that each
// level is judged on the requests that met it.
func (b *Breaker) Since(now time.Time) time.Time {
	from := now.Add(time.Second - b.obj.Window) // the window's seconds, now's included
	if b.state != Closed && b.changed.After(from) {
		return b.changed
	}
	return from
}

func (b *Breaker) setLevel(now time.Time, level float64) {
	if level != b.level {
		b.level, b.changed = level, now
	}
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
}

// Evaluate takes one window's p99 and sample count at now (once a cycle,
// over the requests since Since(now)) and moves the breaker.
func (b *Breaker) Evaluate(now time.Time, p99 time.Duration, samples int) Verdict {
	from := b.state
	why := ""
	enough := samples >= b.obj.MinSamples
	bad := enough && p99 > b.obj.P99
	good := enough && !bad
	if enough {
		b.decided = now
	}
	switch b.state {
	case Closed:
		switch {
		case bad:
			b.bad++
			why = fmt.Sprintf("p99 %v over %v (%d of %d windows)", p99, b.obj.P99, b.bad, b.obj.Trip)
			if b.bad >= b.obj.Trip {
				b.state, b.lastBad = Open, now
				b.failed, b.failedAt = b.level, now
				b.setLevel(now, max(b.obj.Floor, b.obj.Step))
				why = fmt.Sprintf("p99 %v over %v for %d windows: best-effort traffic held to %.2f", p99, b.obj.P99, b.bad, b.level)
			}
		case good:
			b.bad = 0
			why = fmt.Sprintf("p99 %v within %v", p99, b.obj.P99)
		default:
			why = fmt.Sprintf("%d requests in the window, fewer than %d: no decision", samples, b.obj.MinSamples)
		}
	case Open:
		switch {
		case bad:
			b.lastBad = now
			b.setLevel(now, max(b.obj.Floor, b.level*b.obj.Step))
			why = fmt.Sprintf("p99 %v still over %v: best-effort traffic held to %.2f", p99, b.obj.P99, b.level)
		case now.Sub(b.lastBad) >= b.coolDown:
			b.state, b.good = HalfOpen, 0
			why = fmt.Sprintf("no window over %v for %v: probing", b.obj.P99, b.coolDown)
		default:
			why = fmt.Sprintf("holding at %.2f for the cool-down (%v)", b.level, b.coolDown)
		}
	case HalfOpen:
		switch {
		case bad:
			b.state, b.good, b.lastBad = Open, 0, now
			b.coolDown = min(b.obj.MaxCoolDown, 2*b.coolDown)
			b.failed, b.failedAt = b.level, now
			b.setLevel(now, max(b.obj.Floor, b.level*b.obj.Step))
			why = fmt.Sprintf("p99 %v over %v while probing: held to %.2f again, next probe after %v", p99, b.obj.P99, b.level, b.coolDown)
		case good && b.level >= 1 && b.good+1 >= b.obj.Recover:
			b.state, b.bad, b.good, b.coolDown = Closed, 0, 0, b.obj.CoolDown
			why = fmt.Sprintf("p99 within %v for %d windows, the last at full level: released", b.obj.P99, b.obj.Recover)
		case good:
			b.good++
			next := min(1, b.level+b.obj.Raise)
			if now.Sub(b.failedAt) < b.obj.MaxCoolDown {
				next = min(next, max(b.level, b.failed*b.obj.Step))
			}
			b.setLevel(now, next)
			why = fmt.Sprintf("p99 %v within %v (%d of %d windows): raised to %.2f", p99, b.obj.P99, b.good, b.obj.Recover, b.level)
		case now.Sub(b.decided) >= b.obj.Window:
			// Too few requests for a whole window: nothing left to defend.
			// Held on, best-effort traffic would stay cut for a tenant
			// that sends nothing (an hour at 0.51 in a probe).
			b.state, b.bad, b.good, b.coolDown = Closed, 0, 0, b.obj.CoolDown
			b.setLevel(now, 1)
			why = fmt.Sprintf("fewer than %d requests a window for %v: the protected tenant is quiet, released", b.obj.MinSamples, b.obj.Window)
		default:
			why = fmt.Sprintf("%d requests in the window, fewer than %d: no decision", samples, b.obj.MinSamples)
		}
	}
	return Verdict{State: b.state, Level: b.level, From: from, Changed: from != b.state, Why: why}
}

// State and Level are the breaker's present state and level.
func (b *Breaker) State() State   { return b.state }
func (b *Breaker) Level() float64 { return b.level }
