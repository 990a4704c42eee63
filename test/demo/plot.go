package main

import (
	"fmt"
	"image/color"

	"github.com/sluice-dev/sluice/test/plot"
)

// drawStory draws each series' rate as the kernel measured it (solid, thick),
// sluice's own measured rate (thin, faint), its dynamic limit (dotted) and
// reservation (dashed) over the story, with the phases marked and
// overcommit shaded.
func drawStory(path string, samples []sample, story []phase) error {
	const W, H = 1200, 680
	const left, right, top, bottom = 80, 30, 64, 190
	img := plot.New(W, H)
	plotW, plotH := W-left-right, H-top-bottom
	const maxT, maxY = 60.0, 40e6
	x := func(t float64) int { return left + int(t/maxT*float64(plotW)) }
	y := func(v float64) int { return top + plotH - int(min(v, maxY)/maxY*float64(plotH)) }
	grey, dark := plot.Grid, plot.Dark

	// Overcommit shading.
	for i, s := range samples {
		if s.overcommit {
			t0 := s.t.Seconds() - 1
			if i > 0 {
				t0 = samples[i-1].t.Seconds()
			}
			img.Fill(x(t0), top, x(s.t.Seconds()), top+plotH, plot.Shade)
		}
	}
	// Grid and axes.
	for v := 0.0; v <= maxY; v += 5e6 {
		img.Line(left, y(v), left+plotW, y(v), grey, 1, 0)
		img.Text(8, y(v)+4, fmt.Sprintf("%2.0f MB/s", v/1e6), dark)
	}
	for t := 0.0; t <= maxT; t += 10 {
		img.Line(x(t), top, x(t), top+plotH, grey, 1, 0)
		img.Text(x(t)-8, top+plotH+16, fmt.Sprintf("%.0fs", t), dark)
	}
	img.Line(left, top+plotH, left+plotW, top+plotH, dark, 1, 0)
	img.Line(left, top, left, top+plotH, dark, 1, 0)
	// C = 36 MB/s.
	img.Line(left, y(36e6), left+plotW, y(36e6), dark, 1, 6)
	img.Text(left+plotW-215, y(36e6)-6, "C = capacity x 0.9 = 36 MB/s", dark)
	// Phase markers.
	for i, p := range story {
		t := p.at.Seconds()
		img.Line(x(t), top, x(t), top+plotH, plot.Mark, 1, 3)
		img.Text(x(t)+3, top-8-12*(i%2), fmt.Sprintf("%d", i+1), dark)
	}
	img.Text(left, 14, "sluice demo: produce rate per entity from the broker sockets' tcp_info (solid) vs dynamic limit (dotted) and reservation (dashed);", dark)
	img.Text(left, 28, "sluice's own counter: thin faint line; shaded: overcommit alert", dark)
	// Series.
	for i := range series {
		c := plot.Palette[i%len(plot.Palette)]
		faint := color.RGBA{c.R/2 + 0x80, c.G/2 + 0x80, c.B/2 + 0x80, 0xff}
		for j := 1; j < len(samples); j++ {
			a, b := samples[j-1], samples[j]
			if a.lim[i] > 0 && b.lim[i] > 0 {
				img.Line(x(a.t.Seconds()), y(a.lim[i]), x(b.t.Seconds()), y(b.lim[i]), c, 1, 4)
			}
			if a.res[i] > 0 && b.res[i] > 0 {
				img.Line(x(a.t.Seconds()), y(a.res[i]), x(b.t.Seconds()), y(b.res[i]), c, 1, 10)
			}
			if a.own[i] > 0 || b.own[i] > 0 {
				img.Line(x(a.t.Seconds()), y(a.own[i]), x(b.t.Seconds()), y(b.own[i]), faint, 1, 0)
			}
			if a.rate[i] > 0 || b.rate[i] > 0 {
				img.Line(x(a.t.Seconds()), y(a.rate[i]), x(b.t.Seconds()), y(b.rate[i]), c, 3, 0)
			}
		}
	}
	// Legend and phases.
	ly := top + plotH + 40
	for i, s := range series {
		c := plot.Palette[i%len(plot.Palette)]
		img.Line(left, ly+i*18-4, left+30, ly+i*18-4, c, 3, 0)
		img.Text(left+38, ly+i*18, s.label, dark)
	}
	for i, p := range story {
		img.Text(left+420, ly+i*18, fmt.Sprintf("%d  %2.0fs  %s", i+1, p.at.Seconds(), p.title), dark)
	}
	return img.Save(path)
}
