package allocator

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// realisticMix builds n entities: about 20 % reserved, 30 % limited, 40 %
// throttled and 10 % standby (idle), against a capacity that is contended.
func realisticMix(n int, seed uint64) ([]Entity, Config) {
	r := rand.New(rand.NewPCG(seed, 7))
	capacity := float64(n) * 1e6
	entities := make([]Entity, n)
	for i := range entities {
		e := Entity{Slot: uint32(i), Weight: []float64{0.1, 1, 1, 2, 5}[r.IntN(5)], Limit: Unlimited}
		if r.Float64() < 0.2 {
			e.Reservation = r.Float64() * 2e6
		}
		if r.Float64() < 0.3 {
			e.Limit = 1e6 + r.Float64()*4e6
		}
		switch p := r.Float64(); {
		case p < 0.1: // standby
		case p < 0.5:
			e.Usage = r.Float64() * 3e6
			e.Throttled = true
		default:
			e.Usage = r.Float64() * 1e6
		}
		entities[i] = e
	}
	cfg := DefaultConfig(capacity)
	cfg.SafetyRatio = 0.9
	cfg.ActivityThreshold = 1
	cfg.MemoryCycles = 1 // standby entities stay standby
	return entities, cfg
}

// BenchmarkCycle measures one control-loop cycle in steady state: the same
// allocator, warm scratch space, usage varying a little from cycle to cycle.
func BenchmarkCycle(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("entities=%d", n), func(b *testing.B) {
			entities, cfg := realisticMix(n, 1)
			a, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			out := make([]Allocation, n)
			if _, err := a.Cycle(entities, out); err != nil { // warm up scratch space
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				e := &entities[i%n]
				if e.Usage > 0 {
					e.Usage *= 1.01
				}
				if _, err := a.Cycle(entities, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
