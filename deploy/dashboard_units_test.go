package deploy_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// What a query plots, as a quantity: the unit of the metric it reads (by
// Prometheus' naming conventions: _bytes_per_second, _seconds, _bytes,
// _packets_total, _total, _ratio) and what the query does to it (rate,
// increase, a ratio of two of a kind, a count of series, per minute).
const (
	qBytesPerSecond   = "bytes/s"
	qBytes            = "bytes"
	qPacketsPerSecond = "packets/s"
	qPackets          = "packets"
	qEventsPerSecond  = "events/s"
	qEventsPerMinute  = "events/min"
	qEvents           = "events"
	qSeconds          = "seconds"
	qRatio            = "ratio"
	qNumber           = "number" // a count of things, a flag or a state
)

// unitsFor lists the Grafana unit ids that show each quantity truthfully.
var unitsFor = map[string][]string{
	qBytesPerSecond:   {"binBps", "Bps"},
	qBytes:            {"bytes", "decbytes"},
	qPacketsPerSecond: {"pps"},
	qEventsPerSecond:  {"ops", "reqps", "recps", "eps", "mps", "cps", "rps", "wps", "iops"},
	qEventsPerMinute:  {"opm", "reqpm", "recpm", "epm", "mpm", "cpm", "rpm", "wpm"},
	qSeconds:          {"s", "ms"},
	qRatio:            {"percentunit"},
	qPackets:          {"short", "none"},
	qEvents:           {"short", "none"},
	qNumber:           {"short", "none"},
}

// fractions are gauges the agent exports as a fraction without the
// _ratio suffix: the reservations' scale and a latency objective's level.
var fractions = map[string]bool{"sluice_reservation_scale": true, "sluice_latency_objective_level": true}

var metricName = regexp.MustCompile(`\b(?:sluice[_:]|go_|process_)[a-zA-Z0-9_:]*`)

// quantity is what expr plots. A filter joined on with `and on (…)` (the
// held-back table's) only selects series: the quantity is the left side's.
func quantity(expr string) (string, error) {
	e := expr
	if i := strings.Index(e, " and on ("); i >= 0 {
		e = e[:i]
	}
	names := metricName.FindAllString(e, -1)
	if len(names) == 0 {
		return "", fmt.Errorf("no metric in %q", expr)
	}
	m := names[0]
	if strings.Contains(e, "histogram_quantile(") {
		m = strings.TrimSuffix(m, "_bucket")
	}
	var q string
	counter := strings.HasSuffix(m, "_total")
	switch {
	case strings.HasSuffix(m, "_bytes_per_second"):
		q = qBytesPerSecond
	case strings.HasSuffix(m, "_seconds"):
		q = qSeconds
	case strings.HasSuffix(m, "_bytes_total"), strings.HasSuffix(m, "_bytes"):
		q = qBytes
	case strings.HasSuffix(m, "_packets_total"):
		q = qPackets
	case counter:
		q = qEvents
	case strings.HasSuffix(m, "_ratio"), strings.Contains(m, ":ratio"), fractions[m]:
		q = qRatio
	default:
		q = qNumber
	}
	switch {
	case counter && strings.Contains(e, "rate("):
		q = map[string]string{qBytes: qBytesPerSecond, qPackets: qPacketsPerSecond, qEvents: qEventsPerSecond}[q]
		if strings.Contains(e, "* 60") {
			if q != qEventsPerSecond {
				return "", fmt.Errorf("%q: a per-minute rate of %s", expr, m)
			}
			q = qEventsPerMinute
		}
	case counter && !strings.Contains(e, "increase("):
		return "", fmt.Errorf("%q plots the counter %s itself, not its rate or increase", expr, m)
	}
	if len(names) > 1 && strings.Contains(e, " / ") {
		if other, err := quantity(names[1]); err == nil && other == q {
			q = qRatio // a quantity over one of its own kind
		}
	}
	if strings.HasPrefix(e, "count(") {
		q = qNumber // how many series
	}
	return q, nil
}

// The classifier itself: a wrong unit for each of these must be caught.
func TestQuantityOfAQuery(t *testing.T) {
	for expr, want := range map[string]string{
		`sluice_capacity_bytes_per_second{direction="fetch"}`:                                      qBytesPerSecond,
		`sum by (instance) (rate(sluice_entity_bytes_total[1m]))`:                                  qBytesPerSecond,
		`rate(sluice_entity_held_bytes_total[1m])`:                                                 qBytesPerSecond,
		`rate(sluice_entity_dropped_packets_total[1m])`:                                            qPacketsPerSecond,
		`sum(increase(sluice_datapath_fail_open_packets_total[1h]))`:                               qPackets,
		`sum(rate(sluice_learner_samples_total[1m]))`:                                              qEventsPerSecond,
		`sum(rate(sluice_latency_objective_transitions_total[1m])) * 60`:                           qEventsPerMinute,
		`sluice_entity_queue_delay_seconds`:                                                        qSeconds,
		`histogram_quantile(0.99, sum by (le) (rate(sluice_request_duration_seconds_bucket[1m])))`: qSeconds,
		`max(sluice_refresh_age_seconds / sluice_stale_after_seconds)`:                             qRatio,
		`sluice_promised_ratio`:                                                                    qRatio,
		`sluice:unattributed_bytes:ratio_rate5m`:                                                   qRatio,
		`sluice_reservation_scale`:                                                                 qRatio,
		`process_resident_memory_bytes`:                                                            qBytes,
		`sluice_entity_throttled == 1`:                                                             qNumber,
		`count(sluice_config_last_reload_successful == 0) or vector(0)`:                            qNumber,
		`sluice_entity_rate_bytes_per_second and on (entity) (sluice_entity_throttled == 1)`:       qBytesPerSecond,
		`sluice_entity_queue_delay_seconds and on (entity) (sluice_entity_throttled == 1)`:         qSeconds,
	} {
		got, err := quantity(expr)
		if err != nil || got != want {
			t.Errorf("quantity(%q) = %q, %v; want %q", expr, got, err, want)
		}
	}
	if _, err := quantity(`sluice_entity_bytes_total`); err == nil {
		t.Error("a raw counter was given a quantity")
	}
	// The bug this test was written for: packets/s on a bytes/s axis.
	if q, _ := quantity(`rate(sluice_entity_dropped_packets_total[1m])`); slices.Contains(unitsFor[q], "binBps") {
		t.Error("dropped packets/s may be shown in bytes/s")
	}
}

type unitPanel struct {
	Type, Title string
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
		Overrides []struct {
			Matcher struct {
				ID      string `json:"id"`
				Options any    `json:"options"`
			} `json:"matcher"`
			Properties []struct {
				ID    string `json:"id"`
				Value any    `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

// unitOf is the unit a panel shows a target's values in: an override
// naming the target's query (byFrameRefID) or, in a table, its value
// column ("Value #ref", byName), else the panel's own unit.
func (p unitPanel) unitOf(ref string) string {
	unit := p.FieldConfig.Defaults.Unit
	for _, o := range p.FieldConfig.Overrides {
		opt, _ := o.Matcher.Options.(string)
		if ref == "" || !(o.Matcher.ID == "byFrameRefID" && opt == ref || o.Matcher.ID == "byName" && opt == "Value #"+ref) {
			continue
		}
		for _, prop := range o.Properties {
			if u, ok := prop.Value.(string); ok && prop.ID == "unit" {
				unit = u
			}
		}
	}
	return unit
}

// Every panel shows each query's values in a unit of the quantity it
// plots: bytes/s for *_bytes_per_second and rates of *_bytes_total,
// packets/s for rates of *_packets_total, seconds for *_seconds and
// their quantiles, a percentage for ratios, and so on (unitsFor).
func TestPanelUnitsMatchTheirMetrics(t *testing.T) {
	var d struct{ Panels []unitPanel }
	if err := json.Unmarshal([]byte(readFile(t, dashboardFile)), &d); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			q, err := quantity(target.Expr)
			if err != nil {
				t.Errorf("%s: %v", p.Title, err)
				continue
			}
			unit := p.unitOf(target.RefID)
			if !slices.Contains(unitsFor[q], unit) {
				t.Errorf("%s: %q plots %s, shown in unit %q; want one of %v", p.Title, target.Expr, q, unit, unitsFor[q])
			}
			checked++
		}
	}
	if checked < 40 {
		t.Fatalf("checked %d queries; the walk is broken", checked)
	}
}
