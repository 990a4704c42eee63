package latency

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The buckets cover 100 µs to 60 s in 12 %-wide steps, every latency lands
// in the one bucket whose bounds hold it, and the bounds only grow.
func TestBuckets(t *testing.T) {
	if UpperBound(0) != MinLatency || UpperBound(NumBuckets-2) != MaxLatency || UpperBound(NumBuckets-1) != time.Duration(math.MaxInt64) {
		t.Fatalf("edges: %v %v %v", UpperBound(0), UpperBound(NumBuckets-2), UpperBound(NumBuckets-1))
	}
	for i := 1; i < NumBuckets-1; i++ {
		lo, hi := UpperBound(i-1), UpperBound(i)
		if hi <= lo {
			t.Fatalf("bound %d (%v) not above %d (%v)", i, hi, i-1, lo)
		}
		if i < NumBuckets-2 {
			if ratio := float64(hi) / float64(lo); math.Abs(ratio-math.Pow(10, 1.0/BucketsPerDecade)) > 1e-4 {
				t.Errorf("bucket %d is %.4f wide", i, ratio)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		d := time.Duration(math.Exp(r.Float64() * math.Log(float64(2*MaxLatency)))) // 1 ns to 120 s, log-uniform
		b := BucketOf(d)
		if d > UpperBound(b) || (b > 0 && d <= UpperBound(b-1)) {
			t.Fatalf("%v in bucket %d (%v, %v]", d, b, UpperBound(b-1), UpperBound(b))
		}
	}
	for _, d := range []time.Duration{-time.Second, 0, MinLatency, MaxLatency, MaxLatency + 1, time.Hour} {
		if b := BucketOf(d); b < 0 || b >= NumBuckets {
			t.Errorf("BucketOf(%v) = %d", d, b)
		}
	}
}

// Quantiles from the buckets are within 6 % of the exact ones, for
// distributions a broker shows (a log-normal body, a bimodal one with a
// slow tenth), and a window forgets what is older than its span.
func TestWindowQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	start := time.Unix(1_800_000_000, 0)
	for _, dist := range []struct {
		name string
		draw func() time.Duration
	}{
		{"lognormal around 5 ms", func() time.Duration { return time.Duration(5e6 * math.Exp(0.6*r.NormFloat64())) }},
		{"bimodal 2 ms / 200 ms", func() time.Duration {
			if r.IntN(10) == 0 {
				return time.Duration(200e6 * (1 + 0.2*r.Float64()))
			}
			return time.Duration(2e6 * (1 + 0.5*r.Float64()))
		}},
	} {
		var w Window
		var all []time.Duration
		for i := range 20000 {
			d := dist.draw()
			w.Observe(start.Add(time.Duration(i)*time.Millisecond/2), d) // 10 s of samples
			all = append(all, d)
		}
		slices.Sort(all)
		now := start.Add(10 * time.Second)
		for _, q := range []float64{0.5, 0.9, 0.99} {
			exact := all[int(math.Ceil(q*float64(len(all))))-1]
			got, n := w.Quantile(now, 11*time.Second, q)
			if n != len(all) || math.Abs(float64(got)/float64(exact)-1) > 0.06 {
				t.Errorf("%s: p%g %v (from %d samples), exact %v", dist.name, q*100, got, n, exact)
			}
		}
	}
	var w Window
	w.Observe(start, time.Second)
	w.Observe(start.Add(30*time.Second), time.Millisecond)
	if _, n := w.Quantile(start.Add(30*time.Second), 10*time.Second, 0.99); n != 1 {
		t.Errorf("a 10 s window 30 s later holds %d samples, want the newer one only", n)
	}
	if _, n := w.Quantile(start.Add(30*time.Second), time.Minute, 0.99); n != 2 {
		t.Errorf("a minute window holds %d samples, want both", n)
	}
	if _, n := w.Quantile(start.Add(100*time.Second), time.Minute, 0.99); n != 0 {
		t.Errorf("100 s later a minute window holds %d samples, want none", n)
	}
	if got, n := (&Window{}).Quantile(start, time.Minute, 0.99); got != 0 || n != 0 {
		t.Errorf("an empty window: %v %d", got, n)
	}
}

// What Observe costs does not grow with what the window already holds.
func BenchmarkObserve(b *testing.B) {
	var w Window
	start := time.Unix(1_800_000_000, 0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w.Observe(start.Add(time.Duration(i)*time.Millisecond), time.Duration(i%1000)*time.Millisecond)
	}
}

func BenchmarkQuantile(b *testing.B) {
	var w Window
	start := time.Unix(1_800_000_000, 0)
	for i := range 60000 {
		w.Observe(start.Add(time.Duration(i)*time.Millisecond), time.Duration(i%1000)*time.Millisecond)
	}
	now := start.Add(time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		w.Quantile(now, 10*time.Second, 0.99)
	}
}

// QuantileSince counts the seconds from since's to now's, both included,
// and no further back than the window keeps.
func TestWindowQuantileSince(t *testing.T) {
	var w Window
	t0 := time.Unix(1_800_000_000, 0)
	for s := range 70 {
		for range s + 1 { // second s holds s+1 requests of s+1 ms
			w.Observe(t0.Add(time.Duration(s)*time.Second+300*time.Millisecond), time.Duration(s+1)*time.Millisecond)
		}
	}
	now := t0.Add(69*time.Second + 900*time.Millisecond)
	for _, c := range []struct {
		since time.Time
		n     int
	}{
		{t0.Add(69*time.Second + 500*time.Millisecond), 70}, // now's second only
		{t0.Add(67 * time.Second), 68 + 69 + 70},
		{t0, 0}, // clamped to the window: seconds 10 to 69
	} {
		_, n := w.QuantileSince(now, c.since, 0.99)
		want := c.n
		if want == 0 {
			for s := 10; s < 70; s++ {
				want += s + 1
			}
		}
		if n != want {
			t.Errorf("since %v: %d requests, want %d", c.since.Sub(t0), n, want)
		}
	}
	if p99, _ := w.QuantileSince(now, t0.Add(69*time.Second), 0.99); p99 < 60*time.Millisecond || p99 > 80*time.Millisecond {
		t.Errorf("p99 of second 69's 70 ms requests: %v", p99)
	}
}
