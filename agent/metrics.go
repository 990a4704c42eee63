package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/objectives"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
)

// Metrics is sluice's Prometheus registry, named by Prometheus'
// conventions: base units (rates in bytes_per_second), counters for
// events, one family per kind of event, disjoint label values. One
// collector reads the agent's last snapshot (and the data path's
// statistics) at scrape time and counts its own failures instead of
// failing the scrape. Per-entity series are bounded by metrics.entities and
// metrics.max_entity_series (objectives/series.go); docs/metrics.md lists every family
// and agent/testdata/metrics.txt is the list a test holds the agent to.
type Metrics struct {
	Registry  *prometheus.Registry
	cycle     prometheus.Histogram
	collector *collector
	log       *slog.Logger
}

// BuildInfo is the version and revision the binary was built from.
type BuildInfo struct {
	Version, Revision string
}

// MetricsInfo is what sluice_agent_info reports besides the running mode
// and shaper: the build and how the programs are attached (tcx, legacy).
type MetricsInfo struct {
	Build  BuildInfo
	Attach string
}

const ns = "sluice"

// NewMetrics registers the agent's metrics, Go's runtime and the process's.
func NewMetrics(a *Agent, dp DataPath, info MetricsInfo) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{Registry: reg, log: a.log}
	// sluice_build_info, as every Prometheus exporter has it.
	version.Version, version.Revision = info.Build.Version, info.Build.Revision
	m.cycle = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: ns, Name: "control_loop_duration_seconds",
		Help:    "Duration of one control-loop cycle: read counters, allocate both directions, write changed rates.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	})
	a.loop.observeCycle = func(d time.Duration) { m.cycle.Observe(d.Seconds()) }
	m.collector = newCollector(a, dp, info)
	counter := func(name, help string, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	reg.MustRegister(m.cycle, m.collector, newClusterCollector(a), a.objectiveCollector(), newBlindHooksCollector(a), versioncollector.NewCollector(ns),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		counter("config_reload_failures_total", "Configuration reloads refused (the running configuration stayed).", a.ReloadFailures),
		counter("control_loop_failures_total", "Control-loop cycles that failed (no heartbeat is written after one: the data path fails open after stale_after).", a.CycleFailures),
		counter("rate_write_failures_total", "Control cycles whose rate writes to the shaper failed (retried next cycle).", a.RateWriteFailures),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "config_last_reload_successful", Help: "0 while the last configuration reload was refused: the file on disk is not what runs."},
			func() float64 { return boolValue(a.LastReloadSucceeded()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "unexempt_brokers", Help: "The cluster's other brokers (from the metadata) whose addresses exempt_peers does not cover: their replication from this broker is governed."},
			func() float64 { return float64(len(a.UnexemptBrokers())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "refresh_age_seconds", Help: "Time since the last successful control-loop cycle (the heartbeat's age)."},
			func() float64 { return a.RefreshAge().Seconds() }),
		counter("kafka_quota_imports_total", "Reads of the cluster's client quotas that succeeded (kafka_quotas: import).",
			func() uint64 { return a.KafkaQuotas().Imports }),
		counter("kafka_quota_import_failures_total", "Reads of the cluster's client quotas that failed (the last imported set stayed in force).",
			func() uint64 { return a.KafkaQuotas().Failures }),
		kafkaQuotaGauge(a, "applied", func(k status.KafkaQuotasView) int { return k.Clients + k.Users + int(boolValue(k.ClientDefault)) }),
		kafkaQuotaGauge(a, "skipped", func(k status.KafkaQuotasView) int { return k.Skipped }),
		kafkaQuotaGauge(a, "left_out", func(k status.KafkaQuotasView) int { return k.LeftOut }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "stale_after_seconds", Help: "stale_after: once refresh_age_seconds passes it, the data path fails open."},
			func() float64 { return a.Config().StaleAfter.Seconds() }),
	)
	return m
}

// kafkaQuotaGauge is one state of sluice_kafka_quotas: imported entries
// in use (applied), that sluice cannot apply (skipped: user, <user,
// client-id> and ip quotas, invalid values) and left out for room.
func kafkaQuotaGauge(a *Agent, state string, f func(status.KafkaQuotasView) int) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "kafka_quotas", ConstLabels: prometheus.Labels{"state": state},
		Help: "Client quota entries imported from the cluster, by state: applied, skipped (user, <user, client-id> and ip quotas, invalid values) or left_out (no room for more configured entities)."},
		func() float64 { return float64(f(a.KafkaQuotas())) })
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
// daemon's metrics listener opens it (metricslistener.Opener), so that a reloaded metrics_address or
// metrics.web_config_file reopens it. With a web configuration file
// (Prometheus exporter-toolkit's: TLS, basic auth, headers) every
// connection is served by its rules, read again for each new connection,
// so certificates can be rotated in place; the file is checked before the
// listener opens, so a bad one is refused here, not in the background.
func (m *Metrics) Open(addr, webConfigFile string) (stop func(), err error) {
	if webConfigFile != "" {
		if err := web.Validate(webConfigFile); err != nil {
			return nil, fmt.Errorf("metrics.web_config_file %s: %w", webConfigFile, err)
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return m.serveOn(l, webConfigFile), nil
}

// serveOn serves the metrics on l with the web configuration until stop.
func (m *Metrics) serveOn(l net.Listener, webConfigFile string) (stop func()) {
	srv := m.server()
	addr := l.Addr().String()
	flags := &web.FlagConfig{WebListenAddresses: &[]string{addr}, WebSystemdSocket: new(bool), WebConfigFile: &webConfigFile}
	go func() {
		if err := web.Serve(l, srv, flags, m.log); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			m.log.Error("metrics listener", "address", addr, "err", err)
		}
	}()
	return func() { srv.Close() }
}

// server is the metrics HTTP server: /metrics, a landing page at /, and
// timeouts so a slow or idle client cannot hold connections open.
func (m *Metrics) server() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	if landing, err := web.NewLandingPage(web.LandingConfig{Name: "sluice", Version: version.Info(),
		Description: "Elastic bandwidth quotas for Kafka broker hosts, enforced at the NIC",
		Links:       []web.LandingLinks{{Address: "/metrics", Text: "Metrics"}},
		// sluice serves no /debug/pprof: the toolkit would link it.
		Profiling: "false"}); err == nil {
		mux.Handle("/", landing)
	}
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(m.log.Handler(), slog.LevelDebug)}
}

// othersType and othersName label the aggregate of a direction's entities
// without series of their own; no entity has that type.
const (
	othersType = objectives.OthersType
	othersName = objectives.OthersName
)

type collector struct {
	a    *Agent
	dp   DataPath
	info MetricsInfo

	failures prometheus.Counter

	agentInfo    *prometheus.Desc
	modeMismatch *prometheus.Desc
	// per direction
	capacity, distributable, headroom, promised, green, overcommit, scale, entities, withoutSeries, exemptBytes *prometheus.Desc
	// per entity
	entityBytes, entityRate, reservation, limit, weight, effRes, dynLimit, active, throttled, delay, held, dropped *prometheus.Desc
	// registry, learner, connections
	registered, maxEntities, unconfigured, unconfiguredMax, overflowed, peerRefused *prometheus.Desc
	samples, replicationClaims, unresolved, learnerConns                            *prometheus.Desc
	connsTracked, connsReaped, connsRebound, rebinds, identityErrors, reclaimedIds  *prometheus.Desc
	dpSamples, dpSampleDrops, dpFragments, dpDesyncs, dpResyncs, dpExemptConn       *prometheus.Desc
	dpFailOpen, dpUnproven                                                          *prometheus.Desc
	// request latency at the NIC (objectives/book.go)
	latency, latencyFirst, dpLatency, dpResponses *prometheus.Desc
	// latency objectives (agent/objectives)
	objectiveLevel, objectiveOpen, objectiveTransitions, objectiveReleases *prometheus.Desc
}

func newCollector(a *Agent, dp DataPath, info MetricsInfo) *collector {
	entity := []string{"direction", "entity_type", "entity"}
	dir := []string{"direction"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, labels, nil)
	}
	return &collector{
		a: a, dp: dp, info: info,
		failures:     prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "collector_errors_total", Help: "Scrapes in which the collector could not read something (it reports what it could)."}),
		modeMismatch: d("mode_mismatch", "1 while the data path does something other than the configuration in force asks (configured enforce, running shadow: an undo could not rebuild the shaper, nothing is held back); 0 otherwise. The next reload, even of the same file, builds the shaper again.", "configured", "running"),
		agentInfo:    d("agent_info", "1, labelled with the build, the running mode and shaper, and how the programs are attached.", "version", "revision", "mode", "shaper", "attach"),

		capacity:      d("capacity_bytes_per_second", "The direction's configured capacity.", dir...),
		distributable: d("distributable_capacity_bytes_per_second", "C = capacity × safety_ratio: what reservations and weights share.", dir...),
		headroom:      d("headroom_bytes_per_second", "H = capacity − C: the share no reservation takes (the most the unknown entity is guaranteed; it is held to the strictest limit in force).", dir...),
		promised:      d("promised_ratio", "Sum of active entities' reservations over C (above 1: overcommitted on paper).", dir...),
		green:         d("green_ratio", "Sum of green shares (reserved bytes in real use) over C.", dir...),
		overcommit:    d("overcommit", "1 while reservations exceed C (after confirmation) and are scaled down.", dir...),
		scale:         d("reservation_scale", "The factor reservations are scaled by under overcommit (1 otherwise).", dir...),
		entities:      d("entities", "Entities by state.", "direction", "state"),
		withoutSeries: d("entities_without_series", "Entities summed into the entity_type=\"unconfigured\" aggregate instead of having series of their own (metrics.entities).", dir...),
		exemptBytes:   d("exempt_bytes_total", "Payload bytes of exempt peers (exempt_peers: replication), counted and never held back.", dir...),

		entityBytes: d("entity_bytes_total", "TCP payload bytes counted for the entity.", entity...),
		entityRate:  d("entity_rate_bytes_per_second", "Measured rate over the rate window.", entity...),
		reservation: d("entity_reservation_bytes_per_second", "Configured reservation (resolved through the templates).", entity...),
		limit:       d("entity_limit_bytes_per_second", "Configured hard limit (resolved through the templates; +Inf when unlimited).", entity...),
		weight:      d("entity_weight", "Configured weight for sharing idle capacity.", entity...),
		effRes:      d("entity_effective_reservation_bytes_per_second", "Effective reservation (scaled down under overcommit; 0 while standby).", entity...),
		dynLimit:    d("entity_dynamic_limit_bytes_per_second", "Rate the data path enforces until the next cycle.", entity...),
		active:      d("entity_active", "1 while the entity is active, 0 while standby.", entity...),
		throttled:   d("entity_throttled", "1 when the shaper held the entity back in the last cycle while it ran at its dynamic limit.", entity...),
		delay:       d("entity_queue_delay_seconds", "Queueing delay the shaper adds now.", entity...),
		held:        d("entity_held_bytes_total", "Bytes a BPF shaper (edt, police, and produce under htb+police) held back; htb reports queue delay and drops instead.", entity...),
		dropped:     d("entity_dropped_packets_total", "Packets the shaper dropped (beyond the delay bound).", entity...),

		registered:      d("entities_registered", "Entities in the registry (configured and learned, unknown and overflow included)."),
		maxEntities:     d("entities_max", "max_entities: the registry's size."),
		unconfigured:    d("entities_unconfigured", "Live entities nobody configured (bounded by max_unconfigured_entities)."),
		unconfiguredMax: d("entities_unconfigured_max", "max_unconfigured_entities: the live unconfigured entities at which new ones go to overflow."),
		overflowed:      d("entities_overflowed_total", "New entities that went to the overflow entity because the registry was full."),
		peerRefused:     d("entities_peer_rate_refused_total", "New unconfigured entities refused because their peer created them faster than new_entities_per_peer."),

		samples:           d("learner_samples_total", "Request samples read by the learner, by result: complete, truncated (parsed from a cut sample) or failed.", "result"),
		unresolved:        d("learner_unresolved_total", "Requests that left their connection's entity undecided (a client-id longer than a sample keeps where the client-id decides, topics hidden behind client-chosen fields, a request before a SASL login or a login that could not be read), and connections nothing could be sampled from, held to the unresolved entity: the most restrictive limits configured."),
		replicationClaims: d("learner_replication_claims_total", "Requests from governed peers that claimed to be replication (replica id or broker fetcher client-id); ignored, only exempt_peers exempt."),
		learnerConns:      d("learner_connections", "Connections the learner keeps state for."),

		connsTracked:   d("connections_tracked", "Connections in the data path's table at the last scan."),
		connsReaped:    d("connections_reaped_total", "Closed connections (FIN or RST seen) removed from the table."),
		connsRebound:   d("connections_rebound_total", "Samples whose connection entry had lost its binding (evicted or re-entered), bound again."),
		rebinds:        d("rebinds_total", "Bound connections moved to another entity, by reason: request (its client-id or partitions), login, rule_change (a reload), binding_lost (its entry was entered again), to_unknown (an identity was lost: should never happen).", "reason"),
		reclaimedIds:   d("identities_reclaimed_total", "Saved connection identities dropped because their connection had no entry in the connection table for 15 minutes: its end (FIN or RST) was missed. Kafka closes connections idle for connections.max.idle.ms, and a live one is entered again by its next segment."),
		identityErrors: d("identity_errors_total", "Connection identities (SASL principals) that could not be saved, read or dropped in pinned state."),

		dpSamples:     d("datapath_samples_total", "Request samples the data path sent to the learner (first fragments)."),
		dpSampleDrops: d("datapath_sample_drops_total", "Request starts not delivered to the learner, by reason: budget (the connection's sample budget was spent) or ringbuf (the sample ring of the CPU that saw it was full: the agent had not read it yet).", "reason"),
		dpFragments:   d("datapath_sample_fragments_total", "Continuation fragments of long request samples sent to the learner."),
		dpDesyncs:     d("datapath_desyncs_total", "Connections whose request framing the data path lost."),
		dpResyncs:     d("datapath_resyncs_total", "Connections whose request framing the data path found again."),
		dpExemptConn:  d("datapath_exempt_connections_total", "Connections marked exempt (exempt_peers)."),
		dpFailOpen:    d("datapath_fail_open_packets_total", "Governed segments passed unshaped because the agent's heartbeat was older than stale_after."),
		dpUnproven:    d("datapath_unproven_segments_total", "Segments of connections the broker had not answered yet, charged to the unknown entity."),

		latency: d("request_duration_seconds", "Request latency at the NIC: from a request's last byte arriving to its response's first byte leaving, by the entity of the request's direction and api (produce, fetch, other). Fetch includes the broker's long-poll wait (fetch.max.wait.ms). One sampled request per connection is measured at a time.",
			"direction", "entity_type", "entity", "api"),
		latencyFirst: d("request_duration_from_first_byte_seconds", "Produce request latency at the NIC from the request's first byte arriving (its own transfer included) to its response's first byte leaving (other requests fit a segment or so: their first byte is their last).",
			"direction", "entity_type", "entity", "api"),
		dpLatency: d("datapath_latency_requests_total", "Requests the data path made pending for a latency measurement, by outcome: measured, ring_full (the measurement was lost: the agent had not read the ring), expired (never answered: acks=0 produce, or response tracking lost).", "outcome"),
		objectiveLevel: d("latency_objective_level", "What a latency objective's breaker holds the direction's best-effort traffic to, as a fraction of its usage when the breaker opened (1: nothing held).",
			"direction", "entity_type", "entity"),
		objectiveOpen: d("latency_objective_state", "1 for a latency objective's breaker state now (closed, open, half_open, ineffective), 0 for the others.",
			"direction", "entity_type", "entity", "state"),
		objectiveTransitions: d("latency_objective_transitions_total", "Latency objectives' breaker state changes (each is logged)."),
		objectiveReleases: d("latency_objective_releases_total", "Times a latency objective's breaker gave best-effort traffic its full level back, by reason: recovered (the objective held at full level), quiet (the protected entity sent too few requests to judge), ineffective (held at the floor and still over the objective: the cause is not best-effort traffic).",
			"direction", "entity_type", "entity", "reason"),
		dpResponses: d("datapath_response_tracking_total", "Response framing on egress, by event: desync (an implausible response size or a gap lost it), resync (found again at a measured request's response).", "event"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	c.failures.Describe(ch)
	for _, d := range []*prometheus.Desc{c.agentInfo, c.modeMismatch,
		c.capacity, c.distributable, c.headroom, c.promised, c.green, c.overcommit, c.scale, c.entities, c.withoutSeries, c.exemptBytes,
		c.entityBytes, c.entityRate, c.reservation, c.limit, c.weight, c.effRes, c.dynLimit, c.active, c.throttled, c.delay, c.held, c.dropped,
		c.registered, c.maxEntities, c.unconfigured, c.unconfiguredMax, c.overflowed, c.peerRefused,
		c.samples, c.replicationClaims, c.unresolved, c.learnerConns, c.connsTracked, c.connsReaped, c.connsRebound, c.rebinds, c.identityErrors, c.reclaimedIds,
		c.dpSamples, c.dpSampleDrops, c.dpFragments, c.dpDesyncs, c.dpResyncs, c.dpExemptConn, c.dpFailOpen, c.dpUnproven,
		c.latency, c.latencyFirst, c.dpLatency, c.dpResponses, c.objectiveLevel, c.objectiveOpen, c.objectiveTransitions, c.objectiveReleases} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	defer c.failures.Collect(ch)
	c.collectLatency(ch)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	s := c.a.Snapshot()
	if s != nil {
		gauge(c.agentInfo, 1, c.info.Build.Version, c.info.Build.Revision, s.Mode, s.Shaper, c.info.Attach)
		configured := string(c.a.Config().Mode)
		gauge(c.modeMismatch, boolValue(configured != s.Mode), configured, s.Mode)
		// BPF shapers count held-back bytes; htb reports delay and drops.
		mode := shaping.Kind(s.Shaper).DataPathMode()
		for _, d := range s.Directions {
			if !d.Enabled {
				continue
			}
			dir := d.Direction
			heldCounted := mode.HeldInDataPath(maps.Fetch)
			if dir == entity.Produce.String() {
				heldCounted = mode.HeldInDataPath(maps.Produce)
			}
			gauge(c.capacity, float64(d.Capacity), dir)
			gauge(c.distributable, float64(d.C), dir)
			gauge(c.headroom, float64(d.H), dir)
			gauge(c.promised, d.PromisedRatio, dir)
			gauge(c.green, d.GreenRatio, dir)
			gauge(c.overcommit, boolValue(d.Overcommit), dir)
			gauge(c.scale, d.Scale, dir)
			gauge(c.entities, float64(d.Active), dir, "active")
			gauge(c.entities, float64(d.Standby), dir, "standby")
			gauge(c.withoutSeries, float64(d.Others.Entities), dir)
			for _, e := range d.Entities {
				if !e.OwnSeries {
					continue
				}
				l := []string{dir, e.Kind, e.Name}
				counter(c.entityBytes, e.Bytes, l...)
				gauge(c.entityRate, float64(e.Rate), l...)
				gauge(c.reservation, float64(e.Reservation), l...)
				gauge(c.limit, float64(e.Limit), l...)
				gauge(c.weight, e.Weight, l...)
				gauge(c.effRes, float64(e.EffectiveReservation), l...)
				gauge(c.dynLimit, float64(e.DynamicLimit), l...)
				gauge(c.active, boolValue(e.State == "active"), l...)
				gauge(c.throttled, boolValue(e.Throttled), l...)
				gauge(c.delay, e.QueueDelayMillis/1000, l...)
				if heldCounted {
					counter(c.held, e.HeldBytes, l...)
				}
				counter(c.dropped, e.DroppedPacketsTotal, l...)
			}
			// One aggregate per direction for every entity without series.
			l := []string{dir, othersType, othersName}
			counter(c.entityBytes, d.Others.Bytes, l...)
			gauge(c.entityRate, float64(d.Others.Rate), l...)
			if heldCounted {
				counter(c.held, d.Others.HeldBytes, l...)
			}
			counter(c.dropped, d.Others.DroppedPackets, l...)
		}
		for _, o := range s.Objectives {
			kind, name, _ := strings.Cut(o.Entity, ":")
			gauge(c.objectiveLevel, o.Level, o.Direction, kind, name)
			for _, st := range []string{"closed", "open", "half_open", "ineffective"} {
				gauge(c.objectiveOpen, boolValue(o.State == st), o.Direction, kind, name, st)
			}
			for _, reason := range []string{"recovered", "quiet", "ineffective"} {
				counter(c.objectiveReleases, o.Releases[reason], o.Direction, kind, name, reason)
			}
		}
		counter(c.objectiveTransitions, s.ObjectiveTransitions)
		gauge(c.registered, float64(s.Entities))
		gauge(c.maxEntities, float64(s.MaxEntities))
		gauge(c.unconfigured, float64(s.Unconfigured))
		gauge(c.unconfiguredMax, float64(s.UnconfiguredMax))
		counter(c.overflowed, s.Overflowed)
		counter(c.peerRefused, s.PeerRateRefused)
		counter(c.samples, s.Learner.Parsed-min(s.Learner.Truncated, s.Learner.Parsed), "complete")
		counter(c.samples, s.Learner.Truncated, "truncated")
		counter(c.samples, s.Learner.Failed, "failed")
		counter(c.replicationClaims, s.Learner.ReplicationClaims)
		counter(c.unresolved, s.Learner.Unresolved)
		gauge(c.learnerConns, float64(s.Learner.Connections))
		gauge(c.connsTracked, float64(s.Connections.Tracked))
		counter(c.connsReaped, s.Connections.Reaped)
		counter(c.connsRebound, s.Connections.Rebound)
		for _, reason := range RebindReasons {
			counter(c.rebinds, s.Connections.Rebinds[reason], reason)
		}
		counter(c.identityErrors, s.Connections.IdentityErrors)
		counter(c.reclaimedIds, s.Connections.IdentitiesReclaimed)
	}
	st, err := c.dp.Stats()
	if err != nil {
		c.failures.Inc()
		return
	}
	counter(c.dpSamples, st.Samples)
	counter(c.dpSampleDrops, st.BudgetDrops, "budget")
	counter(c.dpSampleDrops, st.RingBufferDrops, "ringbuf")
	counter(c.dpFragments, st.Fragments)
	counter(c.dpDesyncs, st.Desyncs)
	counter(c.dpResyncs, st.Resyncs)
	counter(c.dpExemptConn, st.ExemptConnections)
	counter(c.dpFailOpen, st.FailOpenPackets)
	counter(c.dpUnproven, st.Unproven)
	for d, name := range []string{"produce", "fetch"} {
		counter(c.exemptBytes, st.ExemptBytes[d], name)
	}
	counter(c.dpLatency, st.LatencyEvents, "measured")
	counter(c.dpLatency, st.LatencyDrops, "ring_full")
	counter(c.dpLatency, st.LatencyExpired, "expired")
	counter(c.dpResponses, st.ResponseDesyncs, "desync")
	counter(c.dpResponses, st.ResponseResyncs, "resync")
}

// collectLatency exports the latency histograms (bounded as the entity
// series are: objectives/book.go).
func (c *collector) collectLatency(ch chan<- prometheus.Metric) {
	for _, h := range c.a.LatencyHistograms() {
		buckets := make(map[float64]uint64, len(objectives.LatencyBuckets))
		for i, b := range objectives.LatencyBuckets {
			buckets[b] = h.Cumulative[i]
		}
		desc := c.latency
		if h.FromFirstByte {
			desc = c.latencyFirst
		}
		ch <- prometheus.MustNewConstHistogram(desc, h.Count, h.Sum, buckets, h.Direction, h.EntityType, h.Entity, h.API)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
