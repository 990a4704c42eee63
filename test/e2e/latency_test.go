package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
	"github.com/sluice-dev/sluice/test/harness"
)

// Request latency seen at the NIC against what the client measured for its
// own requests (#34): a franz-go producer at 100 and at 5,000 Produce
// requests a second records each request's wait for its response
// (ReadWait + TimeToRead: from its last byte written to the response read,
// the broker's time and the wire both ways); sluice's p50 and p99 for the
// producer's entity over the run (`sluice status`, last minute: from each
// request's last byte in to its response's first byte out) must be within
// 1 ms or 10 % of the client's, whichever is larger. At 100/s the broker
// holds each Produce 1-9 ms (uniform), so that the latency is a
// distribution to match, not noise; at 5,000/s it answers at once, and
// the p99 is judged one way (below).
func TestScenarioLatencyAccuracy(t *testing.T) {
	for _, run := range []struct {
		name      string
		perSecond float64
		delay     bool
	}{{"100-per-second", 100, true}, {"5000-per-second", 5000, false}} {
		t.Run(run.name, func(t *testing.T) { latencyAccuracy(t, run.name, run.perSecond, run.delay) })
	}
}

func latencyAccuracy(t *testing.T, name string, perSecond float64, delay bool) {
	const valueBytes, window = 100, 12 * time.Second
	o := harness.Options{Topics: []string{"orders"}}
	if delay {
		o.ProduceDelay = func() time.Duration { return time.Millisecond + rand.N(8*time.Millisecond) }
	}
	w := world(t, o)
	a, err := w.StartAgent(w.WriteConfig("latency", harness.Config{ProduceCapacity: "40MB", FetchCapacity: "40MB",
		Extra: "entities:\n  clients:\n    core: {producer_byte_reservation: 1000000}\n"}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	// One record a request (linger 0, a record's bytes at a time): the
	// byte rate sets the request rate. A franz-go producer keeps one
	// Produce in flight and reaches about 1,000 a second here, so the fast
	// run takes five (connections of the one client-id: one entity). More
	// would crowd the two CPUs, and a client waiting for a CPU adds to its
	// own figures what no NIC sees. The request rate is judged against
	// 60 % of the asked one, and reported.
	producers, inflight := 1, 1
	if perSecond > 1000 {
		producers = 5
	}
	var clients []*harness.Client
	var outs []string
	for i := 0; i < producers; i++ {
		out := filepath.Join(w.Dir, fmt.Sprintf("client-latency-%d.json", i))
		outs = append(outs, out)
		clients = append(clients, client(t, w, harness.ClientSpec{Name: fmt.Sprintf("core-%d", i), Lib: "franz", Mode: "produce", ClientID: "core",
			Topic: "orders", Rate: perSecond / float64(producers) * valueBytes, Args: []string{"-value-bytes", fmt.Sprint(valueBytes), "-latency-out", out, "-max-inflight", fmt.Sprint(inflight)}}))
	}
	began := time.Now()
	time.Sleep(window) // the measured run: a bounded load, not a readiness wait
	s, err := w.Status()
	if err != nil {
		t.Fatal(err)
	}
	diagnostics := datapathLatencyCounts(w) // the data path's own counts, beside the judged figures
	for _, c := range clients {
		c.Stop() // flushes, then writes the client's latencies
	}
	elapsed := time.Since(began)
	var clientMicros []float64
	for _, out := range outs {
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatalf("the client's latencies: %v", err)
		}
		var one []float64
		if err := json.Unmarshal(data, &one); err != nil {
			t.Fatal(err)
		}
		clientMicros = append(clientMicros, one...)
	}
	slices.Sort(clientMicros)
	quantile := func(q float64) float64 { return quantileOf(clientMicros, q) / 1000 } // the client's, exactly (ms)
	var sluice status.LatencyView
	if e := entityOf(s, maps.Produce, "client", "core"); e != nil {
		for _, v := range e.Latency {
			if v.API == "produce" {
				sluice = v
			}
		}
	}
	clientRate := float64(len(clientMicros)) / elapsed.Seconds()
	p50, p99 := quantile(0.5), quantile(0.99)
	within := func(got, want float64) bool { return math.Abs(got-want) <= math.Max(1, 0.1*want) }
	// The p99 at 5,000/s with no broker delay comes from the clients' own
	// scheduling on two shared CPUs, which the NIC cannot see: its interval
	// lies inside the client's, so it reads below it, by 8-22 % in 16 runs
	// (2026-12-06), around the 1 ms the symmetric bound allows, which it
	// then missed in half of them. There the NIC must not read above the
	// client's (plus the bound), nor below it by more than max(1 ms, 30 %)
	// of it: the bound's own 1 ms floor, since a client p99 under a
	// millisecond is mostly the client's scheduling (a loaded CI run: the
	// client's 0.89 ms, the NIC's 0.54, 0.7 of it failing on 0.09 ms);
	// docs/latency.md states the blind spot.
	p99OK := within(sluice.P99MinuteMillis, p99)
	if !delay {
		p99OK = sluice.P99MinuteMillis <= p99+math.Max(1, 0.1*p99) && sluice.P99MinuteMillis >= p99-math.Max(1, 0.3*p99)
	}
	errs, ok := noErrors(clients...)
	pass := ok && clientRate >= 0.6*perSecond && sluice.RequestsMinute >= 100 &&
		within(sluice.P50MinuteMillis, p50) && p99OK
	record(t, Result{
		Name: "latency-accuracy-" + name,
		Pass: pass,
		Measured: map[string]any{"producers": producers, "inflight_per_producer": inflight, "client_requests": len(clientMicros), "client_requests_per_s": clientRate,
			"client_p50_ms": p50, "client_p99_ms": p99, "sluice_requests_measured_1m": sluice.RequestsMinute,
			"sluice_p50_ms": sluice.P50MinuteMillis, "sluice_p99_ms": sluice.P99MinuteMillis, "client_errors": errs, "datapath": diagnostics,
			"measured_at": "the clients' own per-request ReadWait + TimeToRead (franz-go hooks) against sluice's status"},
		Expected: map[string]any{"client_requests_per_s_asked": perSecond, "client_requests_per_s_min": 0.6 * perSecond, "sluice_requests_measured_min": 100,
			"tolerance": "max(1 ms, 10 % of the client's); with no broker delay the p99 between the client's - max(1 ms, 30 %) and the client's + the bound", "broker_produce_delay": map[bool]string{true: "1-9 ms uniform", false: "none"}[delay]},
	})
}

// datapathLatencyCounts is the data path's own account of request latency
// (measured, expired, responses resynchronised and lost), read from the
// agent's metrics: a diagnostic beside the judged figures, which says,
// when the agent judged too few requests, whether pending requests
// expired or the response stream lost its place.
func datapathLatencyCounts(w *harness.World) map[string]string {
	counts := map[string]string{}
	m, err := w.ScrapeMetrics()
	if err != nil {
		counts["error"] = err.Error()
		return counts
	}
	for _, line := range strings.Split(string(m), "\n") {
		if strings.HasPrefix(line, "sluice_datapath_latency_requests_total") || strings.HasPrefix(line, "sluice_datapath_response_tracking_total") {
			if f := strings.Fields(line); len(f) == 2 {
				counts[f[0]] = f[1]
			}
		}
	}
	return counts
}
