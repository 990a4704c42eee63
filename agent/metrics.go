package agent

import (
	"errors"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is sluice's private Prometheus registry. One collector reads the
// agent's last snapshot (and the data path's statistics) at scrape time
// and counts its own failures instead of failing the scrape. Entity labels
// are bounded: entities exist only in the registry, at most max_entities.
type Metrics struct {
	Registry  *prometheus.Registry
	cycle     prometheus.Histogram
	collector *collector
}

const ns = "sluice"

// NewMetrics registers the agent's metrics.
func NewMetrics(a *Agent, dp DataPath) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{Registry: reg}
	m.cycle = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: ns, Name: "control_loop_duration_seconds",
		Help:    "Duration of one control-loop cycle: read counters, allocate both directions, write changed rates.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	})
	a.observeCycle = func(d time.Duration) { m.cycle.Observe(d.Seconds()) }
	version := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "build_info", Help: "Build information.", ConstLabels: prometheus.Labels{"version": version}})
	buildInfo.Set(1)
	m.collector = newCollector(a, dp)
	reg.MustRegister(m.cycle, buildInfo, m.collector,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "config_reload_failures_total", Help: "Configuration reloads refused (the running configuration stayed)."},
			func() float64 { return float64(a.ReloadFailures()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "rate_write_failures_total", Help: "Control cycles whose rate writes to the shaper failed (retried next cycle; no heartbeat meanwhile)."},
			func() float64 { return float64(a.RateWriteFailures()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "refresh_age_seconds", Help: "Time since the last successful control-loop cycle."},
			func() float64 { return a.RefreshAge().Seconds() }),
	)
	return m
}

// Serve serves /metrics until the listener closes.
func (m *Metrics) Serve(l net.Listener) error {
	err := m.server().Serve(l)
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Open listens on addr and serves /metrics there until stop is called: the
// agent's MetricsOpener, so that a reloaded metrics_address moves it.
func (m *Metrics) Open(addr string) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := m.server()
	go srv.Serve(l)
	return func() { srv.Close() }, nil
}

func (m *Metrics) server() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

type collector struct {
	a  *Agent
	dp DataPath

	failures prometheus.Counter

	entityBytes, entityRate, effRes, dynLimit, state, utilisation, dropped, delay *prometheus.Desc
	promised, green, overcommit, capacityC, entities, overflowed                  *prometheus.Desc
	samples, dpStats                                                              *prometheus.Desc
	exemptBytes, replicationClaims, connsTracked, connsReaped, connsRebound       *prometheus.Desc
	learnerConns, unconfigured, peerRefused                                       *prometheus.Desc
}

func newCollector(a *Agent, dp DataPath) *collector {
	entity := []string{"direction", "type", "entity"}
	dir := []string{"direction"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, labels, nil)
	}
	return &collector{
		a: a, dp: dp,
		failures:    prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "collector_errors_total", Help: "Scrapes in which the collector could not read something (it reports what it could)."}),
		entityBytes: d("entity_bytes_total", "TCP payload bytes counted for the entity.", entity),
		entityRate:  d("entity_rate_bytes", "Measured rate over the rate window, bytes/s.", entity),
		effRes:      d("entity_effective_reservation_bytes", "Effective reservation, bytes/s (scaled down under overcommit).", entity),
		dynLimit:    d("entity_dynamic_limit_bytes", "Rate the data path enforces until the next cycle, bytes/s.", entity),
		state:       d("entity_state", "1 for the entity's state (active, standby).", append(entity, "state")),
		utilisation: d("entity_reservation_utilisation", "Measured rate over reservation.", entity),
		dropped:     d("entity_dropped_packets", "Packets the shaper dropped in the last cycle (beyond the delay bound).", entity),
		delay:       d("entity_queue_delay_seconds", "Queueing delay the shaper adds now.", entity),
		promised:    d("promised_ratio", "Sum of active reservations over the distributable capacity C.", dir),
		green:       d("green_ratio", "Sum of green shares over C.", dir),
		overcommit:  d("overcommit", "1 while reservations exceed C (after confirmation).", dir),
		capacityC:   d("distributable_capacity_bytes", "C = capacity × safety_ratio, bytes/s.", dir),
		entities:    d("entities", "Entities by state.", []string{"direction", "state"}),
		overflowed:  d("entities_overflowed_total", "New entities that went to the overflow entity because the registry was full.", nil),
		samples:     d("learner_samples_total", "Request samples read by the learner.", []string{"result"}),
		dpStats:     d("datapath_events_total", "Data path events: samples, fragments, drops, resyncs, fail-open packets, unproven segments.", []string{"event"}),
		exemptBytes: d("exempt_bytes_total", "Payload bytes of exempt peers (exempt_peers: replication), counted and never held back.", dir),
		replicationClaims: d("learner_replication_claims_total",
			"Requests from governed peers that claimed to be replication (replica id or broker fetcher client-id); ignored, only exempt_peers exempt.", nil),
		connsTracked: d("connections_tracked", "Connections in the data path's table at the last scan.", nil),
		connsReaped:  d("connections_reaped_total", "Closed connections (FIN or RST seen) removed from the table.", nil),
		connsRebound: d("connections_rebound_total", "Samples whose connection entry had lost its binding (evicted or re-entered), bound again.", nil),
		learnerConns: d("learner_connections", "Connections the learner keeps state for.", nil),
		unconfigured: d("entities_unconfigured", "Live entities nobody configured (bounded by max_unconfigured_entities).", nil),
		peerRefused: d("entities_peer_rate_refused_total",
			"New unconfigured entities refused because their peer created them faster than new_entities_per_peer.", nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	c.failures.Describe(ch)
	for _, d := range []*prometheus.Desc{c.entityBytes, c.entityRate, c.effRes, c.dynLimit, c.state, c.utilisation, c.dropped, c.delay,
		c.promised, c.green, c.overcommit, c.capacityC, c.entities, c.overflowed, c.samples, c.dpStats,
		c.exemptBytes, c.replicationClaims, c.connsTracked, c.connsReaped, c.connsRebound, c.learnerConns,
		c.unconfigured, c.peerRefused} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	defer c.failures.Collect(ch)
	s := c.a.Snapshot()
	if s != nil {
		for _, d := range s.Directions {
			if !d.Enabled {
				continue
			}
			ch <- prometheus.MustNewConstMetric(c.promised, prometheus.GaugeValue, d.PromisedRatio, d.Direction)
			ch <- prometheus.MustNewConstMetric(c.green, prometheus.GaugeValue, d.GreenRatio, d.Direction)
			ch <- prometheus.MustNewConstMetric(c.overcommit, prometheus.GaugeValue, boolValue(d.Overcommit), d.Direction)
			ch <- prometheus.MustNewConstMetric(c.capacityC, prometheus.GaugeValue, float64(d.C), d.Direction)
			ch <- prometheus.MustNewConstMetric(c.entities, prometheus.GaugeValue, float64(d.Active), d.Direction, "active")
			ch <- prometheus.MustNewConstMetric(c.entities, prometheus.GaugeValue, float64(d.Standby), d.Direction, "standby")
			for _, e := range d.Entities {
				l := []string{d.Direction, e.Kind, e.Name}
				ch <- prometheus.MustNewConstMetric(c.entityBytes, prometheus.CounterValue, float64(e.Bytes), l...)
				ch <- prometheus.MustNewConstMetric(c.entityRate, prometheus.GaugeValue, float64(e.Rate), l...)
				ch <- prometheus.MustNewConstMetric(c.effRes, prometheus.GaugeValue, float64(e.EffectiveReservation), l...)
				ch <- prometheus.MustNewConstMetric(c.dynLimit, prometheus.GaugeValue, float64(e.DynamicLimit), l...)
				ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, 1, append(l, e.State)...)
				if e.Reservation > 0 {
					ch <- prometheus.MustNewConstMetric(c.utilisation, prometheus.GaugeValue, float64(e.Rate/e.Reservation), l...)
				}
				ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.GaugeValue, float64(e.DroppedPackets), l...)
				ch <- prometheus.MustNewConstMetric(c.delay, prometheus.GaugeValue, e.QueueDelayMillis/1000, l...)
			}
		}
		ch <- prometheus.MustNewConstMetric(c.overflowed, prometheus.CounterValue, float64(s.Overflowed))
		ch <- prometheus.MustNewConstMetric(c.samples, prometheus.CounterValue, float64(s.Learner.Parsed), "parsed")
		ch <- prometheus.MustNewConstMetric(c.samples, prometheus.CounterValue, float64(s.Learner.Truncated), "truncated")
		ch <- prometheus.MustNewConstMetric(c.samples, prometheus.CounterValue, float64(s.Learner.Failed), "failed")
		ch <- prometheus.MustNewConstMetric(c.replicationClaims, prometheus.CounterValue, float64(s.Learner.ReplicationClaims))
		ch <- prometheus.MustNewConstMetric(c.learnerConns, prometheus.GaugeValue, float64(s.Learner.Connections))
		ch <- prometheus.MustNewConstMetric(c.connsTracked, prometheus.GaugeValue, float64(s.Connections.Tracked))
		ch <- prometheus.MustNewConstMetric(c.connsReaped, prometheus.CounterValue, float64(s.Connections.Reaped))
		ch <- prometheus.MustNewConstMetric(c.connsRebound, prometheus.CounterValue, float64(s.Connections.Rebound))
		ch <- prometheus.MustNewConstMetric(c.unconfigured, prometheus.GaugeValue, float64(s.Unconfigured))
		ch <- prometheus.MustNewConstMetric(c.peerRefused, prometheus.CounterValue, float64(s.PeerRateRefused))
	}
	st, err := c.dp.Stats()
	if err != nil {
		c.failures.Inc()
		return
	}
	for name, v := range map[string]uint64{
		"samples": st.Samples, "fragments": st.Fragments, "budget_drops": st.BudgetDrops, "ringbuf_drops": st.RingBufferDrops,
		"desyncs": st.Desyncs, "resyncs": st.Resyncs, "exempt_connections": st.ExemptConnections, "fail_open_packets": st.FailOpenPackets,
		"unproven_segments": st.Unproven,
	} {
		ch <- prometheus.MustNewConstMetric(c.dpStats, prometheus.CounterValue, float64(v), name)
	}
	for d, name := range []string{"produce", "fetch"} {
		ch <- prometheus.MustNewConstMetric(c.exemptBytes, prometheus.CounterValue, float64(st.ExemptBytes[d]), name)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
