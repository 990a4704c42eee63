package objectives

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/agent/entity"
)

// Collector exports what the latency objectives judge and what their
// defence takes (docs/latency.md): per objective the p99 its breaker
// judged, the target, the requests judged and whether they were enough to
// decide; per direction the cap on best-effort traffic; per best-effort
// entity the bandwidth the cap took off its limit. It reads the last
// cycle through gauges (Tracker.Gauges, under its owner's lock), so a
// scrape costs no evaluation.
type Collector struct {
	gauges                             func() Gauges
	p99, target, requests, judged      *prometheus.Desc
	bestEffortCap, trimmed, trimmedSum *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector of the metrics namespace ns reading
// gauges at each scrape.
func NewCollector(ns string, gauges func() Gauges) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "latency_objective", name), help, labels, nil)
	}
	obj := []string{"direction", "entity_type", "entity"}
	return &Collector{gauges: gauges,
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

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.p99, c.target, c.requests, c.judged, c.bestEffortCap, c.trimmed, c.trimmedSum} {
		ch <- d
	}
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	m := c.gauges()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, o := range m.objectives {
		l := []string{o.direction, o.kind, o.name}
		gauge(c.p99, o.p99.Seconds(), l...)
		gauge(c.target, o.target.Seconds(), l...)
		gauge(c.requests, float64(o.requests), l...)
		judged := 0.0
		if o.judged {
			judged = 1
		}
		gauge(c.judged, judged, l...)
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
		gauge(c.trimmed, d.others, d.direction, OthersType, OthersName)
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

// Gauges are the last cycle's objectives and trims, copied out for a
// scrape.
type Gauges struct {
	objectives []objectiveGauges
	directions []trimGauges
}

// Gauges copies out the last cycle's objectives and, for each direction
// enabled now, its hold on best-effort traffic.
func (t *Tracker) Gauges(enabled [2]bool) Gauges {
	var v Gauges
	for _, o := range t.list {
		v.objectives = append(v.objectives, objectiveGauges{o.Direction.String(), o.Key.Kind.String(), o.Key.Name, o.p99, o.P99, o.samples, o.verdict.Judged})
	}
	for _, dir := range entity.Directions {
		if !enabled[dir] {
			continue
		}
		h := &t.dirs[dir]
		d := trimGauges{direction: dir.String(), capped: h.trim.Enabled, cap: h.trim.Cap, trimmed: h.trimmed}
		for _, e := range h.entities {
			if t.series.has(e.id) {
				d.entities = append(d.entities, entityTrim{e.key.Kind.String(), e.key.Name, e.bytes})
			} else {
				d.others += e.bytes
			}
		}
		v.directions = append(v.directions, d)
	}
	return v
}
