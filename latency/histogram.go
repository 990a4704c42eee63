package latency

import (
	"math"
	"time"
)

// Bucket layout: bucket 0 holds latencies up to MinLatency, bucket i
// (1 ≤ i < NumBuckets-1) those up to MinLatency × 10^(i/BucketsPerDecade),
// and the last one everything above MaxLatency. 20 buckets a decade make
// each bucket 12 % wide, so an interpolated quantile is within about 6 %.
const (
	MinLatency       = 100 * time.Microsecond
	MaxLatency       = 60 * time.Second
	BucketsPerDecade = 20
)

// NumBuckets is the number of buckets: underflow, the log-spaced ones up to
// MaxLatency, and overflow.
var NumBuckets = numBuckets()

func numBuckets() int {
	decades := math.Log10(float64(MaxLatency) / float64(MinLatency))
	return int(math.Ceil(decades*BucketsPerDecade)) + 2
}

// UpperBound is the largest latency bucket i holds (+Inf for the last).
func UpperBound(i int) time.Duration {
	if i >= NumBuckets-1 {
		return time.Duration(math.MaxInt64)
	}
	if i == NumBuckets-2 {
		return MaxLatency
	}
	return time.Duration(float64(MinLatency) * math.Pow(10, float64(i)/BucketsPerDecade))
}

// BucketOf is the bucket a latency falls in. Negative latencies (a clock
// that went back) are refused by the caller; here they count as the
// smallest.
func BucketOf(d time.Duration) int {
	if d <= MinLatency {
		return 0
	}
	if d > MaxLatency {
		return NumBuckets - 1
	}
	i := int(math.Ceil(math.Log10(float64(d)/float64(MinLatency)) * BucketsPerDecade))
	// Rounding at an exact bound: the bucket whose upper bound holds d.
	for i > 0 && UpperBound(i-1) >= d {
		i--
	}
	for i < NumBuckets-2 && UpperBound(i) < d {
		i++
	}
	return i
}

// Window counts latencies per second over the last 60 seconds, in the
// fixed buckets: a slot per second, reused as time moves on, so its size
// is fixed whatever the rate.
type Window struct {
	slots [windowSeconds]slot
}

const windowSeconds = 60

type slot struct {
	second int64 // Unix second the counts belong to
	counts []uint32
	total  uint32
}

// Observe counts one latency seen at now.
func (w *Window) Observe(now time.Time, d time.Duration) {
	s := w.slotAt(now.Unix())
	s.counts[BucketOf(d)]++
	s.total++
}

func (w *Window) slotAt(sec int64) *slot {
	s := &w.slots[((sec%windowSeconds)+windowSeconds)%windowSeconds]
	if s.counts == nil {
		s.counts = make([]uint32, NumBuckets)
	}
	if s.second != sec {
		clear(s.counts)
		s.second, s.total = sec, 0
	}
	return s
}

// Quantile answers the q-quantile (0 < q ≤ 1) of the latencies seen in the
// span (at most a minute) ending at now, and how many there were. The
// answer is interpolated within its bucket in log space; with no samples
// it is 0.
func (w *Window) Quantile(now time.Time, span time.Duration, q float64) (time.Duration, int) {
	counts, total := w.Counts(now, span)
	return quantile(counts, total, q), total
}

// Counts sums the buckets over the span ending at now.
func (w *Window) Counts(now time.Time, span time.Duration) ([]uint64, int) {
	seconds := int64(min(max(span/time.Second, 1), windowSeconds))
	return w.countsFrom(now.Unix()-seconds+1, now.Unix())
}

// QuantileSince is Quantile over the seconds from since's (included, so
// that what came in the rest of that second counts) to now's, at most a
// minute.
func (w *Window) QuantileSince(now, since time.Time, q float64) (time.Duration, int) {
	counts, total := w.countsFrom(max(since.Unix(), now.Unix()-windowSeconds+1), now.Unix())
	return quantile(counts, total, q), total
}

// countsFrom sums the slots of the seconds first to end, both included.
func (w *Window) countsFrom(first, end int64) ([]uint64, int) {
	out := make([]uint64, NumBuckets)
	total := 0
	for i := range w.slots {
		s := &w.slots[i]
		if s.counts == nil || s.second > end || s.second < first {
			continue
		}
		for b, c := range s.counts {
			out[b] += uint64(c)
		}
		total += int(s.total)
	}
	return out, total
}

func quantile(counts []uint64, total int, q float64) time.Duration {
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen float64
	for i, c := range counts {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo := float64(MinLatency) / math.Pow(10, 1.0/BucketsPerDecade)
			if i > 0 {
				lo = float64(UpperBound(i - 1))
			}
			hi := float64(UpperBound(i))
			if i == NumBuckets-1 {
				return MaxLatency // beyond the range: say its edge
			}
			frac := (rank - seen) / float64(c)
			return time.Duration(lo * math.Pow(hi/lo, frac))
		}
		seen += float64(c)
	}
	return UpperBound(NumBuckets - 2)
}
