package sim

import (
	"flag"
	"runtime"
	"sync"
	"testing"
	"time"
)

var (
	seedFlag   = flag.Uint64("seed", 0, "replay one seed: go test ./cluster/sim -run TestReplaySeed -seed N -v")
	eventsFlag = flag.Bool("events", false, "with -seed: log every landing and share change")
	seedsFlag  = flag.Int("seeds", 3000, "seeds TestSeeds runs")
)

// TestReplaySeed replays one seed, the one a failure names.
func TestReplaySeed(t *testing.T) {
	if *seedFlag == 0 {
		t.Skip("no -seed given")
	}
	var r Result
	if *eventsFlag {
		r = Trace(*seedFlag, t.Logf)
	} else {
		r = Run(*seedFlag)
	}
	t.Logf("%+v", r)
	if r.First != "" {
		t.Fatal(r.First)
	}
}

// TestReleaseGateSeeds replays the seeds the 1,000,000-seed release gate
// failed on the issue #49 rules, each of which must now pass every check.
func TestReleaseGateSeeds(t *testing.T) {
	for _, c := range []struct {
		seed uint64
		was  string
	}{
		{203983, "Σ 103.5 > 90 + 7.2 MB/s: a fenced host raised to its floor share, then crashed"},
		{523911, "Σ 106.25 > 85 + 17.5 MB/s: a fenced host raised to its floor share, then crashed"},
		{894405, "Σ 119.8 > 99 + 7.9 MB/s: a fenced host raised to its floor share, then crashed"},
		{811373, "double count: a host on the emptied log followed a junk copy of a dropped report a million rounds ahead"},
		{977601, "Σ over the allowance: a raise on a round with unseen brokers"},
	} {
		if r := Run(c.seed); r.First != "" {
			t.Errorf("seed %d (failed before as %s): %s", c.seed, c.was, r.First)
		}
	}
}

// TestSeeds runs seeds 1..-seeds (CI runs it under -race).
func TestSeeds(t *testing.T) {
	s := runSeeds(1, uint64(*seedsFlag), func(seed uint64, r Result) {
		t.Errorf("seed %d: %s (replay: go test ./cluster/sim -run TestReplaySeed -seed %d -v)", seed, r.First, seed)
	})
	t.Log(s.String())
	if s.failed > 0 {
		t.Fatalf("%d seeds failed", s.failed)
	}
}

// BenchmarkSimulation runs b.N seeds, starting at 1, over every CPU; the
// release gate is
//
//	go test ./cluster/sim -run '^$' -bench BenchmarkSimulation -benchtime 1000000x
func BenchmarkSimulation(b *testing.B) {
	start := time.Now()
	var mu sync.Mutex
	failures := 0
	s := runSeeds(1, uint64(b.N), func(seed uint64, r Result) {
		mu.Lock()
		defer mu.Unlock()
		if failures++; failures <= 20 {
			b.Errorf("seed %d: %s (replay: go test ./cluster/sim -run TestReplaySeed -seed %d -v)", seed, r.First, seed)
		}
	})
	b.ReportMetric(float64(s.violations), "violations")
	b.ReportMetric(float64(s.doubleCounts), "double-counts")
	b.ReportMetric(float64(s.liveFailed), "liveness-failures")
	b.ReportMetric(float64(percentile(s.convergence, 0.99)), "p99-rounds")
	b.Logf("%s in %v", s.String(), time.Since(start).Round(time.Second))
}

// runSeeds runs seeds first..last on every CPU and merges their stats; fail
// is called for each seed that broke a check.
func runSeeds(first, last uint64, fail func(uint64, Result)) *stats {
	workers := runtime.GOMAXPROCS(0)
	parts := make([]stats, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := first + uint64(w); seed <= last; seed += uint64(workers) {
				r := Run(seed)
				parts[w].add(r)
				if r.First != "" {
					fail(seed, r)
				}
			}
		}()
	}
	wg.Wait()
	var s stats
	for i := range parts {
		s.merge(&parts[i])
	}
	return &s
}
