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
func waterFill(items []fillItem, amount float64) float64 {
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
		lt, gt, capBelow, capEqual, weightEqual, weightAbove := partition3(items, lo, hi, pivot)
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
func partition3(items []fillItem, lo, hi int, pivot float64) (lt, gt int, capBelow, capEqual, weightEqual, weightAbove float64) {
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
