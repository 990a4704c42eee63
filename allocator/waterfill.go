package allocator

import "math"

// fillItem is one participant in a weighted water-filling.
type fillItem struct {
	index  int32   // the entity's index in the cycle's input
	cap    float64 // the most it may receive; +Inf for unbounded
	weight float64
	level  float64 // cap/weight: the water level at which the item is full
	share  float64 // the result
}

// levelItem is what the search for the water level reorders: a fillItem's
// level and the sums it contributes, without its index and result, so
// that the items themselves stay in input order (their results are then
// written out in order, not scattered) and fewer bytes move.
type levelItem struct {
	level, cap, weight float64
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
// The search reorders a copy of the levels (a.levels, reused); items keep
// their order, and nothing is allocated in steady state.
//
// Every pivot accepted lies below every pivot refused (a refusal drops all
// levels at or above it from the search, an acceptance all at or below),
// so the full items are exactly those whose level is at most the highest
// full level found: each item's share is decided from its own level.
func (a *Allocator) waterFill(items []fillItem, amount float64) float64 {
	if len(items) == 0 {
		return amount
	}
	if amount <= 0 {
		for i := range items {
			items[i].share = 0
		}
		return 0
	}
	if cap(a.levels) < len(items) {
		a.levels = make([]levelItem, len(items), 2*len(items))
	}
	sel := a.levels[:len(items)]
	for i := range items {
		items[i].level = items[i].cap / items[i].weight
		sel[i] = levelItem{level: items[i].level, cap: items[i].cap, weight: items[i].weight}
	}
	// Unbounded items are never full: move them past the search range.
	hi := len(sel)
	var partialWeight float64 // weight of items known to be partial
	for i := 0; i < hi; {
		if math.IsInf(sel[i].level, 1) {
			hi--
			partialWeight += sel[i].weight
			sel[i], sel[hi] = sel[hi], sel[i]
			continue
		}
		i++
	}
	lo := 0
	var fullCap float64 // caps of items known to be full: sel[:lo]
	rng := uint64(0x9e3779b97f4a7c15)
	for lo < hi {
		// A deterministic pseudo-random pivot keeps the expected cost linear
		// on any input order and the result reproducible.
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		pivot := sel[lo+int(rng%uint64(hi-lo))].level
		lt, gt, capBelow, capEqual, weightEqual, weightAbove := partition3(sel, lo, hi, pivot)
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
	// sel[:lo] are full, sel[lo:] partial at one level.
	fullUpTo := math.Inf(-1)
	for _, s := range sel[:lo] {
		fullUpTo = max(fullUpTo, s.level)
	}
	remaining := amount - fullCap
	if partialWeight == 0 {
		for i := range items {
			items[i].share = items[i].cap
		}
		return max(0, remaining)
	}
	level := max(0, remaining) / partialWeight
	for i := range items {
		if items[i].level <= fullUpTo {
			items[i].share = items[i].cap
		} else {
			items[i].share = level * items[i].weight
		}
	}
	return 0
}

// partition3 reorders items[lo:hi] into levels below, equal to and above
// pivot, returning the bounds [lo:lt) < pivot ≤ [lt:gt) < [gt:hi) and the
// sums the water-fill needs for each group.
func partition3(items []levelItem, lo, hi int, pivot float64) (lt, gt int, capBelow, capEqual, weightEqual, weightAbove float64) {
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
