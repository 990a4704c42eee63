package agent

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/maps"
)

type failingStats struct{ *fakeDataPath }

func (failingStats) Stats() (maps.Stats, error) { return maps.Stats{}, errors.New("map read failed") }

func TestMetricsExposeTheDesignsSeries(t *testing.T) {
	r := newRig(t, "entities: {clients: {core: {consumer_byte_reservation: 100}}}\n")
	id := r.learn(46000, "core", apiVersions()).Fetch
	r.cycle()
	r.dp.add(maps.Fetch, id, 50)
	r.cycle()
	m := NewMetrics(r.a, failingStats{r.dp})
	r.cycle() // observed by the histogram now

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go m.Serve(l)
	resp, err := http.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("scrape status %d: a failing map read must not fail the scrape", resp.StatusCode)
	}
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range families {
		have[f.GetName()] = true
	}
	for _, name := range []string{
		"sluice_build_info", "sluice_control_loop_duration_seconds", "sluice_refresh_age_seconds", "sluice_config_reload_failures_total",
		"sluice_entity_bytes_total", "sluice_entity_rate_bytes", "sluice_entity_effective_reservation_bytes", "sluice_entity_dynamic_limit_bytes",
		"sluice_entity_state", "sluice_entity_reservation_utilisation", "sluice_promised_ratio", "sluice_green_ratio", "sluice_overcommit",
		"sluice_entities", "sluice_learner_samples_total", "sluice_collector_errors_total",
		"sluice_learner_replication_claims_total", "sluice_learner_connections", "sluice_connections_tracked",
		"sluice_connections_reaped_total", "sluice_connections_rebound_total", "sluice_entities_unconfigured", "sluice_entities_peer_rate_refused_total",
	} {
		if !have[name] {
			t.Errorf("metric %s missing", name)
		}
	}
	if got := testutil.ToFloat64(m.collector.failures); got < 1 {
		t.Errorf("collector failures %v: a failed data path read must be counted", got)
	}
	// The learned client is labelled by its name and type.
	body := gatherText(t, m)
	if !strings.Contains(body, `sluice_entity_effective_reservation_bytes{direction="fetch",entity="core",type="client"} 100`) {
		t.Errorf("core's effective reservation not exported:\n%s", grep(body, "effective_reservation"))
	}
}

func gatherText(t *testing.T, m *Metrics) string {
	t.Helper()
	var sb strings.Builder
	families, _ := m.Registry.Gather()
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			sb.WriteString(f.GetName() + "{")
			var labels []string
			for _, l := range mt.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			sb.WriteString(strings.Join(labels, ","))
			sb.WriteString("} ")
			switch {
			case mt.Gauge != nil:
				sb.WriteString(ftoa(mt.Gauge.GetValue()))
			case mt.Counter != nil:
				sb.WriteString(ftoa(mt.Counter.GetValue()))
			}
			sb.WriteString("\n")
		}
	}
	return sb.String()
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
