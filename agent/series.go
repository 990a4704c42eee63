package agent

import (
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
)

// Per-entity metric series are bounded (metrics.entities,
// metrics.max_entity_series): client-ids are the clients' choice, and
// every entity with series of its own costs the broker's Prometheus a
// dozen series per direction. An entity either has series of its own for
// as long as it lives or is summed into its direction's "unconfigured"
// aggregate, whose counters the agent accumulates cycle by cycle so that
// they only grow (an entity joining or leaving the sum would otherwise
// read as a counter reset or a burst).

// assignSeries decides, at the start of a cycle, which entities have series of their
// own: the unknown and overflow entities always; entities with a latency
// objective always, budget or not, since an objective is judged on the
// entity's own latency series (and they are few: configured, one per
// objective); then configured entities (pinned), and in mode all every
// other entity, while fewer than max_entity_series have them. Entities
// that have series keep them before new ones get any, so a full table
// does not churn.
func (a *Agent) assignSeries() {
	// Who has series changes only when entities come or go, get pinned or
	// unpinned, or the metrics section is reloaded: the passes over the
	// registry run after one of those, not every cycle.
	if !a.seriesStale {
		return
	}
	a.seriesStale = false
	mc := a.cfg.Metrics
	eligible := func(id entity.ID) bool {
		return mc.Entities == config.MetricsAll || a.registry.Pinned(id)
	}
	held := 0
	objective := func(id entity.ID) bool {
		for _, o := range a.objectives.list {
			if oid, ok := a.registry.Lookup(o.Key); ok && oid == id {
				return true
			}
		}
		return false
	}
	a.registry.Each(func(id entity.ID, _ entity.Key) {
		if id == entity.UnknownID || id == entity.OverflowID {
			a.ownSeries[id] = true
			return
		}
		if objective(id) {
			a.ownSeries[id] = true
			held++ // counted, so the others share what is left of the budget
			return
		}
		if a.ownSeries[id] {
			a.ownSeries[id] = eligible(id) && held < mc.MaxEntitySeries
			if a.ownSeries[id] {
				held++
			}
		}
	})
	a.registry.Each(func(id entity.ID, _ entity.Key) {
		if !a.ownSeries[id] && held < mc.MaxEntitySeries && eligible(id) {
			a.ownSeries[id] = true
			held++
		}
	})
}

// aggregate sums, per direction, the entities without series of their own.
// Its counters accumulate deltas, so they never go back.
type aggregate struct {
	entities       int
	rate           float64
	bytes          uint64
	heldBytes      uint64
	droppedPackets uint64
}
