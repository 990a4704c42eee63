package allocator

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The largest come down first to one ceiling; floors hold; the sum meets
// the target; nothing rises.
func TestTrimLargestExample(t *testing.T) {
	limits := []float64{40, 20, 10, 5}
	floors := []float64{0, 0, 0, 0}
	out := make([]float64, 4)
	ceiling := TrimLargest(limits, floors, 50, out)
	// 20 + 20 + 10 + 5 = 55 > 50; at 17.5: 17.5 + 17.5 + 10 + 5 = 50.
	if math.Abs(ceiling-17.5) > 1e-9 || math.Abs(out[0]-17.5) > 1e-9 || math.Abs(out[1]-17.5) > 1e-9 || out[2] != 10 || out[3] != 5 {
		t.Errorf("ceiling %v, limits %v: want 17.5 and [17.5 17.5 10 5]", ceiling, out)
	}
	// A floor holds: the other large one gives more.
	ceiling = TrimLargest(limits, []float64{0, 19, 0, 0}, 50, out)
	if out[1] != 19 || math.Abs(out[0]+out[1]+out[2]+out[3]-50) > 1e-6 {
		t.Errorf("with a floor of 19: %v (ceiling %v)", out, ceiling)
	}
	// Nothing to do.
	if c := TrimLargest(limits, floors, 100, out); !math.IsInf(c, 1) || out[0] != 40 {
		t.Errorf("under the target: ceiling %v, %v", c, out)
	}
	// Floors above the target: everyone at the floor.
	if c := TrimLargest(limits, []float64{30, 20, 10, 5}, 50, out); c != 0 || out[0] != 30 || out[1] != 20 {
		t.Errorf("floors over the target: ceiling %v, %v", c, out)
	}
}

func TestTrimLargestProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 3))
	for n := 0; n < 2000; n++ {
		k := 1 + rng.IntN(12)
		limits, floors, out := make([]float64, k), make([]float64, k), make([]float64, k)
		sum, floorSum := 0.0, 0.0
		for i := range limits {
			limits[i] = float64(rng.IntN(100e6))
			if rng.IntN(3) == 0 {
				floors[i] = float64(rng.IntN(20e6))
			}
			sum += limits[i]
			floorSum += math.Min(floors[i], limits[i])
		}
		target := rng.Float64() * sum * 1.2
		ceiling := TrimLargest(limits, floors, target, out)
		got := 0.0
		for i := range out {
			got += out[i]
			if out[i] > limits[i] || out[i] < math.Min(floors[i], limits[i])-1e-6 {
				t.Fatalf("case %d: limit %d went from %v to %v (floor %v)", n, i, limits[i], out[i], floors[i])
			}
			if out[i] < limits[i] && out[i] > math.Max(ceiling, floors[i])+1e-6 {
				t.Fatalf("case %d: limit %d trimmed to %v, above the ceiling %v", n, i, out[i], ceiling)
			}
		}
		want := math.Max(math.Min(target, sum), floorSum)
		if math.Abs(got-want) > 1e-6*math.Max(1, want) {
			t.Fatalf("case %d: sum %v, want %v (target %v, limits %v, floors %v)", n, got, want, target, limits, floors)
		}
		// The largest first: of two trimmed limits with no floor in play,
		// neither is below the other's ceiling share.
		for i := range out {
			for j := range out {
				if limits[i] >= limits[j] && floors[i] == 0 && floors[j] == 0 && out[i] < out[j]-1e-6 {
					t.Fatalf("case %d: the larger limit %v ended below the smaller %v (%v < %v)", n, limits[i], limits[j], out[i], out[j])
				}
			}
		}
	}
}
