package allocator

import "fmt"

// Trim is a cycle's cap on the direction's best-effort traffic: what a
// latency objective's breaker (latency.Breaker) asks of it, as an input
// to the allocation rather than a patch on its output (issue #47), so
// that the trimmed limits keep the allocation's rules: weights among
// best-effort entities, every floor, never above the allocation.
//
// Best-effort entities are those without a reservation that no objective
// protects (Entity.Protected): the reserved keep their promise, and an
// objective entity is never held back by another objective (two of them
// would otherwise trim each other).
//
// The cap bounds what the best-effort entities can use, not the sum of
// their limits: each claims only what it would use (its demand, as in
// Step 2, up to its allocation), so idle entities with wide limits take
// nothing of it. Capping the sum of limits instead cut an active
// backfill to 48 % of its usage at a level of 0.80 beside 4 idle
// best-effort entities, and to 38 % beside 50 (issue #51's testbed; 58 %
// and 48 % in trim_test.go's case, 80 % with this).
type Trim struct {
	// Enabled: the cap applies this cycle (the zero Trim trims nothing).
	Enabled bool
	// Cap, in rate units, is what the direction's best-effort entities
	// may use together this cycle: a breaker's level × their usage when it
	// opened (BestEffortUsage). Floors win over it: no limit goes below
	// its effective reservation (min_limit for a best-effort entity).
	Cap float64
}

// BestEffort says whether an entity gives bandwidth to a Trim.
func (e *Entity) BestEffort() bool { return min(e.Reservation, e.Limit) == 0 && !e.Protected }

// BestEffortUsage is what the best-effort entities of a cycle's input use
// together: the base a breaker's level is a fraction of.
func BestEffortUsage(entities []Entity) float64 {
	var sum float64
	for i := range entities {
		if entities[i].BestEffort() {
			sum += entities[i].Usage
		}
	}
	return sum
}

func (t Trim) validate() error {
	if t.Enabled && !isFiniteNonNegative(t.Cap) {
		return fmt.Errorf("%w: trim cap: must be a finite number >= 0 (got %v)", ErrInvalidEntity, t.Cap)
	}
	return nil
}

// trim is Step 6b: the cap shared over the active best-effort entities as
// Steps 3–5 share C, with claims capped by each one's allocation. What
// standby best-effort entities use counts against the cap; their standby
// limit (the headroom H's business, outside C) is left alone. Each active
// best-effort entity's limit becomes
//
//	clamp(green + extra + headroom, effRes, its Step 6 limit)
//
// where green = min(effRes, claim) is taken first, extra water-fills the
// rest of the cap by weight over claim − green, and headroom spreads what
// is left by weight up to the Step 6 limit (so a quiet direction is not
// held below its allocation for nothing). Allocation.Trimmed records what
// each lost.
func (a *Allocator) trim(t Trim, entities []Entity, out []Allocation, s *Summary) {
	budget := t.Cap
	for i := range entities {
		if out[i].State != Active && entities[i].BestEffort() {
			budget -= entities[i].Usage
		}
	}
	budget = max(0, budget)
	var greenTotal float64
	a.fill = a.fill[:0]
	for i := range entities {
		e, o := &entities[i], &out[i]
		if o.State != Active || !e.BestEffort() {
			continue
		}
		claim := min(o.Demand, o.DynamicLimit)
		green := min(o.EffectiveReservation, claim)
		greenTotal += green
		o.Trimmed = green // the trimmed limit, built up below; made a difference at the end
		if claim > green {
			a.fill = append(a.fill, fillItem{index: int32(i), cap: claim - green, weight: e.Weight})
		}
	}
	left := a.waterFill(a.fill, max(0, budget-greenTotal))
	for _, f := range a.fill {
		out[f.index].Trimmed += f.share
	}
	if left > 0 {
		a.fill = a.fill[:0]
		for i := range entities {
			e, o := &entities[i], &out[i]
			if o.State == Active && e.BestEffort() && o.DynamicLimit > o.Trimmed {
				a.fill = append(a.fill, fillItem{index: int32(i), cap: o.DynamicLimit - o.Trimmed, weight: e.Weight})
			}
		}
		a.waterFill(a.fill, left)
		for _, f := range a.fill {
			out[f.index].Trimmed += f.share
		}
	}
	for i := range entities {
		e, o := &entities[i], &out[i]
		if o.State != Active || !e.BestEffort() {
			continue
		}
		limit := clamp(o.Trimmed, o.EffectiveReservation, o.DynamicLimit)
		o.Trimmed = o.DynamicLimit - limit
		o.DynamicLimit = limit
		s.Trimmed += o.Trimmed
	}
}
