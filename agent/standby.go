package agent

import (
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/maps"
)

// applyStandby holds a new entity to its standby limit until the loop
// knows it: min(L, max(res, H, min_limit)), its parameters resolved as the
// cycle resolves them (a cluster share included). Nothing is guaranteed
// until the loop knows it: HTB lends it what the guarantees leave, up to
// the limit.
func (a *Agent) applyStandby(id uint32, key entity.Key) {
	for _, dc := range a.dirs {
		if !dc.cfg.Enabled() {
			continue
		}
		p, _, _ := a.limits.ResolveKey(key, dc.dir)
		limit := dc.alloc.Config().StandbyLimit(p.Reservation, p.Limit)
		if err := a.rates.Standby(maps.Direction(dc.dir), id, limit); err != nil {
			a.log.Warn("set standby limit", "entity", key.String(), "direction", dc.dir.String(), "err", err)
		}
	}
}
