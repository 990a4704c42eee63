package agent

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/maps"
)

// docs/design.md's capacity formulas are what runs: C and H as the
// allocator computes them, and the unknown entity's limit the agent writes
// to the shaper, over capacities, safety ratios and floors where each term
// decides. (The design once gave H = C − Σ res, which nothing computed.)
// The unknown entity is held to the strictest limit in force: with
// capacities of bytes a second that is max(H, min_limit); with a real
// one, alpha's limit, or the 64 KiB/s floor under it.
func TestDesignDocCapacityFormulas(t *testing.T) {
	doc, err := os.ReadFile("../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, formula := range []string{"`C = capacity × safety_ratio`", "`H = capacity − C`", "`max(H, min_limit)`", "`min(max(H, min_limit), max(64 KiB/s, the lowest dynamic limit))`"} {
		if !strings.Contains(string(doc), formula) {
			t.Errorf("docs/design.md no longer states %s: update it and this test together", formula)
		}
	}
	for _, c := range []struct {
		capacity, safety, minLimit, alphaLimit float64
		produceUnknown                         float64 // by hand from the formula (0: not given)
	}{
		{1000, 0.9, 0, 600, 100}, {1000, 0.9, 300, 600, 300}, {2000, 0.75, 100, 600, 500}, {1000, 1, 50, 600, 50},
		{100e6, 0.9, 0, 2e6, 2e6},        // alpha's limit, under H
		{100e6, 0.9, 1e6, 600, 64 << 10}, // alpha's 600 B/s, floored
		{100e6, 0.5, 0, 80e6, 50e6},      // H: no limit in force under it
	} {
		t.Run(fmt.Sprintf("capacity %v safety %v min_limit %v alpha's limit %v", c.capacity, c.safety, c.minLimit, c.alphaLimit), func(t *testing.T) {
			// The documented formulas, evaluated as written.
			wantC := c.capacity * c.safety
			wantH := c.capacity - wantC
			r := newRigFrom(t, fmt.Sprintf(`
interfaces: [eth0]
listeners: [9092]
refresh_interval: 1s
rate_window: 1
produce: {capacity: %v, safety_ratio: %v, activity_threshold: 0, memory_cycles: 3, min_limit: %v}
fetch:   {capacity: %v, safety_ratio: %v, activity_threshold: 0, memory_cycles: 3, min_limit: %v}
entities:
  clients: {alpha: {producer_byte_reservation: 100, producer_byte_rate: %v}}
`, c.capacity, c.safety, c.minLimit, c.capacity, c.safety, c.minLimit, c.alphaLimit))
			r.learn(40000, "alpha", apiVersions())
			r.dp.add(maps.Produce, r.dp.bindings[conn(40000)].Produce, 50)
			s := r.cycle()
			for _, d := range entity.Directions {
				v := s.Directions[d]
				if float64(v.C) != wantC || float64(v.H) != wantH {
					t.Errorf("%v: status C %v H %v, the design's formulas give C %v H %v", d, float64(v.C), float64(v.H), wantC, wantH)
				}
				lowest := math.Inf(1)
				for _, e := range v.Entities {
					if e.Kind != "unknown" && e.DynamicLimit > 0 {
						lowest = min(lowest, float64(e.DynamicLimit))
					}
				}
				wantUnknown := min(max(wantH, c.minLimit), max(64<<10, lowest))
				if d == entity.Produce && wantUnknown != c.produceUnknown {
					t.Errorf("the formula gives %v for produce here, worked by hand %v", wantUnknown, c.produceUnknown)
				}
				if got := r.sh.rates[d][uint32(entity.UnknownID)]; got != wantUnknown {
					t.Errorf("%v: the unknown entity's limit in the shaper %v, the design's min(max(H %v, min_limit), max(64 KiB/s, the lowest dynamic limit %v)) = %v",
						d, got, wantH, lowest, wantUnknown)
				}
			}
		})
	}
}
