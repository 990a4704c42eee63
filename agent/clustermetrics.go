package agent

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/agent/status"
)

// clusterCollector exports the cluster budgets (docs/cluster-budgets.md)
// from the agent's snapshot; it exports nothing without a cluster section.
type clusterCollector struct {
	a                                                                *Agent
	info, lease, rebuilding, round, processed, epoch                 *prometheus.Desc
	limit, reservation, usage, share, target, reserve                *prometheus.Desc
	reports, published, withheld, stateFailures                      *prometheus.Desc
	topicPublishFailed, topicUndecodable, topicErrors, topicLateAcks *prometheus.Desc
	topicLag, topicCaughtUp                                          *prometheus.Desc
	raiseHeld                                                        *prometheus.Desc
}

func newClusterCollector(a *Agent) *clusterCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "cluster", name), help, labels, nil)
	}
	budget := []string{"direction", "entity_type", "entity"}
	return &clusterCollector{a: a,
		info:       d("info", "1, labelled with the cluster section's name (not called cluster: Prometheus setups often attach a cluster label of their own), this host's broker id and the section's mode (enforce, or shadow: shares computed and reported, none applied).", "name", "broker", "mode"),
		lease:      d("lease", "1 for this host's standing: normal (its reports land), fallback (none landed for the lease: the fallback share applies) or fenced (another agent reports this broker id).", "state"),
		rebuilding: d("rebuilding", "1 while a restarted agent reads the topic before it acts on a round."),
		round:      d("round", "The latest round the coordination topic has closed."),
		processed:  d("processed_round", "The latest round this host has lowered its shares to; round − processed_round is how far it lags."),
		epoch:      d("epoch", "This agent's epoch (grows with each start; older epochs' reports are fenced)."),

		limit:       d("budget_limit_bytes_per_second", "A cluster budget's limit, for the whole cluster.", budget...),
		reservation: d("budget_reservation_bytes_per_second", "A cluster budget's reservation, for the whole cluster.", budget...),
		usage:       d("budget_usage_bytes_per_second", "Σ over brokers of the usage each last reported for a cluster budget.", budget...),
		share:       d("budget_share_bytes_per_second", "This host's share of a cluster budget: the entity's local limit (in shadow mode, what it would be).", budget...),
		target:      d("budget_target_bytes_per_second", "This host's target in the round it acts on (the share rises to it once every live broker reports having lowered).", budget...),
		reserve:     d("budget_reserved_bytes_per_second", "The reserved part of this host's target: the entity's local reservation.", budget...),
		raiseHeld: d("budget_raise_held_seconds", "How long this host's raise of a cluster budget has waited on a broker (labelled by its id) that is live in the round and has not reported it lowered; no series while no broker holds it up.",
			append(budget, "held_by")...),

		reports:       d("reports_received_total", "Reports read from the coordination topic, by verdict: accepted, outside (another configuration's broker: counted outside the budget, not split), or ignored (duplicate, stale, fenced, conflict, malformed, foreign, unknown_broker, round_jump).", "verdict"),
		published:     d("reports_published_total", "Reports this agent handed to the producer."),
		withheld:      d("reports_withheld_total", "Reports not sent: the cycle did not write its rates, or the state file could not be written."),
		stateFailures: d("state_file_failures_total", "Writes of cluster.state_file that failed."),

		topicPublishFailed: d("topic_publish_failures_total", "Reports the producer could not deliver (buffer full, delivery timeout, topic errors)."),
		topicUndecodable:   d("topic_undecodable_records_total", "Records on the coordination topic that are not sluice reports (ignored)."),
		topicErrors:        d("topic_errors_total", "Failures to create, find or read the coordination topic, and examinations that refused it (partition count or settings that lose reports)."),
		topicLateAcks:      d("topic_late_deliveries_total", "Reports the brokers acknowledged later than cluster.max_delivery after they were sent: the delivery bound the protocol's reclaim time assumes was broken for them."),
		topicLag:           d("topic_lag_records", "Records on the coordination topic this agent has not read yet."),
		topicCaughtUp:      d("topic_caught_up", "1 when this agent has read the coordination topic to its end."),
	}
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.lease, c.rebuilding, c.round, c.processed, c.epoch,
		c.limit, c.reservation, c.usage, c.share, c.target, c.reserve, c.reports, c.published, c.withheld, c.stateFailures,
		c.topicPublishFailed, c.topicUndecodable, c.topicErrors, c.topicLateAcks, c.topicLag, c.topicCaughtUp, c.raiseHeld} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.a.Snapshot()
	if s == nil || s.Cluster == nil {
		return
	}
	v := s.Cluster
	gauge := func(d *prometheus.Desc, value float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, value, labels...)
	}
	counter := func(d *prometheus.Desc, value uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(value), labels...)
	}
	gauge(c.info, 1, v.Name, itoa32(v.Broker), v.Mode)
	for _, state := range []string{"normal", "fallback", "fenced"} {
		gauge(c.lease, boolValue(v.Lease == state), state)
	}
	gauge(c.rebuilding, boolValue(v.Rebuilding))
	gauge(c.round, float64(v.Round))
	gauge(c.processed, float64(v.Processed))
	gauge(c.epoch, float64(v.Epoch))
	for _, b := range v.Budgets {
		l := []string{b.Direction, b.Kind, b.Name}
		gauge(c.limit, finiteOrInf(b.Limit), l...)
		gauge(c.reservation, float64(b.Reservation), l...)
		gauge(c.usage, b.SumUsage, l...)
		gauge(c.share, finiteOrInf(b.Share), l...)
		gauge(c.target, finiteOrInf(b.Target), l...)
		gauge(c.reserve, float64(b.Reserved), l...)
		for _, h := range b.RaiseHeldBy {
			gauge(c.raiseHeld, h.Seconds, append(l, itoa32(h.Broker))...)
		}
	}
	for verdict, n := range v.Reports {
		counter(c.reports, n, verdict)
	}
	counter(c.published, v.Published)
	counter(c.withheld, v.Withheld)
	counter(c.stateFailures, v.StateFileFailures)
	counter(c.topicPublishFailed, v.Topic.PublishFailed)
	counter(c.topicUndecodable, v.Topic.Undecodable)
	counter(c.topicErrors, v.Topic.TopicErrors)
	counter(c.topicLateAcks, v.Topic.LateAcks)
	gauge(c.topicLag, float64(v.Topic.Lag))
	gauge(c.topicCaughtUp, boolValue(v.Topic.CaughtUp))
}

// finiteOrInf is a rate as Prometheus takes it (+Inf is a valid sample).
func finiteOrInf(b status.Bps) float64 { return float64(b) }

func itoa32(v int32) string { return strconv.FormatInt(int64(v), 10) }
