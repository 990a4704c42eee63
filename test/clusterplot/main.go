// Command clusterplot draws the three-broker cluster budgets scenario (the
// JSON that `go test ./test/e2e -run TestScenarioClusterBudgets -args
// -cluster-series F` writes) as rates over time: docs/cluster-budgets.png,
// made by `make cluster-plot`.
//
// Every line is a figure from the client host's kernel: the bytes the
// brokers acknowledged on the tenant's connections to each broker
// (tcp_info bytes_acked), as a rate over the trailing second. The total is
// what the cluster budget holds; the phases are marked where they start.
package main

import (
	"fmt"
	"log"
	"math"

	"github.com/sluice-dev/sluice/test/plot"
)

type series struct {
	Limit       float64 `json:"limit"`
	Reservation float64 `json:"reservation"`
	Points      []struct {
		T      float64   `json:"t"`
		Tenant [3]uint64 `json:"tenant_bytes"`
	} `json:"points"`
	Events []struct {
		T     float64 `json:"t"`
		Label string  `json:"label"`
	} `json:"events"`
}

func main() {
	var s series
	out := plot.Flags("cluster-series.json", "docs/cluster-budgets.png", &s)
	if len(s.Points) < 2 || s.Limit <= 0 {
		log.Fatalf("%d readings and limit %v: nothing to draw", len(s.Points), s.Limit)
	}
	if err := draw(out, s); err != nil {
		log.Fatal(err)
	}
}

// sample is the rates (bytes/s) per broker over the second before t.
type sample struct {
	t    float64
	rate [3]float64
}

// trailing turns cumulative readings into rates over the trailing second.
func trailing(s series) []sample {
	var out []sample
	k := 0
	for i, p := range s.Points {
		for k < i && p.T-s.Points[k+1].T >= 1 {
			k++
		}
		from := s.Points[k]
		secs := p.T - from.T
		if secs < 0.9 {
			continue // the first second: no full window yet
		}
		var r [3]float64
		for b := range 3 {
			r[b] = float64(p.Tenant[b]-from.Tenant[b]) / secs
		}
		out = append(out, sample{t: p.T, rate: r})
	}
	return out
}

func draw(path string, s series) error {
	const W, H = 1200, 640
	const left, right, top, bottom = 70, 30, 60, 110
	c := plot.New(W, H)
	plotW, plotH := W-left-right, H-top-bottom
	samples := trailing(s)
	end := s.Points[len(s.Points)-1].T
	top2 := 1.5 * s.Limit // room above the limit for Kafka's semantics
	for _, sm := range samples {
		top2 = max(top2, 1.1*(sm.rate[0]+sm.rate[1]+sm.rate[2]))
	}
	step := 2e6
	top2 = math.Ceil(top2/step) * step
	x := func(t float64) int { return left + int(t/end*float64(plotW)) }
	y := func(v float64) int { return top + plotH - int(v/top2*float64(plotH)) }
	for v := 0.0; v <= top2; v += step {
		c.Line(left, y(v), left+plotW, y(v), plot.Grid, 1, 0)
		c.Text(10, y(v)+4, fmt.Sprintf("%g MB/s", v/1e6), plot.Dark)
	}
	for t := 0.0; t <= end; t += 10 {
		c.Text(x(t)-8, top+plotH+16, fmt.Sprintf("%gs", t), plot.Dark)
	}
	c.Line(left, top+plotH, left+plotW, top+plotH, plot.Dark, 1, 0)
	c.Line(left, top, left, top+plotH, plot.Dark, 1, 0)
	c.Line(left, y(s.Limit), left+plotW, y(s.Limit), plot.Dark, 1, 6)
	c.Text(left+plotW-170, y(s.Limit)-4, fmt.Sprintf("cluster limit %g MB/s", s.Limit/1e6), plot.Dark)
	c.Line(left, y(s.Reservation), left+plotW, y(s.Reservation), plot.Mark, 1, 6)
	c.Text(left+plotW-170, y(s.Reservation)+14, fmt.Sprintf("reservation %g MB/s", s.Reservation/1e6), plot.Dark)
	// The phases: a dashed line where each starts, its label in one of five
	// rows so neighbours do not overlap.
	for i, e := range s.Events {
		c.Line(x(e.T), top, x(e.T), top+plotH, plot.Mark, 1, 3)
		c.Text(x(e.T)+3, top+12+13*(i%5), e.Label, plot.Dark)
	}
	c.Text(left, 18, "one tenant's produce to three brokers (partitions led 80/15/5; franz-go on 0 and 2, librdkafka on 1), per broker and in total,", plot.Dark)
	c.Text(left, 34, "from tcp_info bytes_acked at the client host over the trailing second (make cluster-plot; test/e2e/cluster_test.go)", plot.Dark)
	names := []string{"broker 0", "broker 1", "broker 2", "total"}
	for b := range 4 {
		col := plot.Palette[b%len(plot.Palette)]
		width := 2
		if b == 3 {
			width = 3
		}
		val := func(sm sample) float64 {
			if b == 3 {
				return sm.rate[0] + sm.rate[1] + sm.rate[2]
			}
			return sm.rate[b]
		}
		for i := 1; i < len(samples); i++ {
			c.Line(x(samples[i-1].t), y(val(samples[i-1])), x(samples[i].t), y(val(samples[i])), col, width, 0)
		}
		lx := left + b*160
		c.Line(lx, H-40, lx+30, H-40, col, 3, 0)
		c.Text(lx+38, H-36, names[b], plot.Dark)
	}
	return c.Save(path)
}
