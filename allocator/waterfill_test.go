package allocator

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The water-fill decides each share from the item's own level against the
// highest full level, leaving the items in their order. It must give
// every share and the amount left bit for bit as the search that reordered
// the items themselves and read the shares off its two groups, kept below
// as the reference: inputs with ties, unbounded caps, tiny and huge
// weights, and amounts from nothing to more than every cap.
func TestWaterFillMatchesReorderingSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	a := &Allocator{}
	for trial := range 20000 {
		n := 1 + rng.IntN(60)
		if trial%100 == 0 {
			n = 1 + rng.IntN(5000)
		}
		items := make([]fillItem, n)
		var total float64
		for i := range items {
			c := []float64{1, 2, 1e6, 3.5e6, math.Inf(1), rng.Float64() * 1e6, float64(rng.IntN(4) + 1)}[rng.IntN(7)]
			w := []float64{0.1, 1, 2, 5, 1e-9, rng.Float64()*10 + 1e-6}[rng.IntN(6)]
			items[i] = fillItem{index: int32(i), cap: c, weight: w}
			if !math.IsInf(c, 1) {
				total += c
			}
		}
		amount := []float64{0, -1, total, total * 1.5, total * rng.Float64(), rng.Float64() * 1e3, 1e300}[rng.IntN(7)]
		ref := append([]fillItem(nil), items...)
		refLeft := waterFillSorted(ref, amount)
		byIndex := make([]float64, n)
		for _, f := range ref {
			byIndex[f.index] = f.share
		}
		left := a.waterFill(items, amount)
		if math.Float64bits(left) != math.Float64bits(refLeft) {
			t.Fatalf("trial %d: left %v, reference %v", trial, left, refLeft)
		}
		for i, f := range items {
			if f.index != int32(i) {
				t.Fatalf("trial %d: items reordered", trial)
			}
			if math.Float64bits(f.share) != math.Float64bits(byIndex[i]) {
				t.Fatalf("trial %d: item %d (cap %v weight %v) share %v, reference %v", trial, i, f.cap, f.weight, f.share, byIndex[i])
			}
		}
	}
}

// waterFill divides amount among items in proportion to their weights; an
// item whose share would exceed its cap gets its cap and leaves, and what it
// leaves is shared again among the others. It sets each item's share and
// returns the amount left over, which is non-zero only when every cap is met.
//
// The result is a water level λ: items with cap/weight ≤ λ are full, every
// other item gets λ × weight. Sorting by cap/weight and walking once finds λ
// in O(n log n); this finds it in expected O(n) by selection instead: pick a
// pivot level p, and ask whether pouring to p needs at most amount. If so,
// every item at or below p is full; if not, every item at or above p is
// partial. Either way the pivot's group is settled and one side is dropped.
// The items are reordered in place; nothing is allocated.
func waterFillSorted(items []fillItem, amount float64) float64 {
	if len(items) == 0 {
		return amount
	}
	if amount <= 0 {
		for i := range items {
			items[i].share = 0
		}
		return 0
	}
	// Unbounded items are never full: move them past the search range.
	hi := len(items)
	var partialWeight float64 // weight of items known to be partial
	for i := 0; i < hi; {
		items[i].level = items[i].cap / items[i].weight
		if math.IsInf(items[i].level, 1) {
			hi--
			partialWeight += items[i].weight
			items[i], items[hi] = items[hi], items[i]
			continue
		}
		i++
	}
	lo := 0
	var fullCap float64 // caps of items known to be full: items[:lo]
	rng := uint64(0x9e3779b97f4a7c15)
	for lo < hi {
		// A deterministic pseudo-random pivot keeps the expected cost linear
		// on any input order and the result reproducible.
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		pivot := items[lo+int(rng%uint64(hi-lo))].level
		lt, gt, capBelow, capEqual, weightEqual, weightAbove := partition3Items(items, lo, hi, pivot)
		// Pouring to the pivot level fills everything below it and gives
		// pivot × weight to the rest.
		need := fullCap + capBelow + capEqual + pivot*(weightAbove+partialWeight)
		if need <= amount {
			fullCap += capBelow + capEqual
			lo = gt
		} else {
			partialWeight += weightEqual + weightAbove
			hi = lt
		}
	}
	// items[:lo] are full, items[lo:] partial at one level.
	remaining := amount - fullCap
	for i := range items[:lo] {
		items[i].share = items[i].cap
	}
	if partialWeight == 0 {
		return max(0, remaining)
	}
	level := max(0, remaining) / partialWeight
	for i := lo; i < len(items); i++ {
		items[i].share = level * items[i].weight
	}
	return 0
}

// partition3 reorders items[lo:hi] into levels below, equal to and above
// pivot, returning the bounds [lo:lt) < pivot ≤ [lt:gt) < [gt:hi) and the
// sums the water-fill needs for each group.
func partition3Items(items []fillItem, lo, hi int, pivot float64) (lt, gt int, capBelow, capEqual, weightEqual, weightAbove float64) {
	lt, i, gt := lo, lo, hi
	for i < gt {
		switch l := items[i].level; {
		case l < pivot:
			capBelow += items[i].cap
			items[lt], items[i] = items[i], items[lt]
			lt++
			i++
		case l > pivot:
			weightAbove += items[i].weight
			gt--
			items[gt], items[i] = items[i], items[gt]
		default:
			capEqual += items[i].cap
			weightEqual += items[i].weight
			i++
		}
	}
	return lt, gt, capBelow, capEqual, weightEqual, weightAbove
}
