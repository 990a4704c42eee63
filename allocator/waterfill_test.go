package allocator

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The water-fill is judged by its definition, not by another search: a
// level λ such that every item gets min(cap, λ × weight), the shares add
// up to the amount (or to every cap, the rest returned as left over), and
// the items stay in their order. Inputs with ties, unbounded caps, tiny and
// huge weights, and amounts from nothing to more than every cap. (At
// 8e95dd8 the new search was also checked bit for bit against the one it
// replaced on these inputs; that copy is not kept.)
func TestWaterFillMeetsItsDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	a := &Allocator{}
	for trial := range 20000 {
		n := 1 + rng.IntN(60)
		if trial%100 == 0 {
			n = 1 + rng.IntN(5000)
		}
		items := make([]fillItem, n)
		var total float64
		unbounded := false
		for i := range items {
			c := []float64{1, 2, 1e6, 3.5e6, math.Inf(1), rng.Float64() * 1e6, float64(rng.IntN(4) + 1)}[rng.IntN(7)]
			w := []float64{0.1, 1, 2, 5, 1e-9, rng.Float64()*10 + 1e-6}[rng.IntN(6)]
			items[i] = fillItem{index: int32(i), cap: c, weight: w}
			if math.IsInf(c, 1) {
				unbounded = true
			} else {
				total += c
			}
		}
		amount := []float64{0, -1, total, total * 1.5, total * rng.Float64(), rng.Float64() * 1e3, 1e300}[rng.IntN(7)]
		left := a.waterFill(items, amount)

		// λ: the highest share/weight among items that are not full.
		level, partial := 0.0, false
		var given float64
		for i, f := range items {
			if f.index != int32(i) {
				t.Fatalf("trial %d: items reordered", trial)
			}
			if f.share < 0 || f.share > f.cap {
				t.Fatalf("trial %d: item %d share %v outside [0, cap %v]", trial, i, f.share, f.cap)
			}
			given += f.share
			if f.share < f.cap {
				level, partial = max(level, f.share/f.weight), true
			}
		}
		want := max(0, amount)
		if !unbounded {
			want = min(want, total)
		}
		if tol := 1e-9 * max(1, want); math.Abs(given-want) > tol && !(math.IsInf(want, 1) || want > 1e200) {
			t.Fatalf("trial %d: shares add up to %v, want %v", trial, given, want)
		}
		if amount <= 0 && left != 0 {
			t.Fatalf("trial %d: nothing to give, %v left", trial, left)
		}
		if unbounded && left != 0 {
			t.Fatalf("trial %d: an unbounded item leaves nothing over, %v left", trial, left)
		}
		if !partial {
			continue // every item full: no level to judge against
		}
		for i, f := range items {
			should := min(f.cap, level*f.weight)
			if math.Abs(f.share-should) > 1e-9*max(1, should) {
				t.Fatalf("trial %d: item %d (cap %v weight %v) share %v, the level %v gives %v", trial, i, f.cap, f.weight, f.share, level, should)
			}
		}
	}
}
