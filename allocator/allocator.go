package allocator

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidEntity wraps every error Cycle returns for a bad entity input.
var ErrInvalidEntity = errors.New("invalid entity")

// Allocator runs the control loop for one direction. It is not safe for
// concurrent use; the agent runs one per direction from one goroutine.
type Allocator struct {
	cfg   Config
	cycle uint64

	// lastActive[slot] is the cycle in which the entity last used more than
	// ε (0: never). Active means cycle − lastActive < K.
	lastActive []uint64
	// seenStamp[slot] == stamp marks a slot already present in this call,
	// to reject duplicates before anything is changed.
	seenStamp []uint64
	stamp     uint64

	// overcommit alert and the count of consecutive cycles disagreeing with it.
	overcommit         bool
	overcommitDisagree int

	// fill is scratch space for the water-filling steps, reused every cycle
	// so that a steady-state cycle allocates nothing.
	fill []fillItem
	// levels is waterFill's scratch space, reused likewise.
	levels []levelItem
}

// New returns an Allocator for cfg, or the error of cfg.Validate.
func New(cfg Config) (*Allocator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Allocator{cfg: cfg}, nil
}

// Config returns the allocator's current parameters.
func (a *Allocator) Config() Config { return a.cfg }

// SetConfig replaces the parameters from the next cycle on (configuration
// reload). The activity memory and the overcommit alert are kept.
func (a *Allocator) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	a.cfg = cfg
	return nil
}

// Forget clears what the allocator remembers of a slot, so that a reclaimed
// entity's slot can be given to a new entity without inheriting its activity.
func (a *Allocator) Forget(slot uint32) {
	if int(slot) < len(a.lastActive) {
		a.lastActive[slot] = 0
	}
}

// StandbyLimit is the limit of an entity that takes no part in the
// allocation: min(L, max(res, H, MinLimit)). An entity with a reservation is
// protected from its first byte; one without is held to the headroom H (or
// the floor, if higher) until the loop knows it. The unknown entity, which
// has neither reservation nor limit, gets max(H, MinLimit).
func (c Config) StandbyLimit(reservation, limit float64) float64 {
	return min(limit, max(min(reservation, limit), c.Headroom(), c.MinLimit))
}

// UnknownLimit is the unknown entity's limit (no reservation, no cap):
// max(H, MinLimit).
func (c Config) UnknownLimit() float64 { return c.StandbyLimit(0, Unlimited) }

// Floor is an entity's floor: MinLimit, capped by its own limit (an operator's
// explicit cap wins; check-config warns about it).
func (c Config) Floor(limit float64) float64 { return min(c.MinLimit, limit) }

// Headroom returns H = capacity − C for a configuration.
func (c Config) Headroom() float64 { return c.Capacity - c.Distributable() }

// Distributable returns C = capacity × safety_ratio.
func (c Config) Distributable() float64 { return c.Capacity * c.SafetyRatio }

// Cycle runs Steps 0–6 of docs/design.md §4 over entities and writes each
// entity's allocation to out[i] (out must be at least as long as entities).
// An invalid entity is reported with its index and changes nothing: not the
// activity memory, not the alert, not the cycle count.
func (a *Allocator) Cycle(entities []Entity, out []Allocation) (Summary, error) {
	return a.CycleTrim(entities, Trim{}, out)
}

// CycleTrim is Cycle with a Trim on best-effort traffic (Step 6b, trim.go)
// applied to the Step 6 limits; an invalid Trim is refused as an invalid
// entity is.
func (a *Allocator) CycleTrim(entities []Entity, t Trim, out []Allocation) (Summary, error) {
	if len(out) < len(entities) {
		return Summary{}, fmt.Errorf("%w: output has room for %d allocations, need %d", ErrInvalidEntity, len(out), len(entities))
	}
	if err := t.validate(); err != nil {
		return Summary{}, err
	}
	if err := a.validate(entities); err != nil {
		return Summary{}, err
	}
	a.cycle++
	cfg := a.cfg
	c := cfg.Distributable()
	s := Summary{Cycle: a.cycle, C: c, H: cfg.Headroom(), Scale: 1, Trim: t}

	// Step 0: activity with K-cycle memory.
	k := uint64(cfg.MemoryCycles)
	for i := range entities {
		e := &entities[i]
		if e.Usage > cfg.ActivityThreshold {
			a.lastActive[e.Slot] = a.cycle
		}
		last := a.lastActive[e.Slot]
		o := &out[i]
		*o = Allocation{}
		if last != 0 && a.cycle-last < k {
			o.State = Active
			s.Active++
			res := min(e.Reservation, e.Limit)
			s.ReservedTotal += res
			s.FloorTopUp += max(0, cfg.Floor(e.Limit)-res)
		} else {
			o.State = Standby
			s.Standby++
			o.Demand = demandOf(e, cfg.MinDemand)
			o.DynamicLimit = cfg.StandbyLimit(e.Reservation, e.Limit)
		}
	}

	// Step 1: effective reservations, scaled down together when R > C.
	if s.ReservedTotal > c {
		s.Scale = c / s.ReservedTotal
	}
	// Step 1b: floors. Each active entity's effective reservation is raised
	// towards its floor (top-ups summed in Step 0), from what the
	// reservations leave of C, so that floors never take a reservation's
	// bandwidth (many small clients cannot crowd out a reserved tenant) and
	// Σ effRes ≤ C still holds.
	s.FloorScale = 1
	if s.FloorTopUp > 0 {
		s.FloorScale = min(1, max(0, c-s.ReservedTotal*s.Scale)/s.FloorTopUp)
	}
	s.Overcommitted = s.ReservedTotal+s.FloorTopUp > c
	a.updateOvercommitAlert(&s)

	// Steps 2–3: demand and green; what nobody needs of its reservation stays
	// in spare (work conservation). Step 4's claims above green are
	// gathered in the same pass.
	var greenTotal float64
	a.fill = a.fill[:0]
	for i := range entities {
		o := &out[i]
		if o.State != Active {
			continue
		}
		e := &entities[i]
		res := min(e.Reservation, e.Limit)
		o.EffectiveReservation = res*s.Scale + max(0, cfg.Floor(e.Limit)-res)*s.FloorScale
		o.Demand = demandOf(e, cfg.MinDemand)
		o.Green = min(o.EffectiveReservation, o.Demand)
		greenTotal += o.Green
		if claim := min(o.Demand, e.Limit) - o.Green; claim > 0 {
			a.fill = append(a.fill, fillItem{index: int32(i), cap: claim, weight: e.Weight})
		}
	}
	spare := max(0, c-greenTotal)

	// Step 4: weighted water-filling of spare over the claims above green.
	left := a.waterFill(a.fill, spare)
	for _, f := range a.fill {
		out[f.index].Extra = f.share
	}

	// Step 5: what is left after every claim is met becomes headroom, shared
	// by weight over all active entities up to their limits, so that growth
	// between cycles is served at once.
	if left > 0 {
		a.fill = a.fill[:0]
		for i := range entities {
			o := &out[i]
			if o.State != Active {
				continue
			}
			room := entities[i].Limit - o.Green - o.Extra
			if room > 0 {
				a.fill = append(a.fill, fillItem{index: int32(i), cap: room, weight: entities[i].Weight})
			}
		}
		left = a.waterFill(a.fill, left)
		for _, f := range a.fill {
			out[f.index].Headroom = f.share
		}
	}
	s.Unallocated = left

	// Step 6: clamp into [effRes, L].
	for i := range entities {
		o := &out[i]
		if o.State != Active {
			continue
		}
		o.DynamicLimit = clamp(o.Green+o.Extra+o.Headroom, o.EffectiveReservation, entities[i].Limit)
	}
	// Step 6b: a latency objective's cap on best-effort traffic.
	if t.Enabled {
		a.trim(t, entities, out, &s)
	}

	switch {
	case c > 0:
		s.PromisedRatio = (s.ReservedTotal + s.FloorTopUp) / c
		s.GreenRatio = greenTotal / c
	case s.ReservedTotal+s.FloorTopUp > 0:
		s.PromisedRatio = math.Inf(1)
	}
	return s, nil
}

// updateOvercommitAlert applies the confirmation hysteresis: the alert
// follows the raw condition only after it has disagreed for the configured
// number of consecutive cycles. The computation itself never waits.
func (a *Allocator) updateOvercommitAlert(s *Summary) {
	if s.Overcommitted == a.overcommit {
		a.overcommitDisagree = 0
	} else {
		a.overcommitDisagree++
		if a.overcommitDisagree >= a.cfg.OvercommitConfirmCycles {
			a.overcommit = s.Overcommitted
			a.overcommitDisagree = 0
			s.OvercommitChanged = true
		}
	}
	s.Overcommit = a.overcommit
}

// demandOf is Step 2: a throttled entity's true demand is hidden, so it
// claims its limit; otherwise it claims what it used, at least g.
func demandOf(e *Entity, minDemand float64) float64 {
	if e.Throttled {
		return e.Limit
	}
	return max(e.Usage, minDemand)
}

func clamp(v, lo, hi float64) float64 {
	return min(max(v, lo), hi)
}

// validate checks every entity before the cycle changes any state.
func (a *Allocator) validate(entities []Entity) error {
	a.stamp++
	for i := range entities {
		e := &entities[i]
		switch {
		case !isFiniteNonNegative(e.Reservation):
			return fmt.Errorf("%w: entities[%d].reservation: must be a finite number >= 0 (got %v)", ErrInvalidEntity, i, e.Reservation)
		case !(e.Weight > 0) || math.IsInf(e.Weight, 0):
			return fmt.Errorf("%w: entities[%d].weight: must be a finite number > 0 (got %v)", ErrInvalidEntity, i, e.Weight)
		case !(e.Limit >= 0):
			return fmt.Errorf("%w: entities[%d].limit: must be >= 0 or unlimited (got %v)", ErrInvalidEntity, i, e.Limit)
		case !isFiniteNonNegative(e.Usage):
			return fmt.Errorf("%w: entities[%d].usage: must be a finite number >= 0 (got %v)", ErrInvalidEntity, i, e.Usage)
		}
		if int(e.Slot) >= len(a.lastActive) {
			a.growSlots(int(e.Slot) + 1)
		}
		if a.seenStamp[e.Slot] == a.stamp {
			return fmt.Errorf("%w: entities[%d].slot: %d is used twice in one cycle", ErrInvalidEntity, i, e.Slot)
		}
		a.seenStamp[e.Slot] = a.stamp
	}
	return nil
}

func (a *Allocator) growSlots(n int) {
	if n <= cap(a.lastActive) {
		a.lastActive = a.lastActive[:n]
		a.seenStamp = a.seenStamp[:n]
		return
	}
	size := max(n, 2*cap(a.lastActive))
	lastActive := make([]uint64, n, size)
	copy(lastActive, a.lastActive)
	seen := make([]uint64, n, size)
	copy(seen, a.seenStamp)
	a.lastActive, a.seenStamp = lastActive, seen
}
