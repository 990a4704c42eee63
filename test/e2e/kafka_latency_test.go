package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
	"github.com/sluice-dev/sluice/test/harness"
)

// toolResolutionMs is the Java tool's resolution: ProducerPerformance
// takes a record's latency as the difference of two millisecond clock
// readings, so each reads up to 1 ms off, and its percentiles are whole ms.
// The defended p99 is compared with 2 × alone at that resolution: a CI
// run read 3 ms alone and 7 defended (sluice's NIC p99 3.79 ms).
const toolResolutionMs = 1

// protectedSummary matches ProducerPerformance's closing line with all its
// percentiles: "N records sent, R records/sec (M MB/sec), A ms avg
// latency, X ms max latency, P50 ms 50th, P95 ms 95th, P99 ms 99th, P999
// ms 99.9th."
var protectedSummary = regexp.MustCompile(`(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th`)

// javaPercentiles is what a paced ProducerPerformance run said of its own
// records' latencies (send() to acknowledgement), in ms.
type javaPercentiles struct {
	Records int     `json:"records"`
	AvgMs   float64 `json:"avg_ms"`
	MaxMs   float64 `json:"max_ms"`
	P50Ms   float64 `json:"p50_ms"`
	P95Ms   float64 `json:"p95_ms"`
	P99Ms   float64 `json:"p99_ms"`
	P999Ms  float64 `json:"p999_ms"`
}

// ⑩ A latency objective defends a protected Java producer on a real broker
// (#45 item 3, #51 item 5). protected-app (reserved 1 MB/s) produces 500
// records a second of 512 B (acks=1, linger.ms=0); the backfill is three
// greedy Java producers under one best-effort client-id (1 MiB batches,
// linger.ms=20), which load the broker's threads and the host's two cores.
// One perf-test run of 45 s per phase, each judged on the tool's own
// percentiles:
//
//  1. alone: sluice enforcing, no objective;
//  2. with the backfill, no objective: the harm (p99 at least 2 × alone,
//     else the defence cannot be judged);
//  3. with the backfill, the objective reloaded in: measured once the
//     breaker has opened and its first probe has missed. The p99 at most
//     2 × alone (the criterion, at the tool's 1 ms resolution) and
//     at most half the undefended p99, while the backfill
//     still moves at least 4 % of its undefended rate (the breaker's floor,
//     0.05, less a fifth for the meter's window), judged at the broker's
//     sockets.
//
// The objective is max(1.5 × alone, alone + 1 ms) of the p99 *sluice
// measured at the NIC* over the whole alone run, not the Java tool's: the
// breaker judges the NIC's interval, which lies inside the client's (an
// objective at the Java alone p99, 25-29 ms, sat above the NIC's loaded
// p99, 21 ms, and the breaker never opened while the Java p99 was 2.4 ×
// alone). Under load the client's p99 holds more that no NIC sees (its
// request and response waiting for a busy CPU's softirq on either side of
// the hooks): the Java p99 read 0.5-0.7 ms over the NIC's whole-run p99
// alone and 1.3-2.2 ms over it defended, also with the client on a CPU of
// its own (docs/latency.md). At 2 × the NIC's alone p99 (its last 10 s)
// the breaker held the NIC under the objective (3.79 ms of 4.68) while the
// Java p99 read 7 ms against 2 × alone = 6 (2 of 3 CI-equivalent runs
// failed); at 1.5 × the NIC's p99 leaves the client that share.
// The testbed gives the protected client what its own host would: its JVM
// runs at nice -20, so on these two cores its latency is the broker's and
// not a wait for a CPU behind the backfill's JVMs or whatever else the host
// runs (without it the alone p99 wandered from 120 to 284 ms between runs,
// and the backfill's harm was mostly to the client; at nice -10 a JVM's
// start beside the backfill held at the breaker's floor still set one
// run's p99 at 87 ms, its later windows like alone). Each phase's perf-test is a new JVM, whose
// first send waits for metadata while its schedule runs on; the tool then
// sends the records it owes at once, and that burst (1-1.5 % of a 30 s
// run) decided the p99. A class archive written by a warm-up run
// (-XX:ArchiveClassesAtExit, then -XX:SharedArchiveFile) and C1 only
// (-XX:TieredStopAtLevel=1) shorten the start, and 45 s runs dilute what
// is left of it: with 30 s runs the start beside the defended backfill
// still set the p99 (32 ms against 12 alone, its later windows at 1 ms
// on average), and with 45 s runs a CI run read 15 ms defended against 6
// alone, its first 5 s averaging 3.9 ms and the rest 1.0-1.1. So each
// measured run now follows a 10 s warm-up in the same JVM
// (testdata/WarmThenMeasure.java): the start, the first metadata wait and
// the records owed after it fall in the warm-up, and sluice's histogram
// and the backfill's meter start with the measured run.
// The broker is warmed first (its JIT, the log's first segment): the
// first phase after its start measured 25 ms at the NIC where the later
// ones measured 1-5.
func TestKafkaLatencyDefence(t *testing.T) {
	const (
		perSecond   = 500 // the protected producer's records a second, of 512 B
		seconds     = 45  // each measured run
		warmSeconds = 10  // the warm-up before it, in the same JVM (WarmThenMeasure)
		backfills   = 3
	)
	launcher, err := filepath.Abs("testdata/WarmThenMeasure.java")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	// The backfill writes about 100 MB/s: retention holds each partition to
	// 256 MiB, checked every 5 s and deleted at once, so the run's log
	// stays small. Under the world's 1 GiB retention (checked every 5
	// minutes) a run wrote about 8 GB and the protected producer stalled
	// for 3.7 s near its end, which no level of the breaker could have
	// helped; the dirty page cache at each phase's end is recorded to tell
	// writeback from other stalls.
	w := kafkaWorld(t, harness.Options{Topics: []string{"events", "backfill"},
		BrokerProps: []string{"log.retention.bytes=268435456", "log.retention.check.interval.ms=5000", "log.segment.delete.delay.ms=1000"}})
	config := func(objective string) string {
		return w.WriteConfig("defence", harness.Config{ProduceCapacity: "1GB", FetchCapacity: "1GB",
			Extra: "entities:\n  clients:\n    protected-app: {producer_byte_reservation: 1000000" + objective + "}\n"})
	}
	a, err := w.StartAgent(config(""))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()

	logConf := filepath.Join(w.Dir, "protected-log4j2.properties")
	if err := os.WriteFile(logConf, []byte(harness.ToolLog4j2), 0o644); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(w.Dir, "protected.jsa")
	seq := 0
	// startProtected runs the protected producer; with warm > 0 records,
	// a warm-up of that many first, in the same JVM, whose report ends at
	// measuredRunBegins.
	startProtected := func(records int, jvmOpt string, warm int) *harness.Client {
		seq++
		main, pre := "org.apache.kafka.tools.ProducerPerformance", []string{}
		if warm > 0 {
			main, pre = launcher, []string{strconv.Itoa(warm)}
		}
		argv := harness.JavaArgv(w.Broker.Spec.Libs, logConf, w.Dir, "256m", main, slices.Concat(pre, []string{"--topic", "events",
			"--num-records", strconv.Itoa(records), "--record-size", "512", "--throughput", strconv.Itoa(perSecond),
			"--producer-props", "bootstrap.servers=" + w.Bootstrap(), "client.id=protected-app", "acks=1", "linger.ms=0"})...)
		argv = slices.Concat([]string{"nice", "-n", "-20", argv[0], "-XX:TieredStopAtLevel=1", jvmOpt}, argv[1:])
		c, err := w.StartCommandOut(fmt.Sprintf("protected-%d", seq), argv...)
		if err != nil {
			t.Fatal(err)
		}
		c.ClientID = "protected-app"
		t.Cleanup(c.Stop)
		return c
	}
	// nic is sluice's own view of the protected producer's produce latency
	// over its last 10 s: a diagnostic, and phase 1's sets the objective.
	nic := func() status.LatencyView {
		if s, err := w.Status(); err == nil {
			if e := entityOf(s, maps.Produce, "client", "protected-app"); e != nil {
				for _, l := range e.Latency {
					if l.API == "produce" {
						return l
					}
				}
			}
		}
		return status.LatencyView{}
	}
	// dirty is the host's dirty page cache at the end of each phase (KiB):
	// a diagnostic of the log's writeback.
	dirty := map[string]int{}
	var backfill []*harness.Client
	// measure runs the protected producer for one phase and meters the
	// backfill's produce into the broker meanwhile (its sockets).
	// wholeRun is sluice's p99 at the NIC over each measured run (its
	// histogram scraped at the run's start and end): a diagnostic beside
	// the Java tool's, which tells the broker's share of the tail from the
	// client's own.
	wholeRun := map[string]map[string]float64{}
	measure := func(phase string) (javaPercentiles, float64, status.LatencyView) {
		c := startProtected(perSecond*seconds, "-XX:SharedArchiveFile="+archive, perSecond*warmSeconds)
		// The phase begins with the measured run: sluice's histogram and
		// the backfill's meter start there too.
		for deadline := time.Now().Add((warmSeconds + 60) * time.Second); !strings.Contains(c.Output(), measuredRunBegins); {
			if time.Now().After(deadline) || c.ExitedEarly() {
				t.Fatalf("%s: the protected producer's warm-up did not end:\n%s", phase, c.Output())
			}
			time.Sleep(100 * time.Millisecond) // polling the tool's report, bounded by the deadline
		}
		startBuckets := scrapeNICBuckets(w, "protected-app")
		var rate float64
		if len(backfill) > 0 {
			rates, err := w.MeterClients(0, (seconds-2)*time.Second, backfill...)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rates {
				rate += r
			}
		}
		var m []string
		for deadline := time.Now().Add((seconds + 40) * time.Second); m == nil && time.Now().Before(deadline); {
			if m = protectedSummary.FindStringSubmatch(measuredReport(c.Output())); m == nil {
				time.Sleep(200 * time.Millisecond) // polling the tool's report, bounded by the deadline
			}
		}
		if m == nil {
			t.Fatalf("%s: the protected producer printed no summary:\n%s", phase, c.Output())
		}
		view := nic()
		dirty[phase] = dirtyKiB()
		if endBuckets := scrapeNICBuckets(w, "protected-app"); endBuckets != nil {
			p99, n := nicQuantileMs(startBuckets, endBuckets, 0.99)
			p999, _ := nicQuantileMs(startBuckets, endBuckets, 0.999)
			wholeRun[phase] = map[string]float64{"p99_ms": p99, "p999_ms": p999, "requests": n}
		}
		c.Stop()
		f := func(i int) float64 { v, _ := strconv.ParseFloat(m[i], 64); return v }
		p := javaPercentiles{Records: int(f(1)), AvgMs: f(2), MaxMs: f(3), P50Ms: f(4), P95Ms: f(5), P99Ms: f(6), P999Ms: f(7)}
		t.Logf("%s: backfill %.1f MB/s, sluice's p99 %.1f ms over %d requests\n%s", phase, rate/1e6, view.P99Millis, view.Requests, c.Output())
		return p, rate, view
	}

	// Warm-up, not measured: the broker's produce path and a protected
	// producer that writes the class archive when it exits.
	warmBroker := javaProducer(t, w, "warm-broker", "warm-app", "backfill", -1, "batch.size=1048576", "linger.ms=20")
	warmProtected := startProtected(perSecond*10, "-XX:ArchiveClassesAtExit="+archive, 0)
	for deadline := time.Now().Add(60 * time.Second); !warmProtected.ExitedEarly(); time.Sleep(200 * time.Millisecond) { // polling its exit, bounded
		if time.Now().After(deadline) {
			t.Fatalf("the warm-up producer did not finish:\n%s", warmProtected.Output())
		}
	}
	warmBroker.Stop()
	if _, err := os.Stat(archive); err != nil {
		t.Fatalf("the warm-up producer wrote no class archive: %v", err)
	}

	alone, _, aloneNIC := measure("alone")
	if aloneNIC.Requests < 20 {
		t.Fatalf("sluice measured %d of the protected producer's requests alone: no objective can be set from that", aloneNIC.Requests)
	}
	for i := range backfills {
		backfill = append(backfill, javaProducer(t, w, fmt.Sprintf("backfill-%d", i), "backfill-app", "backfill", -1, "batch.size=1048576", "linger.ms=20"))
	}
	time.Sleep(5 * time.Second) // the backfill's JVMs start and its queue builds: part of the load's schedule
	undefended, backfillUndefended, undefendedNIC := measure("undefended")

	aloneWhole := wholeRun["alone"]["p99_ms"]
	if aloneWhole <= 0 {
		t.Fatalf("sluice's histogram counted none of the protected producer's requests alone (%v): no objective can be set from that", wholeRun["alone"])
	}
	objective := time.Duration(max(1.5*aloneWhole, aloneWhole+1) * float64(time.Millisecond))
	config(fmt.Sprintf(", produce_latency_objective: {p99: %dus}", objective.Microseconds()))
	// The breaker judges protected-app's requests: a producer runs while
	// it trips and settles, and stops when the measured run starts (a gap
	// of a JVM's start, well inside the breaker's 10 s quiet release).
	judged := startProtected(1_000_000_000, "-XX:SharedArchiveFile="+archive, 0)
	if out, err := exec.Command(w.Sluice, "reload", "--socket", w.Socket).CombinedOutput(); err != nil {
		t.Fatalf("sluice reload: %v\n%s", err, out)
	}
	reloaded := time.Now()
	opened, err := w.WaitFor(60*time.Second, func(s *status.Snapshot) bool {
		return len(s.Objectives) == 1 && s.Objectives[0].State != "closed"
	})
	if err != nil {
		t.Fatalf("the objective (%v) never opened its breaker: %v", objective, err)
	}
	openedAfter := time.Since(reloaded)
	// The breaker finds its level: its first probe climbs from where it
	// held toward the full level the trip failed at and misses on the way;
	// later probes stay a step below the level that missed. The measured
	// run starts once that first probe has missed (half open, then open
	// again), so the run measures the defence, not its search: started 10 s
	// after the trip, the first probe fell inside it, and its bad windows
	// set the Java p99 (14 ms against 12 while sluice's last 10 s read 6.7).
	probing := false
	if _, err := w.WaitFor(120*time.Second, func(s *status.Snapshot) bool {
		if len(s.Objectives) != 1 {
			return false
		}
		switch s.Objectives[0].State {
		case "half_open":
			probing = true
		case "open":
			return probing
		}
		return false
	}); err != nil {
		t.Fatalf("the breaker's first probe did not miss within 120 s of the trip (probing %v): %v", probing, err)
	}
	probedAfter := time.Since(reloaded)
	// Then the level must hold: no cut for settleHold, longer than the
	// cool-down after a missed probe (20 s), so it held through a probe
	// too. A CI run started measuring at the first missed probe while the
	// real disk's writeback still made bad windows at that level: the
	// breaker cut 0.53 → 0.17 through the measured run, the NIC's p99 met
	// the objective (5.5 ms of 5.7) and the Java p99 read 10 ms against 8.
	const settleHold, settleAtMost = 25 * time.Second, 150 * time.Second
	level, lastCut, settleFrom := 2.0, time.Now(), time.Now()
	for time.Since(lastCut) < settleHold && time.Since(settleFrom) < settleAtMost {
		if s, err := w.Status(); err == nil && len(s.Objectives) == 1 {
			if l := s.Objectives[0].Level; l < level && level <= 1 { // 2: no reading yet
				lastCut = time.Now()
			}
			level = s.Objectives[0].Level
		}
		time.Sleep(200 * time.Millisecond) // polling the breaker's level, bounded by settleAtMost
	}
	settledAfter := time.Since(reloaded)
	if time.Since(lastCut) < settleHold {
		t.Logf("the breaker's level was still being cut %v after its first probe missed; measured anyway", settleAtMost)
	}
	judged.Stop()
	// Sluice's view through the defended run, a second apart: diagnostics.
	var trace []status.ObjectiveView
	stop, traced := make(chan struct{}), sync.WaitGroup{}
	traced.Add(1)
	go func() {
		defer traced.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if s, err := w.Status(); err == nil && len(s.Objectives) == 1 {
					trace = append(trace, s.Objectives[0])
				}
			}
		}
	}()
	defended, backfillDefended, defendedNIC := measure("defended")
	close(stop)
	traced.Wait()
	early := false
	for _, c := range backfill {
		early = early || c.ExitedEarly()
		c.Stop()
	}
	var levels []float64
	var states []string
	for _, v := range trace {
		levels = append(levels, v.Level)
		if len(states) == 0 || states[len(states)-1] != v.State {
			states = append(states, v.State)
		}
	}
	var transitions []string
	if log, err := os.ReadFile(a.Log); err == nil {
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, "latency objective ") {
				transitions = append(transitions, line)
			}
		}
	}
	checks := map[string]bool{
		"undefended_at_least_2x_alone":     undefended.P99Ms >= 2*alone.P99Ms,
		"defended_at_most_2x_alone":        defended.P99Ms <= 2*alone.P99Ms+toolResolutionMs,
		"defended_at_most_half_undefended": defended.P99Ms <= 0.5*undefended.P99Ms,
		"backfill_moves_while_defended":    backfillDefended >= 0.04*backfillUndefended,
		"backfill_ran_throughout":          !early,
	}
	var failed []string
	for k, ok := range checks {
		if !ok {
			failed = append(failed, k)
		}
	}
	slices.Sort(failed)
	var last any
	if len(trace) > 0 {
		last = trace[len(trace)-1]
	}
	record(t, Result{
		Name: "kafka-latency-defence",
		Pass: len(failed) == 0,
		Measured: map[string]any{"alone": alone, "undefended": undefended, "defended": defended, "failed": failed,
			"backfill_bps":     map[string]float64{"undefended": backfillUndefended, "defended": backfillDefended},
			"objective_p99_ms": float64(objective.Microseconds()) / 1000, "opened_after_reload_s": openedAfter.Seconds(),
			"first_probe_missed_after_reload_s": probedAfter.Seconds(), "level_held_after_reload_s": settledAfter.Seconds(),
			"opened_as": opened.Objectives[0], "sluice_during_defended": map[string]any{"levels": levels, "states": states, "at_end": last},
			"sluice_p99_10s_ms": map[string]float64{"alone": aloneNIC.P99Millis, "undefended": undefendedNIC.P99Millis, "defended": defendedNIC.P99Millis},
			"sluice_whole_run":  wholeRun,
			"transitions":       transitions, "ran_s": time.Since(began).Seconds(), "dirty_kib_at_phase_end": dirty,
			"measured_at": "the protected producer's own percentiles (ProducerPerformance, one 45 s run a phase); the backfill's rate from the broker sockets' tcp_info"},
		Expected: map[string]any{"undefended_p99_min_ms": 2 * alone.P99Ms, "defended_p99_max_ms": min(2*alone.P99Ms+toolResolutionMs, 0.5*undefended.P99Ms),
			"backfill_defended_min_bps": 0.04 * backfillUndefended,
			"objective":                 "max(1.5 × alone, alone + 1 ms) of sluice's p99 at the NIC over the whole alone run"},
	})
}

// measuredRunBegins is the line WarmThenMeasure prints between its
// warm-up's report and the measured run's.
const measuredRunBegins = "measured run begins"

// measuredReport is what follows measuredRunBegins in a WarmThenMeasure
// output ("" before it).
func measuredReport(out string) string {
	if _, after, ok := strings.Cut(out, measuredRunBegins); ok {
		return after
	}
	return ""
}

// dirtyKiB is the host's Dirty page cache (/proc/meminfo), or -1.
func dirtyKiB() int {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Dirty:" {
			if n, err := strconv.Atoi(f[1]); err == nil {
				return n
			}
		}
	}
	return -1
}
