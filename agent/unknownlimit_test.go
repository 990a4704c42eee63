package agent

import (
	"math"
	"testing"

	"github.com/sluice-dev/sluice/allocator"
)

// The unknown entity follows the strictest limit in force, between the
// 64 KiB/s floor and max(H, min_limit): a reconnect gains nothing over the
// limit its client had (a cluster share of 20 kB/s, here), and with no
// entity yet it is held where it always was.
func TestUnknownLimit(t *testing.T) {
	cfg := allocator.Config{Capacity: 200e6, SafetyRatio: 0.9, MinLimit: 1e6} // H = 20 MB/s
	for _, tc := range []struct {
		name   string
		limits []float64
		want   float64
	}{
		{"no entity yet: max(H, min_limit)", nil, 20e6},
		{"a cluster share of 20 kB/s: the floor", []float64{6e6, 20e3, 2e6}, unknownFloor},
		{"the lowest limit, above the floor", []float64{6e6, 3e6, 2e6}, 2e6},
		{"limits over H: H", []float64{50e6, 30e6}, 20e6},
		{"a zero (no allocation) is not a limit", []float64{0, 5e6}, 5e6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			strictest := math.Inf(1)
			for _, l := range tc.limits {
				strictest = stricter(strictest, l)
			}
			if got := unknownLimit(cfg, strictest); got != tc.want {
				t.Errorf("unknown held to %v, want %v", got, tc.want)
			}
		})
	}
}
