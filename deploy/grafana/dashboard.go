// Package grafana builds sluice's Grafana dashboard from code (Grafana's
// foundation SDK), so that its queries are checked like code: a test in
// deploy/ holds every query to the metrics the agent exports and parses
// it as PromQL. `make dashboard` writes sluice-dashboard.json.
package grafana

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Grafana's unit ids, one per kind of quantity the panels plot; a test in
// deploy/ holds each panel's unit to the metrics its queries read
// (*_bytes_per_second and rates of *_bytes_total in bytes/s, rates of
// *_packets_total in packets/s, *_seconds in seconds, …).
const (
	bytesPerSecond    = "binBps"      // bytes/s, binary prefixes (KiB/s, MiB/s)
	packetsPerSecond  = "pps"         // packets/s
	requestsPerSecond = "reqps"       // requests (or request samples) per second
	recordsPerSecond  = "recps"       // records (reports on the coordination topic) per second
	eventsPerMinute   = "epm"         // events per minute
	seconds           = "s"           // durations, scaled to ms and µs by Grafana
	ratio             = "percentunit" // a fraction, shown as a percentage
	bytes             = "bytes"       // bytes, binary prefixes
	count             = "short"       // a count: entities, rounds, records, packets in a range
	none              = "none"        // flags and states, shown through mappings
)

// The selectors every query carries: the dashboard's cluster, job,
// instance and direction variables (cluster and job match series without
// the label too: their "All" is .*).
const (
	sel       = `cluster=~"$cluster", job=~"$job", instance=~"$instance"`
	dirSel    = sel + `, direction=~"$direction"`
	entitySel = dirSel + `, entity=~"$entity"`
	// heldNow joins an entity's series to its being held at the limit now.
	heldNow = ` and on (instance, direction, entity_type, entity) (sluice_entity_throttled{` + entitySel + `} == 1)`
)

var datasource = common.DataSourceRef{Type: ptr("prometheus"), Uid: ptr("${datasource}")}

func ptr[T any](v T) *T { return &v }

func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(expr).LegendFormat(legend).Datasource(datasource)
}

// series is a time-series panel: a table legend under it (last, max and
// mean of each series), and a tooltip listing every series at that time,
// largest first.
func series(title, unit, description string, w, h uint32, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Unit(unit).Description(description).Span(w).Height(h).Datasource(datasource).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeTable).
			Placement(common.LegendPlacementBottom).Calcs([]string{"lastNotNull", "max", "mean"})).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
	for _, q := range queries {
		p = p.WithTarget(q)
	}
	return p
}

// single is a stat panel coloured by its thresholds: green below the
// first step, then each step's colour from its value on.
func single(title, unit, description string, q *prometheus.DataqueryBuilder, steps ...dashboard.Threshold) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Unit(unit).Description(description).Span(6).Height(4).Datasource(datasource).WithTarget(q).
		Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).
			Steps(append([]dashboard.Threshold{{Value: nil, Color: "green"}}, steps...)))
}

// from is a threshold step: colour from value on.
func from(value float64, colour string) dashboard.Threshold {
	return dashboard.Threshold{Value: ptr(value), Color: colour}
}

// column is a table column: the value column of the instant query ref
// (Grafana names it "Value #ref"), shown as name in unit.
func column(ref, name, unit string) (string, []dashboard.DynamicConfigValue) {
	return "Value #" + ref, []dashboard.DynamicConfigValue{{Id: "displayName", Value: name}, {Id: "unit", Value: unit}}
}

// instant is a query for a table: one row per series, now.
func instant(expr, ref string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(expr).Format(prometheus.PromQueryFormatTable).Instant().RefId(ref).Datasource(datasource)
}

// latencyQuantile is the q-quantile of a request-latency histogram for one
// api, per entity: the buckets of the selected hosts summed, so that it is
// the entity's latency across them (the host selector narrows it to one).
func latencyQuantile(q, family, api string) string {
	return fmt.Sprintf(`histogram_quantile(%s, sum by (entity_type, entity, le) (rate(%s_bucket{%s, api="%s"}[$__rate_interval])))`,
		q, family, entitySel, api)
}

// objectiveState is a latency objective's breaker state as one number the
// panels map to a name: the agent exports one 0/1 series per state.
const objectiveState = `sum without (state) (` +
	`sluice_latency_objective_state{` + entitySel + `, state="closed"} * 0` +
	` or sluice_latency_objective_state{` + entitySel + `, state="half_open"} * 1` +
	` or sluice_latency_objective_state{` + entitySel + `, state="open"} * 2` +
	` or sluice_latency_objective_state{` + entitySel + `, state="ineffective"} * 3)`

// objectiveStates names objectiveState's numbers: closed green, probing
// (half_open) orange, open (best-effort traffic held back) red,
// ineffective (released: cutting did not bring the p99 down) purple. The
// thresholds colour the same way where a mapping is not applied.
var objectiveStates = []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText,
	Options: map[string]dashboard.ValueMappingResult{
		"0": {Text: ptr("closed"), Color: ptr("green"), Index: ptr[int32](0)},
		"1": {Text: ptr("half_open"), Color: ptr("orange"), Index: ptr[int32](1)},
		"2": {Text: ptr("open"), Color: ptr("red"), Index: ptr[int32](2)},
		"3": {Text: ptr("ineffective"), Color: ptr("purple"), Index: ptr[int32](3)}}}}}

// overcommitStates names sluice_overcommit's 0 and 1.
var overcommitStates = []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText,
	Options: map[string]dashboard.ValueMappingResult{
		"0": {Text: ptr("within C"), Color: ptr("green"), Index: ptr[int32](0)},
		"1": {Text: ptr("overcommitted"), Color: ptr("red"), Index: ptr[int32](1)}}}}}

var overcommitThresholds = dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{
	{Value: nil, Color: "green"}, {Value: ptr(1.0), Color: "red"}})

var objectiveThresholds = dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{
	{Value: nil, Color: "green"}, {Value: ptr(1.0), Color: "orange"}, {Value: ptr(2.0), Color: "red"}})

// Dashboard is the dashboard, as Grafana's JSON model.
func Dashboard() ([]byte, error) {
	b := dashboard.NewDashboardBuilder("sluice").
		Uid("sluice-overview").
		Description("Elastic bandwidth quotas at the broker's NIC: who is held back and why. Kafka clients' own throttle metrics stay at zero under sluice.").
		Tags([]string{"sluice", "kafka"}).
		Refresh("30s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncTooltip). // one time, every panel's tooltip
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(dashboard.NewQueryVariableBuilder("cluster").Label("Cluster").Datasource(datasource).
			Query(dashboard.StringOrMap{String: ptr("label_values(sluice_agent_info, cluster)")}).Multi(true).IncludeAll(true).AllValue(".*").
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged)).
		WithVariable(dashboard.NewQueryVariableBuilder("job").Label("Job").Datasource(datasource).
			Query(dashboard.StringOrMap{String: ptr(`label_values(sluice_agent_info{cluster=~"$cluster"}, job)`)}).Multi(true).IncludeAll(true).AllValue(".*").
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged)).
		WithVariable(dashboard.NewQueryVariableBuilder("instance").Label("Broker host").Datasource(datasource).
			Query(dashboard.StringOrMap{String: ptr(`label_values(sluice_agent_info{cluster=~"$cluster", job=~"$job"}, instance)`)}).Multi(true).IncludeAll(true).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged)).
		WithVariable(dashboard.NewCustomVariableBuilder("direction").Label("Direction").
			Values(dashboard.StringOrMap{String: ptr("produce,fetch")}).Multi(true).IncludeAll(true)).
		WithVariable(dashboard.NewQueryVariableBuilder("entity").Label("Entity").Datasource(datasource).
			Query(dashboard.StringOrMap{String: ptr(`label_values(sluice_entity_rate_bytes_per_second{` + dirSel + `}, entity)`)}).
			Multi(true).IncludeAll(true).Refresh(dashboard.VariableRefreshOnTimeRangeChanged))

	b = b.WithRow(dashboard.NewRowBuilder("Capacity and promises")).
		WithPanel(series("Capacity, C and H", bytesPerSecond,
			"Per direction: the configured capacity, what reservations and weights share (C = capacity × safety_ratio) and the headroom H the unknown entity gets.", 12, 8,
			query(`sluice_capacity_bytes_per_second{`+dirSel+`}`, "{{instance}} {{direction}} capacity"),
			query(`sluice_distributable_capacity_bytes_per_second{`+dirSel+`}`, "{{instance}} {{direction}} C"),
			query(`sluice_headroom_bytes_per_second{`+dirSel+`}`, "{{instance}} {{direction}} H"),
			query(`sum by (instance, direction) (rate(sluice_entity_bytes_total{`+dirSel+`}[$__rate_interval]))`, "{{instance}} {{direction}} measured"))).
		WithPanel(series("Reservations against C", ratio,
			"R/C (reservations promised over C), Σgreen/C (reservations in real use) and the scale reservations are held to (100 % unless R/C is over 100 %). Overcommit with high Σgreen/C needs leaders moved now; with low Σgreen/C the reservations are inflated.", 12, 8,
			query(`sluice_promised_ratio{`+dirSel+`}`, "{{instance}} {{direction}} R/C"),
			query(`sluice_green_ratio{`+dirSel+`}`, "{{instance}} {{direction}} Σgreen/C"),
			query(`sluice_reservation_scale{`+dirSel+`}`, "{{instance}} {{direction}} reservation scale"))).
		WithPanel(statetimeline.NewPanelBuilder().Title("Overcommitted").Span(24).Height(6).Datasource(datasource).Unit(none).
			Description("Per host and direction: red while reservations exceed C and are scaled down (after overcommit_confirm_cycles), as the overcommit alerts see it.").
			WithTarget(query(`sluice_overcommit{`+dirSel+`}`, "{{instance}} {{direction}}")).
			Mappings(overcommitStates).Thresholds(overcommitThresholds).
			ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdThresholds)).
			ShowValue(common.VisibilityModeNever).MergeValues(true).
			Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)).
			Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending)))

	b = b.WithRow(dashboard.NewRowBuilder("Held back now")).
		WithPanel(table.NewPanelBuilder().Title("Entities held at their limit now").Span(24).Height(8).Datasource(datasource).
			Description("Every entity the shaper held back at its dynamic limit in the last cycle: its measured rate, the limit it is held to, its reservation and the queueing delay the shaper adds.").
			WithTarget(instant(`sluice_entity_rate_bytes_per_second{`+entitySel+`}`+heldNow, "rate")).
			WithTarget(instant(`sluice_entity_dynamic_limit_bytes_per_second{`+entitySel+`}`+heldNow, "limit")).
			WithTarget(instant(`sluice_entity_reservation_bytes_per_second{`+entitySel+`}`+heldNow, "reservation")).
			WithTarget(instant(`sluice_entity_queue_delay_seconds{`+entitySel+`}`+heldNow, "delay")).
			WithTransformation(dashboard.DataTransformerConfig{Id: "merge"}).
			WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
				"excludeByName": map[string]any{"Time": true, "__name__": true, "job": true},
				"indexByName": map[string]any{"instance": 0, "direction": 1, "entity_type": 2, "entity": 3,
					"Value #rate": 4, "Value #limit": 5, "Value #reservation": 6, "Value #delay": 7},
				"renameByName": map[string]any{"instance": "host", "entity_type": "type"}}}).
			SortBy([]cog.Builder[common.TableSortByFieldState]{common.NewTableSortByFieldStateBuilder().DisplayName("rate").Desc(true)}).
			OverrideByName(column("rate", "rate", bytesPerSecond)).
			OverrideByName(column("limit", "limit", bytesPerSecond)).
			OverrideByName(column("reservation", "reservation", bytesPerSecond)).
			OverrideByName(column("delay", "queue delay", seconds)))

	b = b.WithRow(dashboard.NewRowBuilder("Entities")).
		WithPanel(series("Measured rate against the dynamic limit", bytesPerSecond,
			"Each entity's measured rate (broker-side bytes over the rate window) beside the limit the data path enforces this second.", 24, 9,
			query(`sluice_entity_rate_bytes_per_second{`+entitySel+`}`, "{{entity}} {{direction}} rate"),
			query(`sluice_entity_dynamic_limit_bytes_per_second{`+entitySel+`}`, "{{entity}} {{direction}} dynamic limit"))).
		WithPanel(series("Configured limit and reservation", bytesPerSecond,
			"The hard limit and the reservation as configured (through templates), and the effective reservation after overcommit scaling.", 12, 8,
			query(`sluice_entity_limit_bytes_per_second{`+entitySel+`} < +Inf`, "{{entity}} {{direction}} limit"),
			query(`sluice_entity_reservation_bytes_per_second{`+entitySel+`}`, "{{entity}} {{direction}} reservation"),
			query(`sluice_entity_effective_reservation_bytes_per_second{`+entitySel+`}`, "{{entity}} {{direction}} effective reservation"))).
		WithPanel(series("Queueing delay", seconds, "The delay the shaper adds to each entity now.", 12, 8,
			query(`sluice_entity_queue_delay_seconds{`+entitySel+`}`, "{{entity}} {{direction}}"))).
		WithPanel(series("Held back", bytesPerSecond,
			"Bytes a BPF shaper (edt, police, produce under htb+police) held back per second; htb shows its queueing delay instead.", 8, 8,
			query(`rate(sluice_entity_held_bytes_total{`+entitySel+`}[$__rate_interval])`, "{{entity}} {{direction}} held"))).
		WithPanel(series("Dropped packets", packetsPerSecond,
			"Packets the shaper dropped per second for each entity (beyond the delay bound).", 8, 8,
			query(`rate(sluice_entity_dropped_packets_total{`+entitySel+`}[$__rate_interval])`, "{{entity}} {{direction}} dropped"))).
		WithPanel(series("Held at the limit", none, "1 while the shaper held the entity back at its dynamic limit in the last cycle.", 8, 8,
			query(`sluice_entity_throttled{`+entitySel+`} == 1`, "{{entity}} {{direction}}")))

	b = b.WithRow(dashboard.NewRowBuilder("Request latency (at the NIC)")).
		WithPanel(series("Produce latency by entity", seconds,
			"p50 and p99 of Produce requests per entity across the selected hosts: from a request's last byte arriving at the NIC to its response's first byte leaving it (the broker's time, the replicas' wait under acks=all included). One sampled request per connection is measured at a time.", 12, 8,
			query(latencyQuantile("0.99", "sluice_request_duration_seconds", "produce"), "{{entity}} p99"),
			query(latencyQuantile("0.5", "sluice_request_duration_seconds", "produce"), "{{entity}} p50"))).
		WithPanel(series("Fetch time to first byte by entity", seconds,
			"p99 of Fetch requests per entity: from a request's last byte arriving to its response's first byte leaving. It includes the broker's long-poll wait (fetch.max.wait.ms), so an idle consumer's p99 is that wait, not slowness.", 12, 8,
			query(latencyQuantile("0.99", "sluice_request_duration_seconds", "fetch"), "{{entity}} p99"))).
		WithPanel(series("Produce latency from the request's first byte", seconds,
			"p99 of Produce requests per entity from the request's first byte arriving: the request's own transfer included, which the shaper lengthens for an entity held at its limit. Far above the last-byte p99 means the time is spent arriving, not in the broker.", 12, 8,
			query(latencyQuantile("0.99", "sluice_request_duration_from_first_byte_seconds", "produce"), "{{entity}} p99 from first byte"))).
		WithPanel(series("Latency measurements", requestsPerSecond,
			"Requests per second the data path made pending for a measurement, by outcome: measured; ring_full (lost: the agent had not read the ring); expired (never answered: acks=0 produce, or response tracking lost). Many lost or expired ones make the quantiles above thin.", 12, 8,
			query(`sum by (instance, outcome) (rate(sluice_datapath_latency_requests_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{outcome}}")))

	b = b.WithRow(dashboard.NewRowBuilder("Latency objectives")).
		WithPanel(stat.NewPanelBuilder().Title("Latency objectives now").Span(6).Height(8).Datasource(datasource).
			Description("Each latency objective's breaker now: closed (the objective is met), open (its direction's best-effort entities are held back), half_open (probing: the hold is being raised).").
			WithTarget(query(objectiveState, "{{entity}} {{direction}} ({{instance}})").Instant()).Unit(none).
			Mappings(objectiveStates).Thresholds(objectiveThresholds).
			ColorMode(common.BigValueColorModeBackground).GraphMode(common.BigValueGraphModeNone).TextMode(common.BigValueTextModeValueAndName)).
		WithPanel(statetimeline.NewPanelBuilder().Title("Latency objective state").Span(18).Height(8).Datasource(datasource).
			Description("Each latency objective's breaker over time: closed green, half_open orange, open red. Every change is also logged by the agent and listed by sluice status.").
			WithTarget(query(objectiveState, "{{entity}} {{direction}} ({{instance}})")).
			Mappings(objectiveStates).Thresholds(objectiveThresholds).
			ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdThresholds)).
			Unit(none).ShowValue(common.VisibilityModeAuto).MergeValues(true).
			Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)).
			Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))).
		WithPanel(series("Latency objective level", ratio,
			"What each objective's breaker holds its direction's best-effort traffic to, as a share of their usage when it opened: 100 % holds nothing back; it falls on each bad window while open and rises while half_open.", 12, 8,
			query(`sluice_latency_objective_level{`+entitySel+`}`, "{{entity}} {{direction}} ({{instance}})")).Min(0).Max(1)).
		WithPanel(series("Latency objective transitions", eventsPerMinute,
			"Breaker state changes per minute on each host, all objectives together (the counter has no per-objective label: the state timeline shows which one changed).", 12, 8,
			query(`sum by (instance) (rate(sluice_latency_objective_transitions_total{`+sel+`}[$__rate_interval])) * 60`, "{{instance}} transitions/min")))

	b = b.WithRow(dashboard.NewRowBuilder("Cluster budgets")).
		WithPanel(series("Cluster budgets: limit, usage across brokers, shares", bytesPerSecond,
			"Each cluster budget's limit for the whole cluster, the sum of the usage every broker reported, and the sum of the shares the selected hosts apply (select every host: it never exceeds the limit, also while shares move).", 12, 8,
			query(`max by (direction, entity_type, entity) (sluice_cluster_budget_limit_bytes_per_second{`+entitySel+`} < +Inf)`, "{{entity}} {{direction}} limit"),
			query(`max by (direction, entity_type, entity) (sluice_cluster_budget_usage_bytes_per_second{`+entitySel+`})`, "{{entity}} {{direction}} Σ usage"),
			query(`sum by (direction, entity_type, entity) (sluice_cluster_budget_share_bytes_per_second{`+entitySel+`} < +Inf)`, "{{entity}} {{direction}} Σ shares"))).
		WithPanel(series("Cluster budget shares by host", bytesPerSecond,
			"This host's share of each cluster budget (the entity's local limit; in shadow mode what it would be) and its reserved part (the local reservation), per host.", 12, 8,
			query(`sluice_cluster_budget_share_bytes_per_second{`+entitySel+`} < +Inf`, "{{instance}} {{entity}} {{direction}} share"),
			query(`sluice_cluster_budget_reserved_bytes_per_second{`+entitySel+`}`, "{{instance}} {{entity}} {{direction}} reserved"))).
		WithPanel(series("Cluster standing", none,
			"1 while a host is not in normal standing: fallback (none of its reports landed for the lease: it applies the fallback share, and the others reclaim its share after that) or fenced (another agent reports its broker id); rebuilding while a restarted agent reads the topic.", 8, 8,
			query(`sluice_cluster_lease{`+sel+`, state!="normal"} == 1`, "{{instance}} {{state}}"),
			query(`sluice_cluster_rebuilding{`+sel+`} == 1`, "{{instance}} rebuilding"))).
		WithPanel(series("Cluster round lag", count,
			"Rounds the topic has closed that a host has not lowered to yet (round − processed_round), and records on the topic it has not read: a lasting lag means a host that does not keep up.", 8, 8,
			query(`sluice_cluster_round{`+sel+`} - sluice_cluster_processed_round{`+sel+`}`, "{{instance}} rounds behind"),
			query(`sluice_cluster_topic_lag_records{`+sel+`}`, "{{instance}} records behind"))).
		WithPanel(series("Cluster reports ignored and lost", recordsPerSecond,
			"Reports per second read and not accepted, by verdict (outside: another configuration's broker, counted outside the budget; ignored: fenced, stale, duplicate, conflict, malformed, foreign, unknown_broker, round_jump), records that are not reports, reports withheld (a lowering not written, the state file failing) and reports the producer could not deliver.", 8, 8,
			query(`sum by (instance, verdict) (rate(sluice_cluster_reports_received_total{`+sel+`, verdict!="accepted"}[$__rate_interval]))`, "{{instance}} {{verdict}}"),
			query(`rate(sluice_cluster_topic_undecodable_records_total{`+sel+`}[$__rate_interval])`, "{{instance}} undecodable"),
			query(`rate(sluice_cluster_reports_withheld_total{`+sel+`}[$__rate_interval])`, "{{instance}} withheld"),
			query(`rate(sluice_cluster_topic_publish_failures_total{`+sel+`}[$__rate_interval])`, "{{instance}} not delivered")))

	b = b.WithRow(dashboard.NewRowBuilder("Attribution")).
		WithPanel(series("Unknown and overflow share", ratio,
			"Bytes nobody is accountable for: not attributed yet or unparseable (unknown, held to H) and the overflow entity (registry full).", 12, 8,
			query(`sluice:unattributed_bytes:ratio_rate5m{`+dirSel+`}`, "{{instance}} {{direction}}"))).
		WithPanel(series("Entities", count, "Active and standby entities, and entities summed into the unconfigured aggregate (metrics.entities).", 12, 8,
			query(`sluice_entities{`+dirSel+`}`, "{{instance}} {{direction}} {{state}}"),
			query(`sluice_entities_without_series{`+dirSel+`}`, "{{instance}} {{direction}} without series"))).
		WithPanel(series("Learner samples", requestsPerSecond, "Request samples per second by result; failures mean bytes the learner could not attribute.", 12, 8,
			query(`sum by (instance, result) (rate(sluice_learner_samples_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{result}}"))).
		WithPanel(series("Sample drops", requestsPerSecond, "Request starts the data path could not hand to the learner, by reason.", 12, 8,
			query(`sum by (instance, reason) (rate(sluice_datapath_sample_drops_total{`+sel+`}[$__rate_interval]))`, "{{instance}} {{reason}}")))

	b = b.WithRow(dashboard.NewRowBuilder("Agent health")).
		WithPanel(single("Refresh age against stale_after", ratio, "The oldest heartbeat of the selected hosts as a share of its stale_after: at 100 % the data path fails open (orange from 50 %, red at 100 %).",
			query(`max(sluice_refresh_age_seconds{`+sel+`} / sluice_stale_after_seconds{`+sel+`})`, "refresh age / stale_after"),
			from(0.5, "orange"), from(1, "red"))).
		WithPanel(single("Fail-open packets", count, "Packets passed unshaped in the selected range because the heartbeat was stale: red from the first one.",
			query(`sum(increase(sluice_datapath_fail_open_packets_total{`+sel+`}[$__range]))`, "fail-open"),
			from(1, "red")).Decimals(0)).
		WithPanel(single("Reload refused", count, "Hosts whose last configuration reload was refused: red from the first one.",
			query(`count(sluice_config_last_reload_successful{`+sel+`} == 0) or vector(0)`, "refused"),
			from(1, "red")).Decimals(0)).
		WithPanel(single("Control-loop failures", count, "Failed cycles in the selected range: orange from one, red from three (the cycle runs every refresh_interval, so a few are a blip and many an outage).",
			query(`sum(increase(sluice_control_loop_failures_total{`+sel+`}[$__range]))`, "failures"),
			from(1, "orange"), from(3, "red")).Decimals(0)).
		WithPanel(series("Control-loop duration", seconds, "p50 and p99 of one cycle: read counters, allocate, write rates.", 12, 8,
			query(`histogram_quantile(0.5, sum by (instance, le) (rate(sluice_control_loop_duration_seconds_bucket{`+sel+`}[$__rate_interval])))`, "{{instance}} p50"),
			query(`histogram_quantile(0.99, sum by (instance, le) (rate(sluice_control_loop_duration_seconds_bucket{`+sel+`}[$__rate_interval])))`, "{{instance}} p99"))).
		WithPanel(series("Agent memory", bytes, "The agent's resident memory and Go heap.", 12, 8,
			query(`process_resident_memory_bytes{`+sel+`}`, "{{instance}} resident"),
			query(`go_memstats_heap_inuse_bytes{`+sel+`}`, "{{instance}} heap")))

	d, err := b.Build()
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
