package agent

import (
	"fmt"
	"maps"
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/allocator"
	"github.com/sluice-dev/sluice/latency"
)

// Latency objectives (#34 item 3): an entity's configured p99 for its
// produce requests (or its fetches' time to first byte), measured at the
// NIC every cycle, and defended by a breaker (latency.Breaker): after
// three disjoint 10 s windows over the objective it opens and takes bandwidth from
// the direction's best-effort entities (no reservation), the largest
// first, never below min_limit (allocator.TrimLargest), lower on each bad
// window, each judged on the requests since the last change; after a
// cool-down it probes, raising them in steps, and closes once the
// objective has held three windows, the last at full level. Reservations and weights keep their meaning: only
// best-effort traffic gives.

type objective struct {
	entity.Objective
	breaker *latency.Breaker
	// base is the direction's best-effort usage when the breaker opened:
	// the level is a fraction of it.
	base    float64
	verdict latency.Verdict
	p99     time.Duration
	samples int
	// releases counts the breaker's releases by reason (latency.Release).
	releases map[string]uint64
}

// syncObjectives makes the agent's objectives the configuration's,
// keeping the breakers of those that did not change: at start and when a
// reload puts a configuration in force.
func (a *Agent) syncObjectives() {
	want := entity.Objectives(a.cfg.Entities)
	kept := make([]*objective, 0, len(want))
	for _, w := range want {
		var o *objective
		for _, old := range a.objectives {
			if old.Objective == w {
				o = old
			}
		}
		if o == nil {
			o = &objective{Objective: w, breaker: latency.NewBreaker(latency.DefaultObjective(w.P99)), releases: map[string]uint64{}}
		}
		kept = append(kept, o)
	}
	a.objectives = kept
}

// defendObjectives evaluates the direction's objectives and, while any
// holds best-effort traffic below its allocation, trims the dynamic limits
// of the direction's best-effort entities (dc.outputs), largest first.
func (a *Agent) defendObjectives(dc *direction, now time.Time) {
	level := 1.0
	var holder *objective
	bestEffort := func(i int) bool { return dc.params[i].Reservation == 0 }
	for _, o := range a.objectives {
		if o.Direction != dc.dir {
			continue
		}
		api := APIProduce
		if o.Direction == entity.Fetch {
			api = APIFetch
		}
		o.p99, o.samples = 0, 0
		own := entity.ID(0)
		if id, ok := a.registry.Lookup(o.Key); ok {
			own = id
			if s := a.lat.series[latencyKey{dir: dc.dir, id: id, api: api}]; s != nil {
				o.p99, o.samples = s.window.QuantileSince(now, o.breaker.Since(now), 0.99)
			}
		}
		o.verdict = o.breaker.Evaluate(now, o.p99, o.samples)
		if o.verdict.Released != latency.NotReleased {
			o.releases[o.verdict.Released.String()]++
			if o.verdict.Released == latency.ReleasedIneffective {
				a.log.Warn("latency objective released as ineffective: best-effort traffic was held to the floor and the p99 stayed over the objective; its cause is elsewhere (disk, GC, the tenant's own load)",
					"entity", o.Key.String(), "direction", dc.dir.String(), "objective_p99", o.P99, "p99", o.p99)
			}
		}
		if o.verdict.Changed {
			a.objectiveTransitions++
			if o.verdict.State == latency.Open && o.verdict.From == latency.Closed {
				o.base = 0
				for i, in := range dc.inputs {
					if bestEffort(i) && entity.ID(in.Slot) != own {
						o.base += in.Usage
					}
				}
			}
			a.log.Info("latency objective "+o.verdict.State.String(), "entity", o.Key.String(), "direction", dc.dir.String(),
				"objective_p99", o.P99, "p99", o.p99, "requests", o.samples, "level", o.verdict.Level, "why", o.verdict.Why)
		}
		if o.verdict.Level < level {
			level, holder = o.verdict.Level, o
		}
	}
	clear(dc.heldBy)
	if holder == nil {
		return
	}
	own, _ := a.registry.Lookup(holder.Key)
	var idx []int
	var limits, floors []float64
	for i, in := range dc.inputs {
		if bestEffort(i) && entity.ID(in.Slot) != own {
			idx = append(idx, i)
			limits = append(limits, dc.outputs[i].DynamicLimit)
			floors = append(floors, dc.cfg.MinLimit)
		}
	}
	out := make([]float64, len(limits))
	allocator.TrimLargest(limits, floors, level*holder.base, out)
	why := fmt.Sprintf("%s's %s latency objective (p99 %v)", holder.Key.Name, dc.dir, holder.P99)
	for j, i := range idx {
		if out[j] < dc.outputs[i].DynamicLimit {
			dc.outputs[i].DynamicLimit = out[j]
			dc.heldBy[dc.inputs[i].Slot] = why
		}
	}
}

// objectiveViews are the objectives as status shows them.
func (a *Agent) objectiveViews() []status.ObjectiveView {
	out := make([]status.ObjectiveView, 0, len(a.objectives))
	for _, o := range a.objectives {
		out = append(out, status.ObjectiveView{Entity: o.Key.String(), Direction: o.Direction.String(),
			ObjectiveMillis: float64(o.P99) / float64(time.Millisecond), P99Millis: float64(o.p99) / float64(time.Millisecond),
			Requests: o.samples, State: o.breaker.State().String(), Level: o.breaker.Level(), Why: o.verdict.Why,
			Releases: maps.Clone(o.releases)})
	}
	return out
}
