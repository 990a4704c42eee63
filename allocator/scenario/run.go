package scenario

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/sluice-dev/sluice/allocator"
)

// Result is the JSON output of `sluice simulate`.
type Result struct {
	Cycles []CycleResult `json:"cycles"`
}

// CycleResult is one cycle's direction-wide figures and per-entity steps.
// Rates are rounded to 2 decimals, ratios to 3. Unbounded values are null.
type CycleResult struct {
	C             float64                 `json:"C"`
	H             float64                 `json:"H"`
	Scale         float64                 `json:"scale"`
	PromisedRatio *float64                `json:"promised_ratio"`
	GreenRatio    float64                 `json:"green_ratio"`
	Overcommit    bool                    `json:"overcommit"`
	Entities      map[string]EntityResult `json:"entities"`
	order         []string                // entity names in declaration order, for tables
	raw           []allocator.Allocation  // unrounded, for tests
	summary       allocator.Summary       // unrounded, for tests
}

// EntityResult is one entity's allocation in a cycle.
type EntityResult struct {
	State                string   `json:"state"`
	EffectiveReservation float64  `json:"effective_reservation"`
	Demand               *float64 `json:"demand"`
	Green                float64  `json:"green"`
	Extra                float64  `json:"extra"`
	Headroom             float64  `json:"headroom"`
	DynamicLimit         float64  `json:"dynamic_limit"`
}

// Run plays every cycle of s through a fresh allocator.
func Run(s *Scenario) (Result, error) {
	a, err := allocator.New(s.Config)
	if err != nil {
		return Result{}, err
	}
	in := make([]allocator.Entity, len(s.Entities))
	res := Result{Cycles: make([]CycleResult, 0, len(s.Cycles))}
	names := make([]string, len(s.Entities))
	for i, e := range s.Entities {
		names[i] = e.Name
	}
	for n, c := range s.Cycles {
		for i, e := range s.Entities {
			in[i] = allocator.Entity{
				Slot:        uint32(i),
				Reservation: e.Reservation,
				Weight:      e.Weight,
				Limit:       e.Limit,
				Usage:       c.Usage[i],
				Throttled:   c.Throttled[i],
			}
		}
		out := make([]allocator.Allocation, len(in))
		sum, err := a.Cycle(in, out)
		if err != nil {
			return Result{}, fmt.Errorf("cycles[%d]: %w", n, err)
		}
		cr := CycleResult{
			C:             rate(sum.C),
			H:             rate(sum.H),
			Scale:         ratio(sum.Scale),
			PromisedRatio: finite(ratio(sum.PromisedRatio)),
			GreenRatio:    ratio(sum.GreenRatio),
			Overcommit:    sum.Overcommit,
			Entities:      make(map[string]EntityResult, len(in)),
			order:         names,
			raw:           out,
			summary:       sum,
		}
		for i, o := range out {
			cr.Entities[names[i]] = EntityResult{
				State:                o.State.String(),
				EffectiveReservation: rate(o.EffectiveReservation),
				Demand:               finite(rate(o.Demand)),
				Green:                rate(o.Green),
				Extra:                rate(o.Extra),
				Headroom:             rate(o.Headroom),
				DynamicLimit:         rate(o.DynamicLimit),
			}
		}
		res.Cycles = append(res.Cycles, cr)
	}
	return res, nil
}

func round(v float64, digits int) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return v
	}
	p := math.Pow(10, float64(digits))
	r := math.Round(v*p) / p
	if r == 0 {
		return 0 // no "-0" in the output
	}
	return r
}

func rate(v float64) float64  { return round(v, 2) }
func ratio(v float64) float64 { return round(v, 3) }

// finite maps unbounded values to JSON null.
func finite(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	return &v
}

// WriteTable prints a human-readable table of every cycle.
func (r Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for n, c := range r.Cycles {
		promised := "∞"
		if c.PromisedRatio != nil {
			promised = fmt.Sprintf("%.3f", *c.PromisedRatio)
		}
		alert := ""
		if c.Overcommit {
			alert = "  OVERCOMMIT"
		}
		fmt.Fprintf(tw, "cycle %d: C %s  H %s  R/C %s  scale %.3f  Σgreen/C %.3f%s\n", n+1, num(c.C), num(c.H), promised, c.Scale, c.GreenRatio, alert)
		fmt.Fprintln(tw, "entity\tstate\teffRes\tdemand\tgreen\textra\theadroom\tdynamic limit\t")
		for _, name := range c.order {
			e := c.Entities[name]
			demand := "∞"
			if e.Demand != nil {
				demand = num(*e.Demand)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, e.State, num(e.EffectiveReservation), demand, num(e.Green), num(e.Extra), num(e.Headroom), num(e.DynamicLimit))
		}
		fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t")
	}
	return tw.Flush()
}

func num(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	return strings.TrimSuffix(strings.TrimSuffix(s, "0"), ".0")
}
