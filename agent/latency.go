package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/agent/objectives"
	"github.com/sluice-dev/sluice/maps"
)

// The latency objectives are a package of their own (agent/objectives):
// the agent hands it the data path's latency measurements here, and the
// cycle its inputs (cycle.go: series at the start, the trim before each
// allocation, what it trimmed after).

// ObserveLatency takes one request latency the data path measured, charged
// to the entity of its request's direction under its API.
func (a *Agent) ObserveLatency(ev maps.LatencyEvent) {
	if !objectives.Charged(ev) {
		return // before the lock: exempt peers' requests are many
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.objectives.Observe(a.deps.Clock.Now(), ev)
}

// LatencyHistograms lists every latency series, for /metrics.
func (a *Agent) LatencyHistograms() []objectives.Histogram {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.objectives.Histograms(a.registry)
}

// objectiveCollector exports the objectives' judgements and trims
// (objectives.Collector), read under the agent's lock.
func (a *Agent) objectiveCollector() prometheus.Collector {
	return objectives.NewCollector(ns, func() objectives.Gauges {
		a.mu.Lock()
		defer a.mu.Unlock()
		var enabled [2]bool
		for _, dc := range a.dirs {
			enabled[dc.dir] = dc.cfg.Enabled()
		}
		return a.objectives.Gauges(enabled)
	})
}
