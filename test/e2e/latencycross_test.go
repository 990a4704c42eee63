package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/test/harness"
)

// Cross-direction contention (#51 item 2): a produce latency objective
// hurt by catch-up fetches. The broker's disk (8 MB/s, first come first
// served) takes every Produce's records and, here, every Fetch's reads
// too (harness Options.FetchReadsDisk: a consumer reading history past
// the page cache). Core produces 100 requests a second of 1 kB and
// measures each itself; eight readers of one best-effort client-id fetch
// 16 KiB at a time as fast as the disk reads it, and core's writes wait
// behind their reads. There is no best-effort producer: holding produce
// cannot help (it holds the readers' fetch requests to their floor, which
// leaves them most of the disk).
//
// Judged on core's own latencies and the readers' sockets (tcp_info);
// sluice's status is the trigger and a diagnostic:
//   - core alone with sluice enforcing weights, two runs, and core beside
//     the readers: its p99 beside them at least twice its alone p99 (else
//     the world shows nothing);
//   - with `produce_latency_objective: {p99: alone + 3 reads}` on core
//     (crossReadsMs: an objective a held reader can meet), the objective
//     ends up holding fetch (status trims=fetch, after its produce hold
//     released as ineffective) within crossWithin;
//   - then, after a settle, core's p99 over a fresh run within the
//     defended bound (the objective plus the NIC's accuracy bound), and
//     the readers held (below 90 % of what they fetched free) but moving.
//     A run the machine disturbed (machinewatch_test.go) is run again, as
//     the testbed's are: one in a spell of 20-51 % of the CPUs stolen read
//     19.8 ms against 16.0, a failed probe of the hold inside it.
func TestScenarioLatencyCrossDirection(t *testing.T) {
	const (
		diskRate  = 8e6
		readBytes = 16 << 10
		coreRate  = 100 // requests a second
		coreBytes = 1000
		aloneFor  = 5 * time.Second
		loadedFor = 6 * time.Second
		settleFor = 12 * time.Second // the fetch hold finds its level: part of the schedule, judged below
		defendFor = 12 * time.Second
		readers   = 8
	)
	// crossWithin: three disjoint bad windows to trip (up to 31 s), the
	// produce hold's levels down to the floor (13 cycles), three disjoint
	// windows at the floor (up to 31 s) to prove it ineffective; with room.
	const crossWithin = 120 * time.Second
	// crossReadsMs: the objective's margin over alone, three reads of
	// the disk. Held at level l, the readers keep the disk busy a fraction
	// l of the time, and a core write waits behind k queued reads about
	// l^k of the time: l ≤ 0.2 meets three reads at the p99, well above
	// the floor (0.05), where one or two would leave the hold near it.
	const crossReadsMs = 3 * readBytes / diskRate * 1000
	// heldBelow: the readers count as held below this fraction of their
	// free rate. The first level down is 0.8 of their usage, and for
	// MaxCoolDown (80 s) after the trip no probe climbs past it (a step
	// under the full level that failed), so the measured run, within 30 s
	// of the move, sees at most 0.8; 0.9 leaves the base's second-to-second
	// spread out of the verdict (one run held them at 0.801 × the free
	// rate metered earlier).
	const heldBelow = 0.9
	w := world(t, harness.Options{Topics: []string{"core", "history"}, DiskBytesPerSecond: diskRate, FetchReadsDisk: true, FetchBatchBytes: readBytes,
		ProduceDelay: func() time.Duration { return 2*time.Millisecond + rand.N(2*time.Millisecond) }})
	var clientErrs int64
	watch := watchMachine(t)
	core := newCoreTenant(t, w, coreRate, coreBytes, &clientErrs)
	startCore, stopCore := core.start, core.stop
	var reading []*harness.Client
	stopReaders := func() {
		for _, c := range reading {
			c.Stop()
			clientErrs += c.Errors()
		}
		reading = reading[:0]
	}
	round := 0
	startReaders := func() {
		round++
		for i := range readers {
			reading = append(reading, client(t, w, harness.ClientSpec{Name: fmt.Sprintf("reader-%d-%d", round, i), Lib: "franz", Mode: "consume",
				ClientID: "reader", Topic: "history", Args: []string{"-fetch-max-bytes", fmt.Sprint(readBytes)}}))
		}
		if _, err := w.WaitMoving(1, 20*time.Second, reading...); err != nil {
			t.Fatal(err)
		}
	}
	meterReaders := func(over time.Duration) float64 {
		rates, err := w.MeterClients(1, over, reading...)
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, r := range rates {
			sum += r
		}
		return sum
	}
	config := func(name, objective string) string {
		return w.WriteConfig(name, harness.Config{ProduceCapacity: "40MB", FetchCapacity: "40MB", MinLimit: minLimit, Extra: "entities:\n  clients:\n" +
			"    core: {producer_byte_reservation: 1000000, consumer_byte_reservation: 1000000" + objective + "}\n    reader: {quota_weight: 1}\n"})
	}
	a, err := w.StartAgent(config("weights", ""))
	if err != nil {
		t.Fatal(err)
	}
	var alone []float64
	for range 2 {
		c, out := startCore()
		time.Sleep(aloneFor) // the measured run: a bounded load, not a readiness wait
		alone = append(alone, quantileOf(stopCore(c, out), 0.99))
	}
	startReaders()
	c, out := startCore()
	free := meterReaders(loadedFor)
	contended := quantileOf(stopCore(c, out), 0.99)
	stopReaders()

	aloneP99 := median(alone)
	a, objectiveMs := restartWithObjective(t, w, a, config, aloneP99, crossReadsMs)
	warm, warmOut := startCore()
	startReaders()
	readersStarted := time.Now()
	crossedAfter := -1.0
	var crossed status.ObjectiveView
	if s, err := w.WaitFor(crossWithin, func(s *status.Snapshot) bool {
		return len(s.Objectives) == 1 && s.Objectives[0].Trims == "fetch" && s.Objectives[0].State == "open"
	}); err == nil {
		crossedAfter, crossed = time.Since(readersStarted).Seconds(), s.Objectives[0]
	}
	defended := -1.0
	var held float64
	var setAside []string
	if crossedAfter >= 0 {
		time.Sleep(settleFor) // the hold finds its level: part of the run's schedule, judged below
		for {
			from := time.Now()
			c, out := startCore()
			held = meterReaders(defendFor)
			defended = quantileOf(stopCore(c, out), 0.99)
			d := watch.between(from, time.Now())
			if len(d) == 0 || len(setAside) == maxDisturbedRetries {
				break
			}
			setAside = append(setAside, fmt.Sprintf("p99 %.2f ms, readers %.0f B/s: %v", defended, held, d))
		}
	}
	end, _ := w.Status()
	stopCore(warm, warmOut)
	stopReaders()
	log, _ := os.ReadFile(a.Log)
	var transitions []string
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "latency objective ") {
			transitions = append(transitions, line)
		}
	}

	bound := defendedP99Bound(objectiveMs)
	pass := contended >= 2*aloneP99 && crossedAfter >= 0 && defended >= 0 && defended <= bound &&
		held < heldBelow*free && held > 0 && clientErrs == 0
	measured := map[string]any{
		"alone_p99_ms": alone, "contended_p99_ms": contended, "objective_p99_ms": objectiveMs,
		"crossed_after_s": crossedAfter, "crossed": crossed, "defended_p99_ms": defended,
		"readers_free_bps": free, "readers_held_bps": held, "client_errors": clientErrs,
		"transitions": transitions, "runs_set_aside_as_disturbed": setAside, "machine_disturbances": watch.all(), "measured_at": "core's own latencies (franz-go hooks); the readers' broker sockets (tcp_info bytes_acked)",
	}
	if end != nil {
		measured["objectives_at_end"] = end.Objectives
	}
	record(t, Result{Name: "latency-cross-direction", Pass: pass, Measured: measured,
		Expected: map[string]any{"contended_p99_ms_min": 2 * aloneP99, "crossed_within_s": crossWithin.Seconds(), "defended_p99_ms_max": bound,
			"readers_held_bps": fmt.Sprintf("> 0 and < %.1f × free (%.0f)", heldBelow, heldBelow*free), "client_errors": 0,
			"broker":    "disk 8 MB/s first come first served for writes and fetch reads (16 KiB each), then 2-4 ms for replicas",
			"objective": "core's alone p99 (median of two) + 3 reads (crossReadsMs)"},
	})
}
