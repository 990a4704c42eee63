package agent

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/agent/clusterbudget"
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/maps"
)

// plainWindow is the definition rateWindows keeps cheaply: every sample
// since the id's window started, the window the newest w of them.
type plainWindow struct{ samples []uint64 }

// newest is the sum of the newest min(k, len) samples (uint64 sums, as
// bytes counted by the data path) and their float sum, as the agent added
// them before the ring, and how many they are.
func (p plainWindow) newest(k int) (sum uint64, fsum float64, n int) {
	n = min(k, len(p.samples))
	for _, v := range p.samples[len(p.samples)-n:] {
		sum += v
		fsum += float64(v)
	}
	return sum, fsum, n
}

// TestRateWindowsMatchPlainWindow drives rings of several widths with
// random samples, entities that leave and come back (clear), and restarts
// with another rate_window (a new, empty rateWindows: Reload refuses the
// change), and compares each with the plain definition after every step.
// Sequences run many times longer than each window, with few zero samples,
// so a window one sample too long or too short sums differently.
func TestRateWindowsMatchPlainWindow(t *testing.T) {
	const ids = 5
	for _, widths := range [][]int{{1}, {2}, {3}, {11}, {11, 2, 11}, {1, 11, 3}, {255, 256}, {300}} {
		t.Run(fmt.Sprint(widths), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(widths[0]), uint64(len(widths))))
			for _, w := range widths { // each a restart with this rate_window
				r := newRateWindows(ids, w)
				plain := make([]plainWindow, ids)
				for step := range 4*w + 40 {
					id := rng.IntN(ids)
					switch x := rng.IntN(100); {
					case x < 3: // the entity leaves; its id comes back empty
						r.clear(id)
						plain[id] = plainWindow{}
					default:
						v := uint64(0)
						if x >= 10 {
							v = 1 + rng.Uint64N(1<<40)
						}
						r.push(id, v)
						plain[id].samples = append(plain[id].samples, v)
					}
					for id := range ids {
						checkWindow(t, fmt.Sprintf("w %d step %d id %d", w, step, id), &r, id, w, plain[id])
					}
				}
			}
		})
	}
}

func checkWindow(t *testing.T, at string, r *rateWindows, id, w int, p plainWindow) {
	t.Helper()
	sum, filled := r.window(id)
	want, fwant, n := p.newest(w)
	if sum != want || filled != n {
		t.Fatalf("%s: window %d bytes over %d samples, want %d over %d", at, sum, filled, want, n)
	}
	// Below 2^53 the integer sum is the float sum the rate divided before.
	if float64(sum) != fwant {
		t.Fatalf("%s: window %d bytes reads %v as a float, the samples add to %v", at, sum, float64(sum), fwant)
	}
	for _, k := range []int{1, clusterbudget.UsageIntervals, w - 1, w} {
		if k < 1 {
			continue
		}
		sum, got := r.newest(id, k)
		want, _, n := p.newest(min(k, w))
		if sum != want || got != n {
			t.Fatalf("%s: newest %d: %d bytes over %d samples, want %d over %d", at, k, sum, got, want, n)
		}
	}
}

// A counter reset can make one interval's bytes near 2^64: the sum wraps
// while that sample is in the window, and is exact again once it leaves.
func TestRateWindowsSumRecoversFromWrap(t *testing.T) {
	r := newRateWindows(1, 3)
	for _, v := range []uint64{1<<64 - 5, 10, 20, 30} {
		r.push(0, v)
	}
	if sum, filled := r.window(0); sum != 60 || filled != 3 {
		t.Fatalf("after the huge sample left: %d bytes over %d samples, want 60 over 3", sum, filled)
	}
}

// The cycle's window work allocates nothing.
func TestRateWindowsPushAllocatesNothing(t *testing.T) {
	r := newRateWindows(100, 11)
	if n := testing.AllocsPerRun(10, func() {
		for id := range 100 {
			r.push(id, uint64(id))
			r.window(id)
			r.newest(id, clusterbudget.UsageIntervals)
		}
	}); n != 0 {
		t.Fatalf("%v allocations a cycle", n)
	}
}

// Through the agent: an entity's rate is its newest rate_window intervals'
// bytes over their time (the baseline cycle's zero among them while the
// window fills), and a reload that changes rate_window is refused and
// leaves the window as it was.
func TestAgentRateWindowAveragesNewestIntervals(t *testing.T) {
	base := strings.Replace(baseConfig, "rate_window: 1\n", "rate_window: 3\n", 1)
	r := newRigFrom(t, base)
	id := r.learn(41500, "A", apiVersions()).Fetch
	r.cycle() // baseline: the window's first sample is 0
	seen := []uint64{0}
	check := func(at string) {
		t.Helper()
		n := min(3, len(seen))
		var sum uint64
		for _, v := range seen[len(seen)-n:] {
			sum += v
		}
		want := float64(sum) / float64(n) // one second per interval
		if v := entityView(r.a.Snapshot(), entity.Fetch, "A"); math.Abs(float64(v.Rate)-want) > 1e-9 {
			t.Fatalf("%s: A measured %v B/s, want %v (the newest %d of %v)", at, v.Rate, want, n, seen)
		}
	}
	for i, b := range []uint64{100, 200, 400, 800, 1600} {
		r.dp.add(maps.Fetch, id, b)
		seen = append(seen, b)
		r.cycle()
		check(fmt.Sprintf("interval %d", i+1))
	}
	err := reloadWith(t, r, strings.Replace(base, "rate_window: 3\n", "rate_window: 2\n", 1))
	if err == nil || !strings.Contains(err.Error(), "rate_window") {
		t.Fatalf("a reload changing rate_window: %v, want it refused naming the key", err)
	}
	for i, b := range []uint64{3200, 0, 0} {
		r.dp.add(maps.Fetch, id, b)
		seen = append(seen, b)
		r.cycle()
		check(fmt.Sprintf("interval %d after the refused reload", i+1))
	}
}

// BenchmarkRateWindows is the window's share of a cycle: 10,000 ids of the
// default rate_window, one sample in and the window's sum out per id.
func BenchmarkRateWindows(b *testing.B) {
	const ids = 10_000
	r := newRateWindows(ids, config.Default().RateWindow)
	var v, total uint64
	for b.Loop() {
		for id := range ids {
			v += 4093
			r.push(id, v&0xfffff)
			sum, _ := r.window(id)
			total += sum
		}
	}
	if total == 0 {
		b.Fatal("no bytes in any window")
	}
}
