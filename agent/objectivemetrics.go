package agent

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// objectiveCollector exports what the latency objectives judge and what
// their defence takes (docs/latency.md): per objective the p99 its
// breaker judged, the target, the requests judged and whether they were
// enough to decide; per direction the cap on best-effort traffic; per
// best-effort entity the bandwidth the cap took off its limit. It reads
// the agent's last cycle, so a scrape costs no evaluation.
type objectiveCollector struct {
	a                                  *Agent
	p99, target, requests, judged      *prometheus.Desc
	bestEffortCap, trimmed, trimmedSum *prometheus.Desc
}

var _ prometheus.Collector = (*objectiveCollector)(nil)

func newObjectiveCollector(a *Agent) *objectiveCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "latency_objective", name), help, labels, nil)
	}
	obj := []string{"direction", "entity_type", "entity"}
	return &objectiveCollector{a: a,
		p99: d("p99_seconds", "The p99 a latency objective's breaker judged in the last cycle: the entity's requests of the objective's API since the breaker's level last changed (at most 10 s), fetches only when they returned data; 0 with no requests.",
			obj...),
		target:   d("target_seconds", "A latency objective's p99 target.", obj...),
		requests: d("judged_requests", "Requests a latency objective's breaker judged in the last cycle (the window its p99 is over).", obj...),
		judged: d("judged", "1 when the last evaluation of a latency objective had enough requests to decide (20), 0 when it decided nothing: an objective that stays at 0 is defended by nothing (a quiet tenant, a TLS listener, an entity that never connects).",
			obj...),
		bestEffortCap: d("best_effort_cap_bytes_per_second", "What a direction's best-effort entities may use together while a latency objective holds them (level × their usage when its breaker opened); +Inf when none holds.",
			"direction"),
		trimmed: d("trimmed_bytes_per_second", "Bandwidth a latency objective's hold took off a best-effort entity's limit in the last cycle (its allocation minus its limit): entities with series of their own while trimmed, the others summed under <others> (always present).",
			obj...),
		trimmedSum: d("best_effort_trimmed_bytes_per_second", "Bandwidth the latency objectives' hold took off the direction's best-effort limits in the last cycle, summed.", "direction"),
	}
}

func (c *objectiveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.p99, c.target, c.requests, c.judged, c.bestEffortCap, c.trimmed, c.trimmedSum} {
		ch <- d
	}
}

func (c *objectiveCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.a.objectiveMetrics()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, o := range m.objectives {
		l := []string{o.direction, o.kind, o.name}
		gauge(c.p99, o.p99.Seconds(), l...)
		gauge(c.target, o.target.Seconds(), l...)
		gauge(c.requests, float64(o.requests), l...)
		gauge(c.judged, boolValue(o.judged), l...)
	}
	for _, d := range m.directions {
		capped := math.Inf(1)
		if d.capped {
			capped = d.cap
		}
		gauge(c.bestEffortCap, capped, d.direction)
		gauge(c.trimmedSum, d.trimmed, d.direction)
		for _, t := range d.entities {
			gauge(c.trimmed, t.bytes, d.direction, t.kind, t.name)
		}
		gauge(c.trimmed, d.others, d.direction, othersType, othersName)
	}
}

// objectiveGauges is one objective as the last cycle judged it.
type objectiveGauges struct {
	direction, kind, name string
	p99, target           time.Duration
	requests              int
	judged                bool
}

// trimGauges is one direction's hold on best-effort traffic in the last
// cycle: the cap, what it took in all, and from whom.
type trimGauges struct {
	direction string
	capped    bool
	cap       float64
	trimmed   float64
	entities  []entityTrim
	others    float64 // taken from entities without series of their own
}

type entityTrim struct {
	kind, name string
	bytes      float64
}

// objectiveMetricsView is the last cycle's objectives and trims, copied
// under the agent's lock.
type objectiveMetricsView struct {
	objectives []objectiveGauges
	directions []trimGauges
}

func (a *Agent) objectiveMetrics() objectiveMetricsView {
	a.mu.Lock()
	defer a.mu.Unlock()
	var v objectiveMetricsView
	for _, o := range a.objectives.list {
		v.objectives = append(v.objectives, objectiveGauges{o.Direction.String(), o.Key.Kind.String(), o.Key.Name, o.p99, o.P99, o.samples, o.verdict.Judged})
	}
	for _, dc := range a.dirs {
		if dc == nil || !dc.cfg.Enabled() {
			continue
		}
		d := trimGauges{direction: dc.dir.String(), capped: dc.summary.Trim.Enabled, cap: dc.summary.Trim.Cap, trimmed: dc.summary.Trimmed}
		for i := range dc.outputs {
			t := dc.outputs[i].Trimmed
			if t <= 0 || i >= len(dc.keys) {
				continue
			}
			if id := dc.inputs[i].Slot; int(id) < len(a.ownSeries) && a.ownSeries[id] {
				d.entities = append(d.entities, entityTrim{dc.keys[i].Kind.String(), dc.keys[i].Name, t})
			} else {
				d.others += t
			}
		}
		v.directions = append(v.directions, d)
	}
	return v
}
