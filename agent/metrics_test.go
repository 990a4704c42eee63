package agent

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/status"

	sluicemaps "github.com/sluice-dev/sluice/maps"
)

type failingStats struct{ *fakeDataPath }

func (failingStats) Stats() (sluicemaps.Stats, error) {
	return sluicemaps.Stats{}, errors.New("map read failed")
}

var updateMetricsList = flag.Bool("update-metrics", false, "rewrite testdata/metrics.txt from a scrape")

// metricsList is the committed list of sluice's metric families: name,
// type and label names, one family per line. Dashboards and alert rules
// are checked against it (deploy/), so a renamed metric fails here first.
const metricsList = "testdata/metrics.txt"

// scrape serves m on a loopback listener and parses one scrape of it, as
// Prometheus would.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
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
		t.Fatalf("scrape status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the scrape: %v", err)
	}
	return families
}

// metricsDocPath is the operators' reference of every metric family,
// written from a scrape (so it cannot drift from what the agent exports).
const metricsDocPath = "../docs/metrics.md"

// labelBounds says how many values each label can take: client-ids are
// the clients' choice, so every label a client could grow is bounded.
var labelBounds = map[string]string{
	"direction":   "`produce`, `fetch`",
	"interface":   "the configured interfaces (a handful per host)",
	"hook":        "`ingress`, `egress`",
	"entity":      "at most `metrics.max_entity_series` entities per direction have series of their own (configured ones first; `metrics.entities: all` lets learned ones in); every other entity is summed into one aggregate (`entity=\"<others>\"`, `entity_type=\"unconfigured\"`), plus `unknown` and `overflow`",
	"entity_type": "an entity kind: `client`, `client-pattern`, `topic-partition`, `user`, `user-client`, `peer`, `listener`, `unresolved`, `unknown`, `overflow`, or `unconfigured` for the aggregate",
	"state":       "a fixed set of states (entities: `active`, `standby`, `throttled`, ...; kafka_quotas: `imported`, `left_out`, `skipped`; cluster lease: `normal`, `fallback`, `fenced`)",
	"reason":      "a fixed list (see the help text)",
	"result":      "`complete`, `truncated`, `failed`",
	"version":     "the build's version (one value per process)",
	"revision":    "the build's revision (one value per process)",
	"mode":        "`enforce`, `shadow`",
	"shaper":      "`htb`, `htb+police` (produce_shaper: police), `edt`, `police`, `shadow`",
	"attach":      "`tcx`, `clsact`",
	"configured":  "`enforce`, `shadow`",
	"running":     "`enforce`, `shadow`, `unknown`",
	"branch":      "the build's branch (one value per process; empty)",
	"goversion":   "the Go version it was built with (one value per process)",
	"goos":        "the build's OS (one value per process)",
	"goarch":      "the build's architecture (one value per process)",
	"tags":        "the build's tags (one value per process; empty)",
	"api":         "`produce`, `fetch`, `other`",
	"outcome":     "`measured`, `ring_full`, `expired`",
	"event":       "`desync`, `resync`",
	"le":          "the histogram's bounds (fixed)",
	"name":        "cluster.name (one value per process)",
	"broker":      "cluster.broker_id (one value per process)",
	"verdict":     "a fixed list: `accepted`, `duplicate`, `stale`, `fenced`, `conflict`, `malformed`, `foreign`, `unknown_broker`, `round_jump`, `outside`",
	"held_by":     "the ids in cluster.brokers (one series per broker holding a raise up, none while no raise waits)",
}

// metricsDoc renders docs/metrics.md from a scrape's sluice_ families.
func metricsDoc(families map[string]*dto.MetricFamily) string {
	var b strings.Builder
	b.WriteString("# sluice metrics\n\n")
	b.WriteString("Every family `/metrics` exports (`metrics_address`, default `127.0.0.1:7359`), written from a scrape by\n")
	b.WriteString("`go test ./agent -run TestMetricsMatchTheCommittedList -update-metrics`; the test fails when this file and\n")
	b.WriteString("the agent differ. Go's and the process's standard collectors (`go_*`, `process_*`) are exported too.\n\n")
	b.WriteString("| metric | type | labels | what it is |\n|---|---|---|---|\n")
	names := slices.Sorted(maps.Keys(families))
	used := map[string]bool{}
	for _, name := range names {
		f := families[name]
		if !strings.HasPrefix(name, "sluice_") {
			continue
		}
		labels := strings.Fields(strings.ReplaceAll(strings.Fields(familyLine(f))[2], ",", " "))
		if len(labels) == 1 && labels[0] == "-" {
			labels = nil
		}
		for _, l := range labels {
			used[l] = true
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", name, strings.ToLower(f.GetType().String()), strings.Join(labels, ", "), strings.ReplaceAll(f.GetHelp(), "|", "\\|"))
	}
	b.WriteString("\n## Label bounds\n\n| label | values |\n|---|---|\n")
	for _, l := range slices.Sorted(maps.Keys(used)) {
		bound, ok := labelBounds[l]
		if !ok {
			bound = "UNBOUNDED: add it to labelBounds in agent/metrics_test.go"
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", l, bound)
	}
	return b.String()
}

// familyLine is a family's line in the committed list.
func familyLine(f *dto.MetricFamily) string {
	labels := map[string]bool{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = true
		}
	}
	names := "-"
	if len(labels) > 0 {
		names = strings.Join(slices.Sorted(maps.Keys(labels)), ",")
	}
	return fmt.Sprintf("%s %s %s", f.GetName(), strings.ToLower(f.GetType().String()), names)
}

// A running agent's scrape has exactly the committed families, with their
// types and labels, plus Go's and the process's; a failed data path read
// is counted, not a failed scrape.
func TestMetricsMatchTheCommittedList(t *testing.T) {
	// With a cluster section, so that its families are listed too.
	yaml := baseConfig + "entities: {clients: {core: {consumer_byte_reservation: 100, consumer_byte_rate: 400, producer_byte_reservation: 100, produce_latency_objective: {p99: 50ms}}}}\n" +
		"cluster: {name: c, broker_id: 1, brokers: [1], state_file: " + filepath.Join(t.TempDir(), "state") + ", entities: {clients: {bulk: {consumer_byte_rate: 500}}}}\n"
	var topicClock fakeClock
	r := newRigWith(t, yaml, func(d *Deps) {
		d.NewCluster = func(config.Config) (ClusterLink, error) {
			return ClusterLink{Log: &fakeLog{topic: &fakeTopic{}, clock: &topicClock}}, nil
		}
		// Hooks read, so that sluice_blind_hooks and its kin are listed.
		d.Hooks = &fakeHooks{v: status.HooksView{Position: "last", Hooks: []status.HookView{{Interface: "eth0", Hook: "ingress"}, {Interface: "eth0", Hook: "egress"}}}}
	})
	r.sh.kind = "police" // a BPF shaper: held bytes are counted
	id := r.learn(46000, "core", apiVersions()).Fetch
	r.learn(46001, "stranger", apiVersions())
	r.cycle()
	r.dp.add(sluicemaps.Fetch, id, 50)
	m := NewMetrics(r.a, r.dp, MetricsInfo{Build: BuildInfo{Version: "v1.2.3", Revision: "abc"}, Attach: "tcx"})
	r.cycle() // observed by the histogram now
	// A produce request of core's, measured at the NIC.
	r.a.ObserveLatency(sluicemaps.LatencyEvent{Bound: [2]uint32{id, id}, APIKey: 0, FirstByte: time.Second,
		LastByte: time.Second + time.Millisecond, Response: time.Second + 4*time.Millisecond})
	families := scrape(t, m)
	// Families only a cluster of several brokers exports: a raise held up
	// by a stuck broker (sluice_cluster_budget_raise_held_seconds).
	for name, f := range heldRaiseFamilies(t) {
		if _, ok := families[name]; !ok {
			families[name] = f
		}
	}

	var got []string
	for name, f := range families {
		if strings.HasPrefix(name, "sluice_") {
			got = append(got, familyLine(f))
		}
	}
	slices.Sort(got)
	doc := metricsDoc(families)
	if *updateMetricsList {
		if err := os.WriteFile(metricsList, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(metricsDocPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(doc, "UNBOUNDED") {
		t.Errorf("a label without a stated bound:\n%s", doc)
	}
	if committed, err := os.ReadFile(metricsDocPath); err != nil || string(committed) != doc {
		t.Errorf("%s is not what the agent exports (go test ./agent -run TestMetricsMatchTheCommittedList -update-metrics): %v", metricsDocPath, err)
	}
	data, err := os.ReadFile(metricsList)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(string(data)), "\n")
	for _, line := range want {
		if !slices.Contains(got, line) {
			t.Errorf("committed family missing or changed: %s", line)
		}
	}
	for _, line := range got {
		if !slices.Contains(want, line) {
			t.Errorf("family not in %s: %s (go test ./agent -run TestMetricsMatchTheCommittedList -update-metrics)", metricsList, line)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "process_resident_memory_bytes", "process_open_fds"} {
		if families[name] == nil {
			t.Errorf("standard collector family %s missing", name)
		}
	}
	// Conventions: counters end in _total, nothing else does; rates are
	// in bytes per second.
	for name, f := range families {
		if !strings.HasPrefix(name, "sluice_") {
			continue
		}
		isCounter := f.GetType() == dto.MetricType_COUNTER
		if isCounter != strings.HasSuffix(name, "_total") {
			t.Errorf("%s is a %s: counters and only counters end in _total", name, f.GetType())
		}
		if strings.Contains(name, "rate") && !strings.HasSuffix(name, "_bytes_per_second") && !strings.HasSuffix(name, "_total") {
			t.Errorf("%s: a rate's unit is bytes_per_second", name)
		}
	}
	body := gatherText(t, m)
	for _, want := range []string{
		`sluice_agent_info{attach="tcx",mode="enforce",revision="abc",shaper="police",version="v1.2.3"} 1`,
		`sluice_entity_effective_reservation_bytes_per_second{direction="fetch",entity="core",entity_type="client"} 100`,
		`sluice_entity_limit_bytes_per_second{direction="fetch",entity="core",entity_type="client"} 400`,
		`sluice_entity_bytes_total{direction="fetch",entity="core",entity_type="client"} 50`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %s", want)
		}
	}
	if strings.Contains(body, `entity="stranger"`) {
		t.Error("an unconfigured client has series of its own under metrics.entities: configured")
	}
}

func TestMetricsCountAFailedDataPathRead(t *testing.T) {
	r := newRig(t, "")
	r.cycle()
	m := NewMetrics(r.a, failingStats{r.dp}, MetricsInfo{})
	scrape(t, m) // status 200: a failing map read must not fail the scrape
	if got := testutil.ToFloat64(m.collector.failures); got < 1 {
		t.Errorf("collector failures %v: a failed data path read must be counted", got)
	}
}

// entitySeries counts, per direction, the distinct entities with series
// in one family.
func entitySeries(families map[string]*dto.MetricFamily, family string) map[string]int {
	out := map[string]int{}
	for _, m := range families[family].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "direction" {
				out[l.GetValue()]++
			}
		}
	}
	return out
}

func othersBytes(t *testing.T, families map[string]*dto.MetricFamily, direction string) float64 {
	t.Helper()
	for _, m := range families["sluice_entity_bytes_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["direction"] == direction && labels["entity_type"] == "unconfigured" {
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no unconfigured aggregate for %s", direction)
	return 0
}

// Clients choose client-ids, so 10,000 random ones must not become 10,000
// series per family: configured entities, unknown, overflow and one
// aggregate per direction, whose bytes are the clients' bytes. A reload to
// metrics.entities: all takes effect at the next cycle, up to the cap.
func TestMetricsSeriesStayBoundedUnderRandomClientIDs(t *testing.T) {
	r := newRig(t, `
new_entities_per_peer: 100000
entities: {clients: {core: {consumer_byte_reservation: 100}}}
`)
	m := NewMetrics(r.a, r.dp, MetricsInfo{})
	rng := rand.New(rand.NewPCG(1, 2))
	const clients = 10000
	var ids []uint32
	for i := range clients {
		name := fmt.Sprintf("consumer-%x-%d", rng.Uint64(), i)
		ids = append(ids, r.learn(uint16(40000+i), name, apiVersions()).Fetch)
	}
	r.cycle() // the counters' baseline
	var fed uint64
	for i, id := range ids {
		r.dp.add(sluicemaps.Fetch, id, uint64(10+i%7))
		fed += uint64(10 + i%7)
	}
	r.cycle()
	if n := r.a.Snapshot().Unconfigured; n != clients {
		t.Fatalf("%d unconfigured entities registered, want %d", n, clients)
	}
	families := scrape(t, m)
	perDirection := 4 // core, unknown, overflow, the aggregate
	for _, family := range []string{"sluice_entity_bytes_total", "sluice_entity_rate_bytes_per_second", "sluice_entity_dropped_packets_total"} {
		for dir, n := range entitySeries(families, family) {
			if n != perDirection {
				t.Errorf("%s %s: %d series, want %d", family, dir, n, perDirection)
			}
		}
	}
	total := 0
	for _, f := range families {
		total += len(f.GetMetric())
	}
	if total > 400 {
		t.Errorf("%d series in one scrape with %d client-ids", total, clients)
	}
	if got := othersBytes(t, families, "fetch"); got != float64(fed) {
		t.Errorf("unconfigured aggregate counts %v bytes, the clients sent %d", got, fed)
	}

	// metrics.entities: all, capped at 100 entities with series of their own.
	cfg, err := configfile.Parse([]byte(baseConfig + `
new_entities_per_peer: 100000
metrics: {entities: all, max_entity_series: 100}
entities: {clients: {core: {consumer_byte_reservation: 100}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.a.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	before := othersBytes(t, families, "fetch")
	r.cycle()
	families = scrape(t, m)
	for dir, n := range entitySeries(families, "sluice_entity_bytes_total") {
		if want := 100 + 3; n != want { // the cap, unknown, overflow, the aggregate
			t.Errorf("metrics.entities all, max 100: %s has %d series, want %d", dir, n, want)
		}
	}
	if got := othersBytes(t, families, "fetch"); got < before {
		t.Errorf("the aggregate counter went back from %v to %v", before, got)
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
