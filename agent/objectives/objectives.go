// Package objectives is the latency objectives (#34 item 3) as the control
// cycle sees them: it gathers request latency per entity from the data
// path's measurements (the book), decides which entities have metric
// series of their own (an objective's entity always does), is an input to
// the allocate stage (the cap on each direction's best-effort traffic,
// allocator.Trim, while an objective's breaker holds), and publishes what
// it judged (status views, metrics). It reads entities through Entities
// and exchanges values with the cycle; it knows nothing of the agent.
//
// An entity's configured p99 for its produce requests (or its fetches'
// time to first byte, judged only on fetches that returned data) is
// measured at the NIC every cycle and defended by a breaker
// (latency.Breaker): after three disjoint 10 s windows over the objective
// it opens and caps what the direction's best-effort entities (no
// reservation, no objective of their own) may use together, lower on each
// bad window, each judged on the requests since the last change; after a
// cool-down it probes, raising the cap in steps, and closes once the
// objective has held three windows, the last at full level. The cap is an
// input to the allocation (allocator.Trim), so reservations, floors and
// weights among best-effort tenants keep their meaning: only best-effort
// traffic gives, each tenant by weight. When holding its own direction
// proves ineffective, an objective holds the other direction's best-effort
// traffic instead, and leads with it once that brought the p99 back
// (cross.go).
//
// A Tracker is not safe for concurrent use: its owner serialises calls.
package objectives

import (
	"fmt"
	"log/slog"
	stdmaps "maps"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/allocator"
	"github.com/sluice-dev/sluice/latency"
	"github.com/sluice-dev/sluice/maps"
)

// Entities is what the feature reads of the registry of entities.
type Entities interface {
	Lookup(entity.Key) (entity.ID, bool)
	Key(entity.ID) (entity.Key, bool)
	Pinned(entity.ID) bool
	Each(func(entity.ID, entity.Key))
}

// Tracker is the latency objectives' state across cycles: the latency
// book, who has series of their own, the configured objectives with their
// breakers, and each direction's hold in the last cycle.
type Tracker struct {
	log    *slog.Logger
	book   *book
	series series
	list   []*objective
	// transitions counts the breakers' state changes.
	transitions uint64
	dirs        [2]hold
	// savedLeads is what the owner last kept of the leads (leads.go).
	savedLeads []Lead
}

type objective struct {
	entity.Objective
	// breakers[d] defends the objective by holding direction d's
	// best-effort traffic; trims is the one that holds this episode, lead
	// the one an episode starts with: the objective's own direction, until
	// holding the other one is what brought its p99 back (cross.go).
	breakers [2]*latency.Breaker
	trims    entity.Direction
	lead     entity.Direction
	// crossed: this episode moved to the other direction after its first
	// trim proved ineffective.
	crossed bool
	// base is the trimmed direction's best-effort usage when the breaker
	// opened: the level is a fraction of it. basePending: it opened, and
	// the trimmed direction's next Trim takes it.
	base        float64
	basePending bool
	// countedUsage[d] is what the objective's own entity added to d's
	// best-effort usage in d's last Trim (it is protected only in the
	// direction it holds): not traffic the objective could hold.
	countedUsage [2]float64
	verdict      latency.Verdict
	p99          time.Duration
	samples      int
	// releases counts the breakers' releases by reason (latency.Release).
	releases map[string]uint64
}

func newObjective(o entity.Objective) *objective {
	obj := &objective{Objective: o, trims: o.Direction, lead: o.Direction, releases: map[string]uint64{}}
	for d := range obj.breakers {
		obj.breakers[d] = latency.NewBreaker(latency.DefaultObjective(o.P99))
	}
	return obj
}

// breaker is the breaker holding this episode.
func (o *objective) breaker() *latency.Breaker { return o.breakers[o.trims] }

// hold is one direction's trim in the last cycle: the objective that held
// it (Trim's), whom it trimmed and by how much (NoteTrim's).
type hold struct {
	holder *objective
	// heldBy[id]: why the entity's limit was trimmed this cycle (status:
	// held_by).
	heldBy map[uint32]string
	// bestEffort is the direction's best-effort usage in its last Trim (0:
	// none, or the direction is not allocated): an objective moves its
	// hold here only when there is traffic to hold.
	bestEffort float64
	// The allocator's account of the trim, for metrics.
	trim     allocator.Trim
	trimmed  float64
	entities []trimmedEntity
}

// trimmedEntity is what the hold took off one entity's limit.
type trimmedEntity struct {
	id    uint32
	key   entity.Key
	bytes float64
}

// New returns a tracker for entity ids below entities; log hears the
// breakers' transitions.
func New(entities int, log *slog.Logger) *Tracker {
	t := &Tracker{log: log, book: newBook(), series: series{own: make([]bool, entities), stale: true}}
	for d := range t.dirs {
		t.dirs[d].heldBy = map[uint32]string{}
	}
	return t
}

// Sync makes the tracker's objectives the configuration's, keeping the
// breakers of those that did not change: at start and when a reload puts
// a configuration in force.
func (t *Tracker) Sync(e config.Entities) {
	want := entity.Objectives(e)
	kept := make([]*objective, 0, len(want))
	for _, w := range want {
		var o *objective
		for _, old := range t.list {
			if old.Objective == w {
				o = old
			}
		}
		if o == nil {
			o = newObjective(w)
		}
		kept = append(kept, o)
	}
	t.list = kept
	t.series.stale = true // objective entities always have series (AssignSeries)
}

// EntitiesChanged says entities came, went or changed pinning, or the
// metrics section changed: who has series is decided again at the next
// AssignSeries.
func (t *Tracker) EntitiesChanged() { t.series.stale = true }

// AssignSeries decides, at the start of a cycle, which entities have
// series of their own (series.go), if anything changed since it last did.
func (t *Tracker) AssignSeries(entities Entities, mc config.Metrics) {
	if !t.series.stale {
		return // before the closure below: most cycles change nothing
	}
	t.series.assign(entities, mc, func(id entity.ID) bool {
		for _, o := range t.list {
			if oid, ok := entities.Lookup(o.Key); ok && oid == id {
				return true
			}
		}
		return false
	})
}

// OwnSeries says whether the entity has metric series of its own (else
// it is summed into its direction's others).
func (t *Tracker) OwnSeries(id uint32) bool { return t.series.has(id) }

// Forget drops what is kept of an entity taken out of the registry: its
// series and its latency.
func (t *Tracker) Forget(id entity.ID) {
	if int(id) < len(t.series.own) {
		t.series.own[id] = false
	}
	t.book.forget(id)
}

// chargedTo is the direction and entity a measurement is charged to: a
// fetch to the connection's fetch entity, anything else to its produce
// entity (maps.NotGoverned: to nobody).
func chargedTo(ev maps.LatencyEvent) (entity.Direction, uint32) {
	dir := entity.Produce
	if apiClassOf(ev.APIKey) == APIFetch {
		dir = entity.Fetch
	}
	return dir, ev.Bound[dir]
}

// Charged says whether Observe would charge the measurement to an entity
// (its connection is governed in the request's direction).
func Charged(ev maps.LatencyEvent) bool {
	_, id := chargedTo(ev)
	return id != maps.NotGoverned
}

// Observe takes one request latency the data path measured at now,
// charged to the entity of its request's direction under its API.
func (t *Tracker) Observe(now time.Time, ev maps.LatencyEvent) {
	dir, id := chargedTo(ev)
	if id == maps.NotGoverned {
		return
	}
	t.book.observe(now, dir, entity.ID(id), t.series.has(id), ev)
}

// Trim evaluates dir's objectives on this cycle's input (before
// allocation) and returns what the allocator is to hold the direction's
// best-effort traffic to: the lowest level × best-effort usage when the
// breaker opened of the objectives holding dir (nothing when none does).
// An objective holds its own direction, or the other one when holding its
// own proved ineffective (cross.go). Trim marks every objective entity of
// the direction in inputs Protected first (that of an objective holding
// the direction from the other one too), so no objective is defended by
// trimming another objective's tenant, or its own tenant's other
// direction, and none counts in the best-effort usage.
func (t *Tracker) Trim(dir entity.Direction, inputs []allocator.Entity, entities Entities, now time.Time) allocator.Trim {
	for _, o := range t.list {
		protect := o.Direction == dir || o.trims == dir
		o.countedUsage[dir] = 0
		if id, ok := entities.Lookup(o.Key); ok {
			// Inputs are few compared with a cycle's work and objectives
			// fewer: a scan per objective costs less than an index kept
			// in step with the registry.
			for i := range inputs {
				if entity.ID(inputs[i].Slot) != id {
					continue
				}
				if protect {
					inputs[i].Protected = true
				} else if inputs[i].BestEffort() {
					o.countedUsage[dir] = inputs[i].Usage
				}
			}
		}
	}
	if len(t.list) == 0 {
		t.dirs[dir].holder = nil
		return allocator.Trim{} // no objective: no pass over the inputs
	}
	t.dirs[dir].bestEffort = allocator.BestEffortUsage(inputs)
	for _, o := range t.list {
		if o.Direction == dir {
			t.evaluate(o, entities, now)
		}
	}
	trim := allocator.Trim{}
	var holder *objective
	for _, o := range t.list {
		if o.trims != dir || o.breaker().Level() >= 1 {
			continue
		}
		if o.basePending {
			o.base, o.basePending = t.dirs[dir].bestEffort, false
		}
		if c := o.breaker().Level() * o.base; !trim.Enabled || c < trim.Cap {
			trim, holder = allocator.Trim{Enabled: true, Cap: c}, o
		}
	}
	t.dirs[dir].holder = holder
	return trim
}

// evaluate judges an objective's latency at now with the breaker holding
// this episode, and moves the hold to the other direction (or back) on
// what it decided.
func (t *Tracker) evaluate(o *objective, entities Entities, now time.Time) {
	o.p99, o.samples = t.judgedLatency(o, entities, now)
	o.verdict = o.breaker().Evaluate(now, o.p99, o.samples)
	if o.verdict.Released != latency.NotReleased {
		o.releases[o.verdict.Released.String()]++
	}
	t.noteVerdict(o)
	if o.verdict.Released != latency.NotReleased {
		t.afterRelease(o, now)
	}
}

// noteVerdict acts on what a breaker decided besides the level: counts
// and logs a transition, warns of an ineffective release, and on an
// opening marks the trimmed direction's best-effort usage to be taken as
// the base (by that direction's next Trim).
func (t *Tracker) noteVerdict(o *objective) {
	if o.verdict.Released == latency.ReleasedIneffective {
		t.log.Warn("latency objective released as ineffective: best-effort traffic was held to the floor and the p99 stayed over the objective",
			"entity", o.Key.String(), "direction", o.Direction.String(), "trimmed", o.trims.String(), "objective_p99", o.P99, "p99", o.p99)
	}
	if o.verdict.Changed {
		t.transitions++
		if o.verdict.State == latency.Open && o.verdict.From == latency.Closed {
			o.basePending = true
		}
		t.log.Info("latency objective "+o.verdict.State.String(), "entity", o.Key.String(), "direction", o.Direction.String(), "trimmed", o.trims.String(),
			"objective_p99", o.P99, "p99", o.p99, "requests", o.samples, "level", o.verdict.Level, "why", o.verdict.Why)
	}
}

// judgedLatency is the p99 and request count an objective's breaker
// judges at now: its entity's requests of the objective's API since the
// breaker's Since, and for a fetch objective only the fetches that
// returned data (latencySeries.withData): an idle consumer's long polls
// (fetch.max.wait.ms) say nothing of the broker.
func (t *Tracker) judgedLatency(o *objective, entities Entities, now time.Time) (time.Duration, int) {
	id, ok := entities.Lookup(o.Key)
	if !ok {
		return 0, 0
	}
	api := APIProduce
	if o.Direction == entity.Fetch {
		api = APIFetch
	}
	s := t.book.series[latencyKey{dir: o.Direction, id: id, api: api}]
	if s == nil {
		return 0, 0
	}
	w := &s.window
	if api == APIFetch {
		w = &s.withData
	}
	return w.QuantileSince(now, o.breaker().Since(now), 0.99)
}

// NoteTrim records, after the allocation Trim's cap went into, which
// entities the objective holding dir trimmed and by how much (status:
// held_by; metrics), from the allocation's inputs, outputs, their keys
// and summary.
func (t *Tracker) NoteTrim(dir entity.Direction, summary allocator.Summary, inputs []allocator.Entity, outputs []allocator.Allocation, keys []entity.Key) {
	h := &t.dirs[dir]
	h.trim, h.trimmed = summary.Trim, summary.Trimmed
	h.entities = h.entities[:0]
	for i := range outputs {
		if outputs[i].Trimmed > 0 && i < len(keys) {
			h.entities = append(h.entities, trimmedEntity{id: inputs[i].Slot, key: keys[i], bytes: outputs[i].Trimmed})
		}
	}
	clear(h.heldBy)
	if h.holder == nil {
		return
	}
	why := fmt.Sprintf("%s's %s latency objective (p99 %v)", h.holder.Key.Name, h.holder.Direction, h.holder.P99)
	if h.holder.Direction != dir {
		why += fmt.Sprintf(", holding %s: holding %s did not bring its p99 under", dir, h.holder.Direction)
	}
	for i := range outputs {
		if outputs[i].Trimmed > 0 {
			h.heldBy[inputs[i].Slot] = why
		}
	}
}

// HeldBy is why each entity of dir was trimmed in the last cycle, by id
// (empty: nobody was). The map is the tracker's: copy it to keep it.
func (t *Tracker) HeldBy(dir entity.Direction) map[uint32]string { return t.dirs[dir].heldBy }

// Views are the objectives as status shows them.
func (t *Tracker) Views() []status.ObjectiveView {
	out := make([]status.ObjectiveView, 0, len(t.list))
	for _, o := range t.list {
		out = append(out, status.ObjectiveView{Entity: o.Key.String(), Direction: o.Direction.String(),
			ObjectiveMillis: float64(o.P99) / float64(time.Millisecond), P99Millis: float64(o.p99) / float64(time.Millisecond),
			Requests: o.samples, State: o.breaker().State().String(), Level: o.breaker().Level(), Trims: o.trims.String(), Why: o.verdict.Why,
			Releases: stdmaps.Clone(o.releases)})
	}
	return out
}

// Transitions counts the breakers' state changes (each is logged).
func (t *Tracker) Transitions() uint64 { return t.transitions }

// Latency is id's latency in dir per API at now, as status shows it (nil
// when none was measured in the last minute).
func (t *Tracker) Latency(now time.Time, dir entity.Direction, id entity.ID) []status.LatencyView {
	return t.book.quantiles(now, dir, id)
}

// OthersLatency is the latency of dir's entities without series of their
// own, as Latency.
func (t *Tracker) OthersLatency(now time.Time, dir entity.Direction) []status.LatencyView {
	return t.book.quantiles(now, dir, othersEntity)
}

// Histograms lists every latency series, for /metrics, named through
// entities (series of entities released since are left out).
func (t *Tracker) Histograms(entities Entities) []Histogram { return t.book.histograms(entities) }
