package allocator

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzCycle decodes arbitrary bytes into a configuration and up to three
// cycles of entities; the allocator must never panic, and every cycle it
// accepts must keep every invariant.
func FuzzCycle(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x10\x00\x00\x00\x00\x00\x80\x3f\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"))
	f.Add(make([]byte, 200))
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() uint32 {
			if len(data) < 4 {
				data = nil
				return 0
			}
			v := binary.LittleEndian.Uint32(data)
			data = data[4:]
			return v
		}
		// Values come either as a small integer grid (to hit ties and exact
		// boundaries) or as arbitrary float32 bit patterns (NaN, Inf, subnormals).
		value := func() float64 {
			v := next()
			if v&1 == 0 {
				return float64(v>>1) / 16
			}
			return float64(math.Float32frombits(v))
		}
		cfg := Config{
			Capacity:                value(),
			SafetyRatio:             value(),
			MinDemand:               value(),
			ActivityThreshold:       value(),
			MemoryCycles:            int(next() % 5),
			OvercommitConfirmCycles: int(next() % 5),
		}
		a, err := New(cfg)
		if err != nil {
			return
		}
		n := int(next() % 16)
		entities := make([]Entity, n)
		out := make([]Allocation, n)
		for cycle := 0; cycle < 3; cycle++ {
			for i := range entities {
				flags := next()
				entities[i] = Entity{
					Slot:        flags % 32,
					Reservation: value(),
					Weight:      value(),
					Limit:       value(),
					Usage:       value(),
					Throttled:   flags&(1<<8) != 0,
				}
				if flags&(1<<9) != 0 {
					entities[i].Limit = Unlimited
				}
			}
			s, err := a.Cycle(entities, out)
			if err != nil {
				continue
			}
			if err := checkInvariants(cfg, entities, out, s); err != nil {
				t.Fatalf("cycle %d: %v\nconfig %+v\nentities %+v\nout %+v", cycle, err, cfg, entities, out)
			}
		}
	})
}
