// Package allocator is the elastic-quota control loop of docs/design.md §4 for one
// direction (produce or fetch): from each entity's reservation, weight, limit,
// measured use and throttled flag it computes the dynamic limit the data path
// enforces until the next cycle.
//
// The package is pure: no I/O, no clocks, no BPF. The only state that crosses
// cycles is the activity memory (K cycles) and the overcommit alert with its
// confirmation hysteresis, both held by an Allocator. Given the same sequence
// of inputs it produces the same outputs, whatever order the entities come in.
package allocator

import (
	"errors"
	"fmt"
	"math"
)

// Unlimited is the limit of an entity without a hard cap, and the demand of a
// throttled entity whose limit is unlimited.
var Unlimited = math.Inf(1)

// State is an entity's place in the control loop.
type State uint8

const (
	// Unknown: the entity was learned but the loop has not run since; it is
	// held to the standby limit. The allocator never returns it; the agent
	// uses it between learning an entity and the next cycle.
	Unknown State = iota
	// Standby: known, but not active in the last K cycles; held to the
	// standby limit and excluded from the allocation.
	Standby
	// Active: used more than the activity threshold in one of the last K
	// cycles; takes part in Steps 1–6.
	Active
)

func (s State) String() string {
	switch s {
	case Active:
		return "active"
	case Standby:
		return "standby"
	default:
		return "unknown"
	}
}

// Config holds one direction's control-loop parameters.
type Config struct {
	// Capacity of the direction in rate units per second (bytes/s in the agent).
	Capacity float64
	// SafetyRatio in (0, 1]: C = Capacity × SafetyRatio is distributed, the
	// rest, H, is headroom for traffic the loop does not know yet.
	SafetyRatio float64
	// MinDemand (g) is the least demand an unthrottled active entity claims.
	MinDemand float64
	// ActivityThreshold (ε): use above it marks an entity active.
	ActivityThreshold float64
	// MemoryCycles (K): an entity stays active for K cycles after its last
	// use above ε, so a bursty entity does not flap in and out.
	MemoryCycles int
	// OvercommitConfirmCycles: the overcommit alert changes only after this
	// many consecutive cycles disagree with it.
	OvercommitConfirmCycles int
	// MinLimit is the floor under every dynamic and standby limit (capped
	// by the entity's own limit L): a rate below it would make a Kafka
	// client's largest request outlast its request timeout, so the client
	// would retry the same request for ever. Floors are granted after
	// reservations, from what reservations leave of C (Step 1b).
	MinLimit float64
}

// DefaultConfig returns the defaults of docs/design.md §4 for a given capacity.
func DefaultConfig(capacity float64) Config {
	return Config{
		Capacity:                capacity,
		SafetyRatio:             1,
		MemoryCycles:            10,
		OvercommitConfirmCycles: 3,
	}
}

// ErrInvalidConfig wraps every error returned by Config.Validate.
var ErrInvalidConfig = errors.New("invalid allocator config")

// Validate reports the first out-of-range parameter, naming it as the
// scenario and configuration files do.
func (c Config) Validate() error {
	bad := func(field, why string, v any) error {
		return fmt.Errorf("%w: %s: %s (got %v)", ErrInvalidConfig, field, why, v)
	}
	switch {
	case !isFiniteNonNegative(c.Capacity):
		return bad("capacity", "must be a finite number >= 0", c.Capacity)
	case !(c.SafetyRatio > 0 && c.SafetyRatio <= 1):
		return bad("safety_ratio", "must be in (0, 1]", c.SafetyRatio)
	case !isFiniteNonNegative(c.MinDemand):
		return bad("min_demand", "must be a finite number >= 0", c.MinDemand)
	case !isFiniteNonNegative(c.ActivityThreshold):
		return bad("activity_threshold", "must be a finite number >= 0", c.ActivityThreshold)
	case c.MemoryCycles < 1:
		return bad("memory_cycles", "must be >= 1", c.MemoryCycles)
	case c.OvercommitConfirmCycles < 1:
		return bad("overcommit_confirm_cycles", "must be >= 1", c.OvercommitConfirmCycles)
	case !isFiniteNonNegative(c.MinLimit):
		return bad("min_limit", "must be a finite number >= 0", c.MinLimit)
	}
	return nil
}

// Entity is one quota entity's input to a cycle.
type Entity struct {
	// Slot is a dense, stable index the allocator uses to remember the
	// entity's activity across cycles. Slots must be unique within a cycle;
	// call Forget before reusing the slot of a reclaimed entity.
	Slot uint32
	// Reservation (res_e) in rate units; clamped to Limit.
	Reservation float64
	// Weight (w_e) > 0: the entity's share of spare capacity.
	Weight float64
	// Limit (L_e): the hard cap; Unlimited for none.
	Limit float64
	// Usage (u_e): measured rate over the rate window.
	Usage float64
	// Throttled: the data path held some of the entity's bytes back in the
	// last cycle, so Usage understates what it wants.
	Throttled bool
	// Protected: a latency objective defends this entity, so a Trim never
	// takes from it, even without a reservation.
	Protected bool
}

// Allocation is one entity's output from a cycle: each step's value, so that
// `sluice explain` can show how the dynamic limit was derived.
type Allocation struct {
	State State
	// EffectiveReservation = Reservation × Scale (Step 1), raised towards
	// the floor min(MinLimit, L) by FloorScale of the gap (Step 1b); 0 when
	// not active. The dynamic limit never falls below it.
	EffectiveReservation float64
	// Demand (Step 2): the limit when throttled (Unlimited if none), else
	// max(Usage, MinDemand).
	Demand float64
	// Green = min(EffectiveReservation, Demand) (Step 3).
	Green float64
	// Extra is the entity's water-filled share of spare capacity (Step 4).
	Extra float64
	// Headroom is its share of what remained after every claim was met (Step 5).
	Headroom float64
	// DynamicLimit is the rate the data path enforces until the next cycle
	// (Step 6, then Step 6b's trim), or the standby limit when not active.
	DynamicLimit float64
	// Trimmed is what the cycle's Trim took off the Step 6 limit (Step 6b):
	// bandwidth a latency objective holds back from this best-effort entity.
	Trimmed float64
}

// Summary is the direction-wide output of a cycle.
type Summary struct {
	// Cycle counts cycles from 1.
	Cycle uint64
	// C is the distributable capacity, H the safety headroom.
	C, H float64
	// ReservedTotal is R, the sum of active entities' reservations.
	ReservedTotal float64
	// Scale = min(1, C/R).
	Scale float64
	// FloorTopUp is T = Σ max(0, floor_e − res_e) over active entities: what
	// the floors add to reservations. FloorScale = min(1, (C − Σ res_e×Scale)/T)
	// is the part of each top-up that fits; below 1 the floors themselves
	// overcommit C.
	FloorTopUp, FloorScale float64
	// PromisedRatio is (R + T)/C: what reservations and floors promise (+Inf
	// when C is 0 and they promise anything).
	PromisedRatio float64
	// GreenRatio is Σgreen/C.
	GreenRatio float64
	// Overcommitted is this cycle's raw R + T > C (reservations, or the
	// floors on top of them, promise more than C); Overcommit is the alert,
	// which follows it only after the confirmation cycles agree.
	Overcommitted bool
	Overcommit    bool
	// OvercommitChanged is true in the cycle the alert entered or left.
	OvercommitChanged bool
	// Active and Standby count entities by state.
	Active, Standby int
	// Unallocated is capacity left after Step 5 because every active entity
	// reached its limit.
	Unallocated float64
	// Trim is the cycle's Trim as given; Trimmed the sum of what it took
	// off best-effort limits (Σ Allocation.Trimmed).
	Trim    Trim
	Trimmed float64
}

func isFiniteNonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }
