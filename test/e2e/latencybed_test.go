package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/test/harness"
)

var latencyCDF = flag.String("latency-cdf", "", "the latency testbed: write each run's client-measured latencies here (JSON), for docs/latency.png")

// The latency testbed (#34 item 4). The broker has a disk: one writer at
// 8 MB/s takes every Produce's records in turn (harness
// Options.DiskBytesPerSecond), then waits 2-4 ms for its replicas
// (acks=all). The core tenant produces 100 requests a second of 1 kB and
// measures each request's latency itself (franz-go hooks); the backfill
// tenant produces from eight connections as fast as the broker takes it
// (16 kB batches, five in flight each) and reads at 8 MB/s. The backfill
// fills the disk's queue, and core's requests wait in it: inside the
// broker, where the NIC sees the wait, and where the NIC's capacity (40
// MB/s here) is not the limit, so weights alone do not help.
//
// The reader asks for 256 KiB a fetch: kfake builds a fetch's synthetic
// batches inside its one request loop, and a 4 MiB response held every
// other request for tens of milliseconds (core's p99 stayed at 33-66 ms
// with the backfill's producers held to the floor), a stall of the fake
// broker's, not a resource any quota governs.
//
// A second best-effort tenant, backfill2 (four producers, quota_weight 3
// against backfill's 1), shares the disk with it.
//
// Runs, each judged on the client's own figures and the broker sockets'
// tcp_info (sluice's status only as the trigger and as diagnostics); the
// bounds and why are in latencybed_gates_test.go:
//   - core alone, without sluice and with sluice enforcing, three runs
//     each: the pooled p99s (1,800 requests each) within a fixed 2 ms;
//   - core + backfills without sluice: core's p99 at least twice its alone
//     value (else the testbed shows nothing);
//   - core + backfills, sluice enforcing weights only: the tenants' rates,
//     the reference for their shares;
//   - core + backfills with `produce_latency_objective: {p99: alone + 4.1
//     ms}` on core (floorCostMs: an objective the floor can meet): the
//     breaker opens 19-31 s after the backfills start; a 10 s window of
//     core's requests is within the defended bound (the objective plus the
//     NIC's accuracy bound) within 36 s of the opening, and core's p99
//     from that window to the run's end within it too; measured from 18 s
//     after the opening for 18 s, core's p99 within that bound, backfill at
//     least its weighted share of the floor's cap, backfill2 over backfill
//     at least halfway to what the weights promise;
//   - core stops with the backfills running: their rate back to 85 % of
//     what they moved with weights only within 24 s (the quiet release);
//   - core runs again until the breaker opens again, then the backfills
//     stop: the breaker closes within 90 s (the recovered release:
//     releaseRecoveredWithin), and the backfills, started again at once,
//     move at least 85 % of what they moved with weights only;
//   - the breaker's log lines within what its cool-downs allow.
func TestScenarioLatencyTestbed(t *testing.T) {
	const (
		diskRate   = 8e6
		coreRate   = 100 // requests a second
		coreBytes  = 1000
		aloneFor   = 6 * time.Second
		loadedFor  = 8 * time.Second
		warmFor    = 5 * time.Second  // the backfill's queue builds
		settleFor  = 18 * time.Second // defendWithin: the defended run starts when the breaker has had its time to descend
		defendedOn = 18 * time.Second
		backfills  = 8
		backfills2 = 4
		weight1    = 1 // backfill's quota_weight
		weight2    = 3 // backfill2's
	)
	w := world(t, harness.Options{Topics: []string{"core", "backfill", "backfill2"}, DiskBytesPerSecond: diskRate,
		ProduceDelay: func() time.Duration { return 2*time.Millisecond + rand.N(2*time.Millisecond) }})
	var clientErrs int64
	watch := watchMachine(t)
	core := newCoreTenant(t, w, coreRate, coreBytes, &clientErrs)
	startCore, stopCoreInOrder, stopCore := core.start, core.stopInOrder, core.stop
	// A run the machine disturbed (machinewatch_test.go) is run again,
	// retriesLeft times in the whole test; what was set aside is recorded.
	retriesLeft, setAside := maxDisturbedRetries, []string{}
	disturbed := func(phase string, from time.Time) bool {
		d := watch.between(from, time.Now())
		if len(d) == 0 || retriesLeft == 0 {
			return false
		}
		retriesLeft--
		setAside = append(setAside, fmt.Sprintf("%s: %v", phase, d))
		return true
	}
	stolen := map[string][]float64{} // a diagnostic: the hypervisor's share of the CPUs in each run kept
	runCore := func(phase string, d time.Duration) []float64 {
		for {
			from := time.Now()
			c, out := startCore()
			time.Sleep(d) // the measured run: a bounded load, not a readiness wait
			if ms := stopCore(c, out); !disturbed(phase, from) {
				stolen[phase] = append(stolen[phase], watch.stolen(from, time.Now()))
				return ms
			}
		}
	}
	// Two best-effort tenants of different weights: backfill (weight 1,
	// eight producers and a reader) and backfill2 (weight 3, four
	// producers). Both ask for more than the disk takes, so while the
	// breaker holds them both are held, and the trim shares its cap by
	// weight.
	var backfill, backfill2 []*harness.Client
	var backfillReader *harness.Client
	startBackfill := func() {
		for i := 0; i < backfills; i++ {
			backfill = append(backfill, client(t, w, harness.ClientSpec{Name: fmt.Sprintf("backfill-%d", i), Lib: "franz", Mode: "produce",
				ClientID: "backfill", Topic: "backfill", Args: []string{"-value-bytes", "4000", "-batch-max-bytes", "16384", "-max-inflight", "5"}}))
		}
		for i := 0; i < backfills2; i++ {
			backfill2 = append(backfill2, client(t, w, harness.ClientSpec{Name: fmt.Sprintf("backfill2-%d", i), Lib: "franz", Mode: "produce",
				ClientID: "backfill2", Topic: "backfill2", Args: []string{"-value-bytes", "4000", "-batch-max-bytes", "16384", "-max-inflight", "5"}}))
		}
		backfillReader = client(t, w, harness.ClientSpec{Name: "backfill-reader", Lib: "franz", Mode: "consume",
			ClientID: "backfill", Topic: "backfill", Rate: 8e6, Args: []string{"-fetch-max-bytes", "262144"}})
	}
	stopBackfill := func() {
		for _, c := range append(append(backfill, backfill2...), backfillReader) {
			if c == nil { // stopped already
				continue
			}
			c.Stop()
			clientErrs += c.Errors()
		}
		backfill, backfill2, backfillReader = nil, nil, nil
	}
	// meterBackfill is each best-effort tenant's produce rate into the
	// broker over `over` (its sockets' tcp_info).
	meterBackfill := func(over time.Duration) (rate1, rate2 float64) {
		rates, err := w.MeterClients(0, over, append(slices.Clone(backfill), backfill2...)...)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rates {
			if i < len(backfill) {
				rate1 += r
			} else {
				rate2 += r
			}
		}
		return rate1, rate2
	}
	// A loaded run: core for `over` while the backfill runs, and the
	// best-effort tenants' rates meanwhile.
	loaded := func(over time.Duration) ([]float64, float64, float64) {
		c, out := startCore()
		rate1, rate2 := meterBackfill(over)
		return stopCore(c, out), rate1, rate2
	}

	runs := map[string][]float64{} // the CDFs: what docs/latency.png draws
	config := testbedConfig(w, weight1, weight2)
	// Core alone, without sluice and with sluice enforcing, in turns (the
	// agent started and stopped around each run with it): a slow spell of
	// the machine lasting tens of seconds falls on both sides, not on one.
	// Three runs without, then three with, failed a run so: 7.9-8.6 ms
	// with against 5.4-5.7 without, nothing disturbed, while twenty
	// enforcing runs beside other runs without read within 1 ms of them.
	var aloneWithout, aloneWith []float64
	var pooledWithout, pooledWith []float64
	for range 3 {
		ms := runCore("core alone, no sluice", aloneFor)
		runs["core alone, no sluice"] = ms
		aloneWithout = append(aloneWithout, quantileOf(ms, 0.99))
		pooledWithout = append(pooledWithout, ms...)
		enforcing, err := w.StartAgent(config("weights", ""))
		if err != nil {
			t.Fatal(err)
		}
		ms = runCore("core alone, sluice enforcing", aloneFor)
		runs["core alone, sluice enforcing"] = ms
		aloneWith = append(aloneWith, quantileOf(ms, 0.99))
		pooledWith = append(pooledWith, ms...)
		if err := enforcing.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	startBackfill()
	time.Sleep(warmFor) // the queue builds: part of the load's schedule
	runs["core + backfill, no sluice"], _, _ = loaded(loadedFor)
	stopBackfill()

	a, err := w.StartAgent(config("weights", ""))
	if err != nil {
		t.Fatal(err)
	}
	startBackfill()
	time.Sleep(warmFor)
	var weighted1, weighted2 float64 // the tenants' rates with sluice enforcing weights only: the disk's, shared first come first served
	runs["core + backfill, sluice weights only"], weighted1, weighted2 = loaded(loadedFor)
	stopBackfill()

	alone := median(aloneWithout)
	a, objectiveMs := restartWithObjective(t, w, a, config, alone, floorCostMs)
	// The warm core runs from before the backfill starts until the
	// defended run ends: its requests, put back on a clock, are what
	// time-to-defend is judged on.
	warm, warmOut := startCore()
	warmStarted := time.Now()
	startBackfill()
	backfillStarted := time.Now()
	opened, err := w.WaitFor(60*time.Second, func(s *status.Snapshot) bool {
		return len(s.Objectives) == 1 && s.Objectives[0].State != "closed"
	})
	if err != nil {
		t.Fatalf("the objective never opened its breaker: %v", err)
	}
	openedAfter := time.Since(backfillStarted)
	time.Sleep(settleFor) // the breaker finds its level: part of the run's schedule, judged below
	var defended1, defended2 float64
	for {
		from := time.Now()
		runs["core + backfill, sluice objective"], defended1, defended2 = loaded(defendedOn)
		if !disturbed("core + backfill, sluice objective", from) {
			break
		}
	}
	held, _ := w.Status()                             // sluice's own view of the held tenants: a diagnostic
	datapathAtDefendedEnd := datapathLatencyCounts(w) // a diagnostic: why too few requests were judged, if they were
	warmStopping := time.Now()
	warmLatencies := stopCoreInOrder(warm, warmOut)
	coreStopped := time.Now()
	// Release: the protected tenant is idle, the backfill still runs. Its
	// rate, a second at a time, must come back to what it was with weights
	// only.
	releasedAfter := -1.0
	var releaseRates []float64
	for time.Since(coreStopped) < releaseWithin+5*time.Second {
		r1, r2 := meterBackfill(time.Second)
		releaseRates = append(releaseRates, r1+r2)
		if r1+r2 >= releasedShare*(weighted1+weighted2) {
			releasedAfter = time.Since(coreStopped).Seconds()
			break
		}
	}
	end, _ := w.Status()
	log, _ := os.ReadFile(a.Log)
	var transitions []string
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "latency objective ") {
			transitions = append(transitions, line)
		}
	}
	openFor := time.Since(backfillStarted).Seconds() - openedAfter.Seconds()
	// Release after the load leaves: core runs again, the breaker opens
	// again on the backfill, and the backfill stops. With nothing left to
	// cut, the breaker probes after its cool-down, a step under the level
	// that failed until MaxCoolDown after the trip, and closes at full
	// level (releaseRecoveredWithin). Sluice's status is the trigger; the
	// judge is the backfill itself, started again at once: released, it
	// moves what it moved with weights only (the breaker needs Trip
	// disjoint windows, 19 s or more, to hold it again).
	var recovered struct {
		reopenedAfter, releasedAfter, rate float64
		why                                string
	}
	recovered.reopenedAfter, recovered.releasedAfter = -1, -1
	again, againOut := startCore()
	coreAgain := time.Now()
	if _, err := w.WaitFor(60*time.Second, func(s *status.Snapshot) bool {
		return len(s.Objectives) == 1 && s.Objectives[0].State == "open"
	}); err == nil {
		recovered.reopenedAfter = time.Since(coreAgain).Seconds()
		stopBackfill()
		backfillLeft := time.Now()
		if s, err := w.WaitFor(releaseRecoveredWithin+10*time.Second, func(s *status.Snapshot) bool {
			return len(s.Objectives) == 1 && s.Objectives[0].State == "closed"
		}); err == nil {
			recovered.releasedAfter = time.Since(backfillLeft).Seconds()
			recovered.why = s.Objectives[0].Why
			startBackfill()
			if _, err := w.WaitMoving(0, 10*time.Second, append(slices.Clone(backfill), backfill2...)...); err != nil {
				t.Fatal(err)
			}
			r1, r2 := meterBackfill(2 * time.Second)
			recovered.rate = r1 + r2
		}
	}
	stopCore(again, againOut)
	stopBackfill()

	// Time to defend, on the warm core's own requests: the first 10 s
	// window after the breaker opened whose p99 is within the defended
	// bound, counted from the backfill's start.
	interval := float64(time.Second/time.Millisecond) / coreRate
	// The clock: ms since the backfill started; the warm core's last
	// request completed when it was told to stop (flushing what it had in
	// flight, a few ms).
	ends := requestEnds(warmLatencies, interval)
	drift := anchorAtEnd(ends, float64(warmStopping.Sub(backfillStarted).Microseconds())/1000) + float64(backfillStarted.Sub(warmStarted).Microseconds())/1000
	defendedBound := defendedP99Bound(objectiveMs)
	// The stream is judged without what completed in a moment the machine
	// itself stalled (machinewatch_test.go), as long as that leaves most
	// of it: more than half. A fifth was the bound until a CI-equivalent
	// run (494d547) set aside 31 %: the hypervisor took 20-51 % of the
	// CPUs for minutes on end while the test's own load left 60-70 % of
	// them idle (vmstat), and every gate judged on the rest passed.
	judgedEnds, judgedLatencies, stalled := undisturbed(ends, warmLatencies, backfillStarted, watch.between(warmStarted, warmStopping))
	underAt := firstWindowUnder(judgedEnds, judgedLatencies, float64(openedAfter.Milliseconds()), 10000, defendedBound)
	defendedAfter := -1.0
	if underAt >= 0 {
		defendedAfter = underAt / 1000
	}
	wholeRun := slices.Clone(warmLatencies)
	slices.Sort(wholeRun)
	// Once defended, core stays defended: its requests from the first good
	// window to the run's end (the settle the defended run leaves out
	// included, probes and all).
	var sinceDefended []float64
	for i, e := range judgedEnds {
		if underAt >= 0 && e > underAt {
			sinceDefended = append(sinceDefended, judgedLatencies[i])
		}
	}
	slices.Sort(sinceDefended)

	p99 := func(name string) float64 { return quantileOf(runs[name], 0.99) }
	contended, defended := p99("core + backfill, no sluice"), p99("core + backfill, sluice objective")
	slices.Sort(pooledWithout)
	slices.Sort(pooledWith)
	pooledP99Without, pooledP99With := quantileOf(pooledWithout, 0.99), quantileOf(pooledWith, 0.99)
	defendedTotal, weightedTotal := defended1+defended2, weighted1+weighted2
	ratio := defended2 / max(1, defended1)
	promisedRatio := weightedRatio(defendedTotal, produceMinLimit, weight1, weight2)
	budget := transitionBudget(openFor)
	checks := map[string]bool{
		"contended_at_least_2x_alone":   contended >= 2*alone,
		"defended_at_most_bound":        defended <= defendedBound,
		"stays_defended":                len(sinceDefended) > 0 && quantileOf(sinceDefended, 0.99) <= defendedBound,
		"judged_most_of_the_stream":     stalled*2 < len(warmLatencies),
		"alone_with_sluice_within_tol":  math.Abs(pooledP99With-pooledP99Without) <= aloneToleranceMs,
		"no_client_errors":              clientErrs == 0,
		"opened_within_trip_bounds":     openedAfter >= openAtLeast && openedAfter <= openAtMost,
		"defended_within_bound":         defendedAfter >= 0 && defendedAfter <= openedAfter.Seconds()+defendWithin.Seconds(),
		"backfill_floor_while_defended": defended1 >= floorShare*floorShareOf(weightedTotal, weight1, weight1+weight2, 2) && defendedTotal >= floorShare*latencyFloor*weightedTotal,
		"heavier_tenant_gets_more":      ratio >= 1+(promisedRatio-1)/2,
		"released_when_core_idle":       releasedAfter >= 0 && releasedAfter <= releaseWithin.Seconds(),
		"transitions_within_budget":     len(transitions) <= budget,
		"released_after_backfill_left":  recovered.releasedAfter >= 0 && recovered.releasedAfter <= releaseRecoveredWithin.Seconds(),
		"backfill_free_once_released":   recovered.rate >= releasedShare*weightedTotal,
	}
	pass := true
	var failed []string
	for k, ok := range checks {
		if !ok {
			pass = false
			failed = append(failed, k)
		}
	}
	slices.Sort(failed)
	table := map[string]any{}
	for name, ms := range runs {
		table[name] = map[string]any{"p50_ms": quantileOf(ms, 0.5), "p99_ms": quantileOf(ms, 0.99), "p999_ms": quantileOf(ms, 0.999), "requests": len(ms)}
	}
	table["core alone, no sluice (3 runs pooled)"] = map[string]any{"p50_ms": quantileOf(pooledWithout, 0.5), "p99_ms": pooledP99Without, "p999_ms": quantileOf(pooledWithout, 0.999), "requests": len(pooledWithout)}
	table["core alone, sluice enforcing (3 runs pooled)"] = map[string]any{"p50_ms": quantileOf(pooledWith, 0.5), "p99_ms": pooledP99With, "p999_ms": quantileOf(pooledWith, 0.999), "requests": len(pooledWith)}
	table["core from the backfill's start to the defended run's end"] = map[string]any{"p50_ms": quantileOf(wholeRun, 0.5), "p99_ms": quantileOf(wholeRun, 0.99), "p999_ms": quantileOf(wholeRun, 0.999), "requests": len(wholeRun)}
	table["core from the first defended window to the defended run's end"] = map[string]any{"p50_ms": quantileOf(sinceDefended, 0.5), "p99_ms": quantileOf(sinceDefended, 0.99), "p999_ms": quantileOf(sinceDefended, 0.999), "requests": len(sinceDefended)}
	var heldView []any
	if held != nil {
		for _, e := range held.Directions[0].Entities {
			if e.Name == "backfill" || e.Name == "backfill2" {
				heldView = append(heldView, map[string]any{"name": e.Name, "rate": e.Rate, "weight": e.Weight, "demand": e.Demand,
					"dynamic_limit": e.DynamicLimit, "held_by": e.HeldBy})
			}
		}
	}
	var objectiveView any
	if end != nil && len(end.Objectives) == 1 {
		objectiveView = end.Objectives[0]
	}
	record(t, Result{
		Name: "latency-testbed",
		Pass: pass,
		Measured: map[string]any{"runs": table, "alone_p99_ms_without": aloneWithout, "alone_p99_ms_with": aloneWith,
			"alone_pooled_p99_shift_ms": pooledP99With - pooledP99Without,
			"objective_p99_ms":          objectiveMs, "defended_p99_over_objective_ms": defended - objectiveMs, "objective_met_by_client": defended <= objectiveMs,
			"opened_after_backfill_s": openedAfter.Seconds(), "defended_after_backfill_s": defendedAfter,
			"reconstructed_clock_drift_ms":      drift,
			"backfill_produce_bps_weights_only": weighted1, "backfill2_produce_bps_weights_only": weighted2,
			"backfill_produce_bps_defended": defended1, "backfill2_produce_bps_defended": defended2,
			"backfill_share_defended": defended1 / max(1, weighted1), "best_effort_share_defended": defendedTotal / max(1, weightedTotal),
			"backfill2_over_backfill_defended": ratio, "released_after_core_stopped_s": releasedAfter, "best_effort_bps_after_core_stopped": releaseRates,
			"reopened_after_core_restarted_s": recovered.reopenedAfter, "released_after_backfill_stopped_s": recovered.releasedAfter,
			"best_effort_bps_restarted_once_released": recovered.rate, "release_after_backfill_left_why": recovered.why,
			"held_at_defended_end": heldView, "datapath_latency_at_defended_end": datapathAtDefendedEnd, "opened_state": opened.Objectives[0].State, "objective_at_end": objectiveView,
			"transitions": transitions, "transition_count": len(transitions), "client_errors": clientErrs, "failed": failed,
			"machine_disturbances": watch.all(), "runs_set_aside_as_disturbed": setAside, "stream_requests_set_aside_as_disturbed": stalled, "cpu_share_stolen_by_run": stolen,
			"measured_at": "the core client's own per-request ReadWait + TimeToRead (franz-go hooks); the best-effort tenants' rates from the broker sockets' tcp_info"},
		Expected: map[string]any{"contended_p99_min_ms": 2 * alone, "defended_p99_max_ms": defendedBound,
			"alone_with_sluice_pooled_p99_ms": [2]float64{pooledP99Without - aloneToleranceMs, pooledP99Without + aloneToleranceMs},
			"opened_after_backfill_s":         [2]float64{openAtLeast.Seconds(), openAtMost.Seconds()},
			"defended_after_backfill_max_s":   openedAfter.Seconds() + defendWithin.Seconds(),
			"backfill_produce_bps_min":        floorShare * floorShareOf(weightedTotal, weight1, weight1+weight2, 2), "best_effort_produce_bps_min": floorShare * latencyFloor * weightedTotal,
			"backfill2_over_backfill_min": 1 + (promisedRatio-1)/2, "backfill2_over_backfill_promised": promisedRatio,
			"released_after_core_stopped_max_s": releaseWithin.Seconds(), "released_best_effort_bps_min": releasedShare * weightedTotal,
			"released_after_backfill_stopped_max_s": releaseRecoveredWithin.Seconds(),
			"stream_requests_set_aside_below":       len(warmLatencies) / 2,
			"transitions_max":                       budget,
			"broker":                                "disk 8 MB/s first come first served, then 2-4 ms for replicas", "objective": "core's alone p99 (median of three) + 2 backfill batches on the disk (floorCostMs)"},
	})
	if *latencyCDF != "" {
		data, err := json.MarshalIndent(map[string]any{"runs": runs, "alone_p99_ms": alone, "objective_p99_ms": objectiveMs,
			"defence_in_completion_order": map[string]any{"latencies_ms": warmLatencies, "ends_ms_since_backfill_started": ends, "opened_ms": openedAfter.Milliseconds()}}, "", " ")
		if err == nil {
			err = os.WriteFile(*latencyCDF, data, 0o644)
		}
		if err != nil {
			t.Errorf("write %s: %v", *latencyCDF, err)
		}
	}
}

// quantileOf is the q-quantile of sorted values (0 with none).
// testbedConfig writes the testbed's config: core with a reservation (and
// objective, a YAML fragment such as ", produce_latency_objective: {...}"),
// backfill and backfill2 with their weights.
func testbedConfig(w *harness.World, weight1, weight2 int) func(name, objective string) string {
	return func(name, objective string) string {
		core := "{producer_byte_reservation: 1000000" + objective + "}"
		return w.WriteConfig(name, harness.Config{ProduceCapacity: "40MB", FetchCapacity: "40MB", MinLimit: minLimit, Extra: "entities:\n  clients:\n    core: " + core +
			fmt.Sprintf("\n    backfill: {quota_weight: %d}\n    backfill2: {quota_weight: %d}\n", weight1, weight2)})
	}
}

func quantileOf(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, max(0, int(math.Ceil(q*float64(len(sorted))))-1))]
}
