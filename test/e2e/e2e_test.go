// Package e2e proves sluice's behaviour end to end with real Kafka clients
// (franz-go, sarama, kafka-go) against a Kafka protocol peer, in network
// namespaces, and writes e2e-results.json with each scenario's measured
// numbers and the bounds they were checked against.
package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent"
	"github.com/sluice-dev/sluice/test/harness"
	"github.com/sluice-dev/sluice/test/netns"
)

var resultsFile = flag.String("results", "../../e2e-results.json", "where to write the scenario results")

// Result is one scenario in e2e-results.json.
type Result struct {
	Name     string         `json:"name"`
	Pass     bool           `json:"pass"`
	Measured map[string]any `json:"measured"`
	Expected map[string]any `json:"expected"`
}

var (
	resultsMu sync.Mutex
	results   []Result
	bins      struct{ sluice, loadgen string }
)

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Geteuid() != 0 {
		println("e2e: needs root (namespaces, BPF, qdiscs); CI runs make test as root")
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "sluice-e2e-bin-")
	if err != nil {
		panic(err)
	}
	root, _ := filepath.Abs("../..")
	if bins.sluice, bins.loadgen, err = harness.Build(root, dir); err != nil {
		println(err.Error())
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	// Nothing may be left behind, also when a scenario failed.
	if left := leftovers(); left != "" {
		println("e2e: left behind:\n" + left)
		code = 1
	}
	data, _ := json.MarshalIndent(map[string]any{"scenarios": results}, "", "  ")
	os.WriteFile(*resultsFile, append(data, '\n'), 0o644)
	os.Exit(code)
}

// leftovers lists namespaces, devices and processes the scenarios created
// that still exist.
func leftovers() string {
	var out []string
	if ns, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(ns), netns.Prefix) {
		out = append(out, "namespaces: "+string(ns))
	}
	if links, _ := exec.Command("ip", "-o", "link").Output(); strings.Contains(string(links), "slifb") || strings.Contains(string(links), "slb") {
		out = append(out, "devices: "+string(links))
	}
	for _, name := range []string{"loadgen", "sluice"} {
		if pids, _ := exec.Command("pgrep", "-x", name).Output(); len(strings.TrimSpace(string(pids))) > 0 {
			out = append(out, name+" processes: "+string(pids))
		}
	}
	return strings.Join(out, "\n")
}

func record(t *testing.T, r Result) {
	t.Helper()
	resultsMu.Lock()
	results = append(results, r)
	resultsMu.Unlock()
	data, _ := json.Marshal(r)
	t.Logf("%s", data)
	if !r.Pass {
		t.Errorf("scenario %s failed: measured %v, expected %v", r.Name, r.Measured, r.Expected)
	}
}

func world(t *testing.T, o harness.Options) *harness.World {
	t.Helper()
	w, err := harness.New(t.TempDir(), bins.sluice, bins.loadgen, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []string{"agent-*.log", "client-*.log"} {
				matches, _ := filepath.Glob(filepath.Join(w.Dir, f))
				for _, m := range matches {
					data, _ := os.ReadFile(m)
					if len(data) > 4000 {
						data = data[len(data)-4000:]
					}
					t.Logf("%s:\n%s", filepath.Base(m), data)
				}
			}
		}
		if err := w.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return w
}

func start(t *testing.T, w *harness.World, cfg harness.Config) *harness.Agent {
	t.Helper()
	a, err := w.StartAgent(w.WriteConfig(t.Name(), cfg))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func client(t *testing.T, w *harness.World, s harness.ClientSpec) *harness.Client {
	t.Helper()
	c, err := w.StartClient(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// measure waits the 3 s settle and returns the clients' mean rates over the
// next 5 one-second windows.
func measure(clients ...*harness.Client) []float64 {
	settle := time.Now().Add(3 * time.Second)
	time.Sleep(3*time.Second + 5*time.Second + 200*time.Millisecond) // the measurement window itself
	out := make([]float64, len(clients))
	for i, c := range clients {
		w := c.Windows(settle, settle.Add(5*time.Second))
		var sum float64
		for _, v := range w {
			sum += v
		}
		if len(w) > 0 {
			out[i] = sum / float64(len(w))
		}
	}
	return out
}

const (
	capacity = 40e6 // bytes/s per direction in these scenarios (tens of MB/s: kfake is never the bottleneck)
	C        = 0.9 * capacity
)

func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }

// exactlyOnce stops the producers (they flush what is in flight), stops
// the agent, then reads the whole topic: every acknowledged record must be
// there exactly once, per producer (count and checksum of the values).
func exactlyOnce(t *testing.T, w *harness.World, a *harness.Agent, topic string, partitions int, producers ...*harness.Client) (map[string]any, bool) {
	t.Helper()
	want := map[string]harness.Tally{}
	for _, p := range producers {
		p.Stop()
		f := p.Final()
		if f == nil {
			return map[string]any{"error": p.Name + " reported no final tally"}, false
		}
		k := p.ClientID
		want[k] = harness.Tally{Count: want[k].Count + f.Count, Checksum: want[k].Checksum + f.Checksum}
	}
	if a != nil {
		if err := a.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := w.Verify(topic, partitions)
	if err != nil {
		t.Fatal(err)
	}
	ok := len(got) == len(want)
	for k, v := range want {
		ok = ok && got[k] == v && v.Count > 0
	}
	return map[string]any{"acknowledged": want, "consumed": got}, ok
}

func noErrors(clients ...*harness.Client) (int64, bool) {
	var n int64
	for _, c := range clients {
		n += c.Errors()
	}
	return n, n == 0
}

// ① A hot spot on an idle broker gets the idle bandwidth: one unconfigured
// producer, then separately one unconfigured consumer, each ≥ 90 % of C.
// The producer's records are all consumed exactly once afterwards.
func TestScenarioHotSpot(t *testing.T) {
	pw := world(t, harness.Options{Topics: []string{"orders"}, Log: true})
	a := start(t, pw, harness.Config{ProduceCapacity: "40MB", FetchCapacity: "40MB"})
	prod := client(t, pw, harness.ClientSpec{Name: "hot-producer", Lib: "franz", Mode: "produce", ClientID: "hot-producer", Topic: "orders"})
	p := measure(prod)[0]
	once, onceOK := exactlyOnce(t, pw, a, "orders", 1, prod)

	cw := world(t, harness.Options{Topics: []string{"orders"}})
	b := start(t, cw, harness.Config{ProduceCapacity: "40MB", FetchCapacity: "40MB"})
	defer b.Stop()
	cons := client(t, cw, harness.ClientSpec{Name: "hot-consumer", Lib: "franz", Mode: "consume", ClientID: "hot-consumer", Topic: "orders"})
	c := measure(cons)[0]
	errs, ok := noErrors(prod, cons)
	record(t, Result{
		Name:     "hot-spot",
		Pass:     p >= 0.9*C && c >= 0.9*C && ok && onceOK,
		Measured: map[string]any{"producer_bps": p, "consumer_bps": c, "client_errors": errs, "exactly_once": once},
		Expected: map[string]any{"C_bps": C, "producer_min_bps": 0.9 * C, "consumer_min_bps": 0.9 * C, "client_errors": 0,
			"exactly_once": "every acknowledged record consumed once (count and checksum)"},
	})
}

// ③ Overcommit: two topic-partitions whose reservations sum to 1.2 × C
// each get C/2 (reservations scaled at once); the alert is raised after the
// confirmation cycles and cleared within confirmation + 2 s after one
// producer stops.
func TestScenarioOvercommit(t *testing.T) {
	w := world(t, harness.Options{Topics: []string{"orders"}, Partitions: 2, Log: true})
	res := 0.6 * C
	a := start(t, w, harness.Config{ProduceCapacity: "40MB", MemoryCycles: 2, Extra: "entities:\n  topic-partitions:\n" +
		"    orders-0: {producer_byte_reservation: " + itoa(res) + "}\n    orders-1: {producer_byte_reservation: " + itoa(res) + "}\n"})
	p0 := client(t, w, harness.ClientSpec{Name: "tp0-franz", Lib: "franz", Mode: "produce", ClientID: "tp0-producer", Topic: "orders", Partition: 0})
	// Both producers must want more than C/2: franz-go keeps requests in
	// flight (sarama's SyncProducer sends one at a time and barely demands 18 MB/s).
	p1 := client(t, w, harness.ClientSpec{Name: "tp1-franz", Lib: "franz", Mode: "produce", ClientID: "tp1-producer", Topic: "orders", Partition: 1})
	// Each topic-partition's share, read at the NIC (the entities' counters).
	time.Sleep(3 * time.Second) // settle
	rates, err := w.NICRatesOf(0, 5*time.Second, harness.Ref{Kind: "topic-partition", Name: "orders-0"}, harness.Ref{Kind: "topic-partition", Name: "orders-1"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := w.WaitFor(5*time.Second, func(s *agent.Snapshot) bool { return s.Directions[0].Overcommit })
	raised := err == nil
	scale := 0.0
	if s != nil {
		scale = s.Directions[0].Scale
	}
	p1.Stop()
	stopped := time.Now()
	_, err = w.WaitFor(15*time.Second, func(s *agent.Snapshot) bool { return !s.Directions[0].Overcommit })
	cleared := time.Since(stopped).Seconds()
	// Cleared within confirmation (3) + 2 s after the stopped producer left
	// the activity memory (2 cycles).
	clearedInTime := err == nil && cleared <= 2+3+2+1
	errs, ok := noErrors(p0, p1)
	once, onceOK := exactlyOnce(t, w, a, "orders", 2, p0, p1)
	record(t, Result{
		Name: "overcommit",
		Pass: within(rates[0], C/2, 0.10) && within(rates[1], C/2, 0.10) && raised && clearedInTime && ok && onceOK,
		Measured: map[string]any{"tp0_bps": rates[0], "tp1_bps": rates[1], "overcommit_raised": raised, "scale": scale,
			"cleared_after_s": cleared, "client_errors": errs, "exactly_once": once},
		Expected: map[string]any{"each_bps": C / 2, "tolerance": 0.10, "overcommit_raised": true, "scale": C / (2 * res),
			"cleared_within_s": "memory 2 + confirmation 3 + 2 (+1 s of polling)", "client_errors": 0,
			"exactly_once": "every acknowledged record consumed once (count and checksum)"},
	})
}

// ④ Shadow mode holds nothing back: throughput equals a run without sluice
// within 5 % (paired runs), and nothing is dropped or queued. The producer
// wants 30 MB/s (tens of MB/s, so the 2-core machine is not the
// bottleneck), six times what enforce mode would allow it on this pool.
func TestScenarioShadow(t *testing.T) {
	w := world(t, harness.Options{Topics: []string{"orders"}, Log: true})
	const wants = 30e6
	cfg := w.WriteConfig("shadow", harness.Config{ProduceCapacity: "5MB", Mode: "shadow"})
	var with, without []float64
	var held float64
	var producers []*harness.Client
	for i := 0; i < 3; i++ {
		for _, shadow := range []bool{i%2 == 0, i%2 != 0} {
			var a *harness.Agent
			if shadow {
				var err error
				if a, err = w.StartAgent(cfg); err != nil {
					t.Fatal(err)
				}
			}
			c := client(t, w, harness.ClientSpec{Name: "shadow-producer", Lib: "franz", Mode: "produce", ClientID: "shadow-producer", Topic: "orders", Rate: wants})
			r := measure(c)[0]
			c.Stop()
			producers = append(producers, c)
			if shadow {
				if s, err := w.Status(); err == nil {
					for _, e := range s.Directions[0].Entities {
						held += float64(e.DroppedPackets) + e.QueueDelayMillis
					}
				}
				a.Stop()
				with = append(with, r)
			} else {
				without = append(without, r)
			}
		}
	}
	mw, mo := median(with), median(without)
	errs, ok := noErrors(producers...)
	once, onceOK := exactlyOnce(t, w, nil, "orders", 1, producers...)
	record(t, Result{
		Name: "shadow",
		Pass: within(mw, mo, 0.05) && within(mw, wants, 0.05) && held == 0 && ok && onceOK,
		Measured: map[string]any{"median_shadow_bps": mw, "median_without_bps": mo, "ratio": mw / mo, "shadow_runs": with, "without_runs": without,
			"held_back": held, "client_errors": errs, "exactly_once": once},
		Expected: map[string]any{"ratio": "1 ± 0.05", "held_back": 0, "wanted_bps": wants, "capacity_configured_bps": 5e6, "client_errors": 0,
			"exactly_once": "every acknowledged record consumed once (count and checksum)"},
	})
}

// ⑤ Weighted fairness: three greedy consumer groups with weights 5 : 3 : 2
// (franz-go, sarama, kafka-go) get 50 / 30 / 20 % of C within ±10 % of
// each share.
func TestScenarioWeightedFairness(t *testing.T) {
	w := world(t, harness.Options{Topics: []string{"events"}})
	a := start(t, w, harness.Config{FetchCapacity: "40MB", Extra: `entities:
  clients:
    group-w5: {quota_weight: 5}
    group-w3: {quota_weight: 3}
    group-w2: {quota_weight: 2}
`})
	defer a.Stop()
	cs := []*harness.Client{
		client(t, w, harness.ClientSpec{Name: "w5-franz", Lib: "franz", Mode: "consume", ClientID: "group-w5", Topic: "events"}),
		client(t, w, harness.ClientSpec{Name: "w3-sarama", Lib: "sarama", Mode: "consume", ClientID: "group-w3", Topic: "events"}),
		client(t, w, harness.ClientSpec{Name: "w2-kafkago", Lib: "kafkago", Mode: "consume", ClientID: "group-w2", Topic: "events"}),
	}
	rates := measure(cs...)
	shares := []float64{0.5, 0.3, 0.2}
	pass := true
	for i, share := range shares {
		pass = pass && within(rates[i], share*C, 0.10)
	}
	errs, ok := noErrors(cs...)
	record(t, Result{
		Name:     "weighted-fairness",
		Pass:     pass && ok,
		Measured: map[string]any{"w5_franz_bps": rates[0], "w3_sarama_bps": rates[1], "w2_kafkago_bps": rates[2], "client_errors": errs},
		Expected: map[string]any{"w5_bps": 0.5 * C, "w3_bps": 0.3 * C, "w2_bps": 0.2 * C, "tolerance": 0.10, "client_errors": 0,
			"exactly_once": consumersOnly},
	})
}

// consumersOnly explains the exactly-once check of consumer-only scenarios:
// nothing is produced; the broker answers fetches with synthetic batches.
const consumersOnly = "n/a: consumers only, reading synthetic batches; nothing is produced"

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func itoa(v float64) string { return strconv.FormatInt(int64(v), 10) }

// ② Contention and reclaim: a core consumer group with a reservation of
// 40 % of C keeps ≥ 95 % of min(reservation, its demand) while a backfill
// group (weight 0.1) and a normal group (weight 1) share the rest 1 : 10
// within ±15 %; when core's demand rises, the others fall to their new
// shares within 3 s. Shares are read at the NIC (the data path's counters):
// consumers buffer megabytes, so what a client hands its application lags
// what the network gave it.
func TestScenarioContentionReclaim(t *testing.T) {
	w := world(t, harness.Options{Topics: []string{"events"}})
	res := 0.4 * C
	a := start(t, w, harness.Config{FetchCapacity: "40MB", Extra: "entities:\n  clients:\n" +
		"    core-group: {consumer_byte_reservation: " + itoa(res) + "}\n" +
		"    backfill-group: {quota_weight: 0.1}\n    normal-group: {quota_weight: 1}\n"})
	defer a.Stop()
	const coreDemand = 10e6
	groups := []string{"core-group", "backfill-group", "normal-group"}
	core := client(t, w, harness.ClientSpec{Name: "core-franz-paced", Lib: "franz", Mode: "consume", ClientID: "core-group", Topic: "events", Rate: coreDemand})
	backfill := client(t, w, harness.ClientSpec{Name: "backfill-sarama", Lib: "sarama", Mode: "consume", ClientID: "backfill-group", Topic: "events"})
	normal := client(t, w, harness.ClientSpec{Name: "normal-kafkago", Lib: "kafkago", Mode: "consume", ClientID: "normal-group", Topic: "events"})
	time.Sleep(3 * time.Second) // settle
	before, err := w.NICRates(1, 5*time.Second, groups...)
	if err != nil {
		t.Fatal(err)
	}
	// Core's demand rises: the paced consumer is replaced by a greedy one.
	core.Stop()
	coreGreedy := client(t, w, harness.ClientSpec{Name: "core-franz-greedy", Lib: "franz", Mode: "consume", ClientID: "core-group", Topic: "events"})
	time.Sleep(3 * time.Second) // "within 3 s"
	after, err := w.NICRates(1, 5*time.Second, groups...)
	if err != nil {
		t.Fatal(err)
	}
	// Shares after the rise: core's green is its reservation; the rest goes
	// by weight 1 : 1 : 0.1.
	spare := C - res
	wantCore, wantBackfill, wantNormal := res+spare/2.1, spare*0.1/2.1, spare/2.1
	ratio := before[1] / before[2]
	errs, ok := noErrors(core, backfill, normal, coreGreedy)
	record(t, Result{
		Name: "contention-reclaim",
		Pass: before[0] >= 0.95*math.Min(res, coreDemand) && within(ratio, 0.1, 0.15) &&
			after[0] >= 0.95*res && within(after[2], wantNormal, 0.15) && within(after[1], wantBackfill, 0.15) && ok,
		Measured: map[string]any{"core_before_bps": before[0], "backfill_before_bps": before[1], "normal_before_bps": before[2],
			"backfill_to_normal": ratio, "core_after_bps": after[0], "backfill_after_bps": after[1], "normal_after_bps": after[2],
			"after_window": "3-8 s after the rise", "measured_at": "NIC (bytes the shaper let through)", "client_errors": errs},
		Expected: map[string]any{"core_before_min_bps": 0.95 * math.Min(res, coreDemand), "backfill_to_normal": "0.1 ± 15 %",
			"core_after_min_bps": 0.95 * res, "core_after_bps": wantCore, "normal_after_bps": wantNormal, "backfill_after_bps": wantBackfill,
			"tolerance": 0.15, "client_errors": 0, "exactly_once": consumersOnly},
	})
}

// ⑥ Random group names: consumers with per-instance random client-ids
// reading broadcast-topic, whose partition carries a topic-partition
// configuration, are held together to that entity's limit, while a stable
// group on another topic is unaffected.
func TestScenarioRandomGroupNames(t *testing.T) {
	w := world(t, harness.Options{Topics: []string{"broadcast-topic", "events"}})
	const limit = 10e6
	a := start(t, w, harness.Config{FetchCapacity: "40MB", Extra: "entities:\n  topic-partitions:\n" +
		"    broadcast-topic-0: {consumer_byte_rate: " + itoa(limit) + "}\n"})
	defer a.Stop()
	var randoms []*harness.Client
	for i, lib := range []string{"franz", "sarama", "kafkago"} {
		id := fmt.Sprintf("instance-%s-%d", netnsSuffix(), i)
		randoms = append(randoms, client(t, w, harness.ClientSpec{Name: "random-" + lib, Lib: lib, Mode: "consume", ClientID: id, Topic: "broadcast-topic"}))
	}
	stable := client(t, w, harness.ClientSpec{Name: "stable-franz", Lib: "franz", Mode: "consume", ClientID: "stable-group", Topic: "events"})
	// Held together: read at the NIC, where the topic-partition entity is
	// one counter whatever the consumers' client-ids (clients buffer
	// megabytes, so their own 5 s rates wander around what the network gave).
	time.Sleep(3 * time.Second) // settle
	nic, err := w.NICRatesOf(1, 5*time.Second, harness.Ref{Kind: "topic-partition", Name: "broadcast-topic-0"}, harness.Ref{Kind: "client", Name: "stable-group"})
	if err != nil {
		t.Fatal(err)
	}
	together, stableRate := nic[0], nic[1]
	var clientSide []float64
	for _, c := range randoms {
		clientSide = append(clientSide, c.Rate(time.Now().Add(-5*time.Second), time.Now()))
	}
	// The stable group's fair result: everything the broadcast entity does not take.
	wantStable := C - limit
	errs, ok := noErrors(append(randoms, stable)...)
	record(t, Result{
		Name: "random-group-names",
		Pass: within(together, limit, 0.10) && stableRate >= 0.9*wantStable && ok,
		Measured: map[string]any{"random_consumers_together_bps": together, "random_each_client_side_bps": clientSide, "stable_bps": stableRate,
			"measured_at": "NIC (bytes the shaper let through)", "client_errors": errs},
		Expected: map[string]any{"random_together_bps": limit, "tolerance": 0.10, "stable_min_bps": 0.9 * wantStable, "client_errors": 0,
			"exactly_once": consumersOnly},
	})
}

func netnsSuffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}
