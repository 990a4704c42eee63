// Command latencyplot draws the latency testbed's runs (the JSON that
// `go test ./test/e2e -run TestScenarioLatencyTestbed -args -latency-cdf F`
// writes) as tail CDFs: docs/latency.png, made by `make latency-plot`.
//
// The x axis is the core client's own request latency (log scale); the y
// axis is the fraction of its requests at most that slow, on a scale that
// gives each nine the same room (50 %, 90 %, 99 %, 99.9 %), because the
// tail is what a latency objective is about.
package main

import (
	"fmt"
	"log"
	"math"

	"github.com/sluice-dev/sluice/test/plot"
)

// order is the runs drawn, in the order (#34 item 4).
var order = []string{
	"core alone, no sluice",
	"core + backfill, no sluice",
	"core + backfill, sluice weights only",
	"core + backfill, sluice objective",
}

type testbed struct {
	Runs      map[string][]float64 `json:"runs"` // each run's latencies in ms, sorted
	AloneP99  float64              `json:"alone_p99_ms"`
	Objective float64              `json:"objective_p99_ms"`
}

func main() {
	var tb testbed
	out := plot.Flags("latency-testbed.json", "docs/latency.png", &tb)
	for _, name := range order {
		if len(tb.Runs[name]) == 0 {
			log.Fatalf("no latencies for the run %q", name)
		}
	}
	if err := draw(out, tb); err != nil {
		log.Fatal(err)
	}
}

// nines is the y coordinate of a fraction q: -log10(1-q), so 0.9 is 1 and
// 0.999 is 3.
func nines(q float64) float64 { return -math.Log10(1 - q) }

func draw(path string, tb testbed) error {
	const W, H = 1000, 620
	const left, right, top, bottom = 80, 30, 60, 150
	const maxNines = 3.0 // 99.9 %
	c := plot.New(W, H)
	plotW, plotH := W-left-right, H-top-bottom
	lo, hi := 1.0, 1.0 // ms, whole decades around every run's samples
	for _, name := range order {
		s := tb.Runs[name]
		for s[0] < lo {
			lo /= 10
		}
		for s[len(s)-1] > hi {
			hi *= 10
		}
	}
	x := func(ms float64) int {
		return left + int(math.Log10(max(ms, lo)/lo)/math.Log10(hi/lo)*float64(plotW))
	}
	y := func(q float64) int { return top + plotH - int(min(nines(q), maxNines)/maxNines*float64(plotH)) }
	for d := lo; d <= hi*1.0001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := d * m; v <= hi*1.0001 {
				c.Line(x(v), top, x(v), top+plotH, plot.Grid, 1, 0)
				c.Text(x(v)-10, top+plotH+16, fmt.Sprintf("%g ms", v), plot.Dark)
			}
		}
	}
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999} {
		c.Line(left, y(q), left+plotW, y(q), plot.Grid, 1, 0)
		c.Text(8, y(q)+4, fmt.Sprintf("%g%%", q*100), plot.Dark)
	}
	c.Line(left, top+plotH, left+plotW, top+plotH, plot.Dark, 1, 0)
	c.Line(left, top, left, top+plotH, plot.Dark, 1, 0)
	marks := []struct {
		at    float64
		label string
	}{{tb.Objective, fmt.Sprintf("objective p99 %.1f ms", tb.Objective)}, {2 * tb.AloneP99, fmt.Sprintf("2 x alone p99 = %.1f ms", 2*tb.AloneP99)}}
	for i, m := range marks {
		c.Line(x(m.at), top, x(m.at), top+plotH, plot.Mark, 1, 4)
		c.Text(x(m.at)+4, top+12+14*i, m.label, plot.Dark)
	}
	c.Text(left, 18, "core producer's own request latency (franz-go hooks): fraction of requests at most that slow,", plot.Dark)
	c.Text(left, 34, "broker disk 8 MB/s shared with a backfill tenant (make latency-plot; test/e2e/latencybed_test.go)", plot.Dark)
	for i, name := range order {
		col := plot.Palette[i%len(plot.Palette)]
		s := tb.Runs[name]
		n := float64(len(s))
		px, py := x(s[0]), y(0)
		for j, v := range s {
			q := float64(j+1) / n
			if nines(q) > maxNines {
				break
			}
			nx, ny := x(v), y(q)
			c.Line(px, py, nx, py, col, 3, 0) // a step: the fraction holds until the next sample
			c.Line(nx, py, nx, ny, col, 3, 0)
			px, py = nx, ny
		}
		ly := top + plotH + 40 + i*18
		c.Line(left, ly-4, left+30, ly-4, col, 3, 0)
		c.Text(left+38, ly, fmt.Sprintf("%-38s p50 %6.2f ms   p99 %6.2f ms   (%d requests)", name, at(s, 0.5), at(s, 0.99), len(s)), plot.Dark)
	}
	return c.Save(path)
}

// at is the q-quantile of sorted values.
func at(s []float64, q float64) float64 {
	return s[min(len(s)-1, max(0, int(math.Ceil(q*float64(len(s))))-1))]
}
