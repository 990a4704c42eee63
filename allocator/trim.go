package allocator

import "math"

// TrimLargest is how a latency objective takes bandwidth from best-effort
// traffic (#34, latency.Breaker's level): the largest limits come down
// first, to one common ceiling, until their sum is at most target; no limit
// goes below its floor (a reservation, min_limit) or above where it was.
// It returns the ceiling (+Inf when nothing had to come down) and writes
// the trimmed limits into out (len(limits)). When even the floors exceed
// target, every limit sits at its floor. Pure and deterministic.
func TrimLargest(limits, floors []float64, target float64, out []float64) float64 {
	sum, floorSum, top := 0.0, 0.0, 0.0
	for i, l := range limits {
		f := math.Min(floors[i], l)
		sum += l
		floorSum += f
		top = math.Max(top, l)
	}
	if sum <= target {
		copy(out, limits)
		return math.Inf(1)
	}
	if floorSum >= target {
		for i, l := range limits {
			out[i] = math.Min(floors[i], l)
		}
		return 0
	}
	// The ceiling T with Σ clamp(limit, floor, T) = target lies in (0, top]:
	// the sum rises with T. Bisection to a relative 1e-12 is enough for
	// bytes a second and keeps this allocation-free and exact to the cent.
	lo, hi := 0.0, top
	for i := 0; i < 100 && hi-lo > 1e-12*top; i++ {
		mid := (lo + hi) / 2
		if trimmedSum(limits, floors, mid) > target {
			hi = mid
		} else {
			lo = mid
		}
	}
	for i, l := range limits {
		out[i] = clampTrim(l, floors[i], lo)
	}
	return lo
}

func clampTrim(limit, floor, ceiling float64) float64 {
	return math.Max(math.Min(floor, limit), math.Min(limit, ceiling))
}

func trimmedSum(limits, floors []float64, ceiling float64) float64 {
	s := 0.0
	for i, l := range limits {
		s += clampTrim(l, floors[i], ceiling)
	}
	return s
}
