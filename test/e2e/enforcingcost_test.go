package e2e

import (
	"flag"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/test/harness"
)

var baselineSluice = flag.String("baseline-sluice", "", "BenchmarkEnforcingCost: another build's sluice binary, enforcing as a third side of each turn (a change's before and after)")

// BenchmarkEnforcingCost measures what enforcing alone costs a tenant
// nothing contends with: the latency testbed's core (100 produce requests
// a second of 1000 B; the franz-go client's own per-request latencies) for
// 6 s without sluice, then 6 s with sluice enforcing the testbed's
// weights-only config (the agent started before its run and stopped after
// it), b.N turns (-benchtime 10x: ten), the sides' order rotating from
// turn to turn. Side by side in one run: a slow spell of the machine falls
// on every side. Reported: the medians over turns of each side's p99 and
// p99.9 minus the run without's (p99-shift-ms, p999-shift-ms), and each
// side's pooled p99. With -baseline-sluice, another build enforces as a
// third side (baseline-…). As root:
//
//	cd test/e2e && go test -c -o /tmp/e2e.test . && /tmp/e2e.test \
//	  -test.run '^$' -test.bench EnforcingCost -test.benchtime 10x
func BenchmarkEnforcingCost(b *testing.B) {
	w := world(b, harness.Options{Topics: []string{"core"}, DiskBytesPerSecond: 8e6,
		ProduceDelay: func() time.Duration { return 2*time.Millisecond + rand.N(2*time.Millisecond) }})
	var clientErrs int64
	core := newCoreTenant(b, w, 100, 1000, &clientErrs)
	watch := watchMachine(b)
	cfg := testbedConfig(w, 1, 3)("weights", "")
	sides := []string{"without", "enforcing"}
	binary := map[string]string{"enforcing": w.Sluice}
	if *baselineSluice != "" {
		sides = append(sides, "baseline")
		binary["baseline"] = *baselineSluice
	}
	run := func(side string) (p99, p999 float64, ms []float64) {
		if side != "without" {
			w.Sluice = binary[side]
			a, err := w.StartAgent(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := a.Stop(); err != nil {
					b.Fatal(err)
				}
			}()
		}
		from := time.Now()
		c, out := core.start()
		time.Sleep(6 * time.Second) // the measured run: a bounded load, not a readiness wait
		ms = core.stop(c, out)
		sorted := slices.Sorted(slices.Values(ms))
		b.Logf("%-9s p50 %5.2f p99 %5.2f p99.9 %5.2f ms, %d requests, %.1f %% of the CPUs stolen", side,
			quantileOf(sorted, 0.5), quantileOf(sorted, 0.99), quantileOf(sorted, 0.999), len(ms), 100*watch.stolen(from, time.Now()))
		return quantileOf(sorted, 0.99), quantileOf(sorted, 0.999), ms
	}
	shift99, shift999, pooled := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	turn := 0
	for b.Loop() {
		p99, p999 := map[string]float64{}, map[string]float64{}
		for i := range sides {
			side := sides[(turn+i)%len(sides)]
			var ms []float64
			p99[side], p999[side], ms = run(side)
			pooled[side] = append(pooled[side], ms...)
		}
		for _, side := range sides[1:] {
			shift99[side] = append(shift99[side], p99[side]-p99["without"])
			shift999[side] = append(shift999[side], p999[side]-p999["without"])
		}
		turn++
	}
	if clientErrs != 0 {
		b.Fatalf("%d client errors", clientErrs)
	}
	for _, side := range sides {
		slices.Sort(pooled[side])
		b.ReportMetric(quantileOf(pooled[side], 0.99), side+"-pooled-p99-ms")
	}
	for _, side := range sides[1:] {
		prefix := ""
		if side == "baseline" {
			prefix = "baseline-"
		}
		b.Logf("%s − without, per turn: p99 %.2f, p99.9 %.2f ms", side, shift99[side], shift999[side])
		b.ReportMetric(midpoint(shift99[side]), prefix+"p99-shift-ms")
		b.ReportMetric(midpoint(shift999[side]), prefix+"p999-shift-ms")
	}
	b.ReportMetric(0, "ns/op") // a turn's wall time says nothing
}

// midpoint is the median of an even count too (the mean of the two middle
// values): median takes the upper one and quantileOf(0.5) the lower, and
// for ten turns either alone reads one turn, not the middle of the ten.
func midpoint(v []float64) float64 {
	return (median(v) + quantileOf(slices.Sorted(slices.Values(v)), 0.5)) / 2
}
