package agent

import (
	"fmt"
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
func TestDesignDocCapacityFormulas(t *testing.T) {
	doc, err := os.ReadFile("../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, formula := range []string{"`C = capacity × safety_ratio`", "`H = capacity − C`", "`max(H, min_limit)`"} {
		if !strings.Contains(string(doc), formula) {
			t.Errorf("docs/design.md no longer states %s: update it and this test together", formula)
		}
	}
	for _, c := range []struct{ capacity, safety, minLimit float64 }{
		{1000, 0.9, 0}, {1000, 0.9, 300}, {2000, 0.75, 100}, {1000, 1, 50},
	} {
		t.Run(fmt.Sprintf("capacity %v safety %v min_limit %v", c.capacity, c.safety, c.minLimit), func(t *testing.T) {
			// The documented formulas, evaluated as written.
			wantC := c.capacity * c.safety
			wantH := c.capacity - wantC
			wantUnknown := max(wantH, c.minLimit)
			r := newRigFrom(t, fmt.Sprintf(`
interfaces: [eth0]
listeners: [9092]
refresh_interval: 1s
rate_window: 1
produce: {capacity: %v, safety_ratio: %v, activity_threshold: 0, memory_cycles: 3, min_limit: %v}
fetch:   {capacity: %v, safety_ratio: %v, activity_threshold: 0, memory_cycles: 3, min_limit: %v}
entities:
  clients: {alpha: {producer_byte_reservation: 100, producer_byte_rate: 600}}
`, c.capacity, c.safety, c.minLimit, c.capacity, c.safety, c.minLimit))
			r.learn(40000, "alpha", apiVersions())
			r.dp.add(maps.Produce, r.dp.bindings[conn(40000)].Produce, 50)
			s := r.cycle()
			for _, d := range entity.Directions {
				v := s.Directions[d]
				if float64(v.C) != wantC || float64(v.H) != wantH {
					t.Errorf("%v: status C %v H %v, the design's formulas give C %v H %v", d, float64(v.C), float64(v.H), wantC, wantH)
				}
				if got := r.sh.rates[d][uint32(entity.UnknownID)]; got != wantUnknown {
					t.Errorf("%v: the unknown entity's limit in the shaper %v, the design's max(H, min_limit) = %v", d, got, wantUnknown)
				}
			}
		})
	}
}
