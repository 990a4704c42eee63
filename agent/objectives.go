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
// produce requests (or its fetches' time to first byte, judged only on
// fetches that returned data), measured at the NIC every cycle, and
// defended by a breaker (latency.Breaker): after three disjoint 10 s
// windows over the objective it opens and caps what the direction's
// best-effort entities (no reservation, no objective of their own) may
// use together, lower on each bad window, each judged on the requests
// since the last change; after a cool-down it probes, raising the cap in
// steps, and closes once the objective has held three windows, the last
// at full level. The cap is an input to the allocation (allocator.Trim),
// so reservations, floors and weights among best-effort tenants keep
// their meaning: only best-effort traffic gives, each tenant by weight.

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

// objectiveSet is the configured latency objectives and how often their
// breakers changed state.
type objectiveSet struct {
	list        []*objective
	transitions uint64
}

func (a *Agent) syncObjectives() {
	want := entity.Objectives(a.cfg.Entities)
	kept := make([]*objective, 0, len(want))
	for _, w := range want {
		var o *objective
		for _, old := range a.objectives.list {
			if old.Objective == w {
				o = old
			}
		}
		if o == nil {
			o = &objective{Objective: w, breaker: latency.NewBreaker(latency.DefaultObjective(w.P99)), releases: map[string]uint64{}}
		}
		kept = append(kept, o)
	}
	a.objectives.list = kept
	a.seriesStale = true // objective entities always have series (assignSeries)
}

// objectiveTrim evaluates the direction's objectives on this cycle's
// input (dc.inputs, before allocation) and returns what the allocator is
// to hold the direction's best-effort traffic to (allocator.Trim): the
// lowest of the held objectives' level × best-effort usage when its
// breaker opened, and that objective (nil when none holds). It marks every objective entity of the direction
// Protected first, so no objective is defended by trimming another
// objective's tenant and none counts in the best-effort usage.
func (a *Agent) objectiveTrim(dc *direction, now time.Time) (allocator.Trim, *objective) {
	trim := allocator.Trim{}
	var holder *objective
	for _, o := range a.objectives.list {
		if o.Direction != dc.dir {
			continue
		}
		if id, ok := a.registry.Lookup(o.Key); ok {
			// Inputs are few compared with a cycle's work and objectives
			// fewer: a scan per objective costs less than an index kept
			// in step with the registry.
			for i := range dc.inputs {
				if entity.ID(dc.inputs[i].Slot) == id {
					dc.inputs[i].Protected = true
				}
			}
		}
	}
	for _, o := range a.objectives.list {
		if o.Direction != dc.dir {
			continue
		}
		o.p99, o.samples = a.judgedLatency(o, now)
		o.verdict = o.breaker.Evaluate(now, o.p99, o.samples)
		if o.verdict.Released != latency.NotReleased {
			o.releases[o.verdict.Released.String()]++
			if o.verdict.Released == latency.ReleasedIneffective {
				a.log.Warn("latency objective released as ineffective: best-effort traffic was held to the floor and the p99 stayed over the objective; its cause is elsewhere (disk, GC, the tenant's own load)",
					"entity", o.Key.String(), "direction", dc.dir.String(), "objective_p99", o.P99, "p99", o.p99)
			}
		}
		if o.verdict.Changed {
			a.objectives.transitions++
			if o.verdict.State == latency.Open && o.verdict.From == latency.Closed {
				o.base = allocator.BestEffortUsage(dc.inputs)
			}
			a.log.Info("latency objective "+o.verdict.State.String(), "entity", o.Key.String(), "direction", dc.dir.String(),
				"objective_p99", o.P99, "p99", o.p99, "requests", o.samples, "level", o.verdict.Level, "why", o.verdict.Why)
		}
		if o.verdict.Level >= 1 {
			continue
		}
		if c := o.verdict.Level * o.base; !trim.Enabled || c < trim.Cap {
			trim, holder = allocator.Trim{Enabled: true, Cap: c}, o
		}
	}
	return trim, holder
}

// judgedLatency is the p99 and request count an objective's breaker
// judges at now: its entity's requests of the objective's API since the
// breaker's Since, and for a fetch objective only the fetches that
// returned data (latencySeries.withData): an idle consumer's long polls
// (fetch.max.wait.ms) say nothing of the broker.
func (a *Agent) judgedLatency(o *objective, now time.Time) (time.Duration, int) {
	id, ok := a.registry.Lookup(o.Key)
	if !ok {
		return 0, 0
	}
	api := APIProduce
	if o.Direction == entity.Fetch {
		api = APIFetch
	}
	s := a.lat.series[latencyKey{dir: o.Direction, id: id, api: api}]
	if s == nil {
		return 0, 0
	}
	w := &s.window
	if api == APIFetch {
		w = &s.withData
	}
	return w.QuantileSince(now, o.breaker.Since(now), 0.99)
}

// noteTrim records, after the allocation, which entities the objective
// holding the direction (objectiveTrim's) trimmed (status: held_by).
func (a *Agent) noteTrim(dc *direction, holder *objective) {
	clear(dc.heldBy)
	if holder == nil {
		return
	}
	why := fmt.Sprintf("%s's %s latency objective (p99 %v)", holder.Key.Name, dc.dir, holder.P99)
	for i := range dc.outputs {
		if dc.outputs[i].Trimmed > 0 {
			dc.heldBy[dc.inputs[i].Slot] = why
		}
	}
}

// objectiveViews are the objectives as status shows them.
func (a *Agent) objectiveViews() []status.ObjectiveView {
	out := make([]status.ObjectiveView, 0, len(a.objectives.list))
	for _, o := range a.objectives.list {
		out = append(out, status.ObjectiveView{Entity: o.Key.String(), Direction: o.Direction.String(),
			ObjectiveMillis: float64(o.P99) / float64(time.Millisecond), P99Millis: float64(o.p99) / float64(time.Millisecond),
			Requests: o.samples, State: o.breaker.State().String(), Level: o.breaker.Level(), Why: o.verdict.Why,
			Releases: maps.Clone(o.releases)})
	}
	return out
}
