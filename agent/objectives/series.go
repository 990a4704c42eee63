package objectives

import (
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
)

// Per-entity metric series are bounded (metrics.entities,
// metrics.max_entity_series): client-ids are the clients' choice, and
// every entity with series of its own costs the broker's Prometheus a
// dozen series per direction. An entity either has series of its own for
// as long as it lives or is summed into its direction's "unconfigured"
// aggregate (the agent accumulates that aggregate's counters cycle by
// cycle so that they only grow; its latency goes to the book's others).
// The decision lives here because latency objectives bend it: an
// objective is judged on its entity's own latency series.

// series is which entities have series of their own.
type series struct {
	// own[id]: the entity has metric series of its own (assign);
	// stale: entities came, went or changed pinning since it ran.
	own   []bool
	stale bool
}

// assign decides, at the start of a cycle, which entities have series of their
// own: the unknown and overflow entities always; entities with a latency
// objective always, budget or not, since an objective is judged on the
// entity's own latency series (and they are few: configured, one per
// objective); then configured entities (pinned), and in mode all every
// other entity, while fewer than max_entity_series have them. Entities
// that have series keep them before new ones get any, so a full table
// does not churn.
func (s *series) assign(entities Entities, mc config.Metrics, objective func(entity.ID) bool) {
	// Who has series changes only when entities come or go, get pinned or
	// unpinned, or the metrics section is reloaded: the passes over the
	// registry run after one of those, not every cycle.
	if !s.stale {
		return
	}
	s.stale = false
	eligible := func(id entity.ID) bool {
		return mc.Entities == config.MetricsAll || entities.Pinned(id)
	}
	held := 0
	entities.Each(func(id entity.ID, _ entity.Key) {
		if id == entity.UnknownID || id == entity.OverflowID {
			s.own[id] = true
			return
		}
		if objective(id) {
			s.own[id] = true
			held++ // counted, so the others share what is left of the budget
			return
		}
		if s.own[id] {
			s.own[id] = eligible(id) && held < mc.MaxEntitySeries
			if s.own[id] {
				held++
			}
		}
	})
	entities.Each(func(id entity.ID, _ entity.Key) {
		if !s.own[id] && held < mc.MaxEntitySeries && eligible(id) {
			s.own[id] = true
			held++
		}
	})
}

// has says whether id has series of its own.
func (s *series) has(id uint32) bool { return int(id) < len(s.own) && s.own[id] }
