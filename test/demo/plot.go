package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0x94, 0x67, 0xbd, 0xff}, // purple
}

// plot draws each series' rate as the kernel measured it (solid, thick),
// sluice's own measured rate (thin, faint), its dynamic limit (dotted) and
// reservation (dashed) over the story, with the phases marked and
// overcommit shaded.
func plot(path string, samples []sample, story []phase) error {
	const W, H = 1200, 680
	const left, right, top, bottom = 80, 30, 64, 190
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	plotW, plotH := W-left-right, H-top-bottom
	const maxT, maxY = 60.0, 40e6
	x := func(t float64) int { return left + int(t/maxT*float64(plotW)) }
	y := func(v float64) int { return top + plotH - int(min(v, maxY)/maxY*float64(plotH)) }
	grey := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	dark := color.RGBA{0x33, 0x33, 0x33, 0xff}
	shade := color.RGBA{0xff, 0xee, 0xcc, 0xff}

	// Overcommit shading.
	for i, s := range samples {
		if s.overcommit {
			t0 := s.t.Seconds() - 1
			if i > 0 {
				t0 = samples[i-1].t.Seconds()
			}
			draw.Draw(img, image.Rect(x(t0), top, x(s.t.Seconds()), top+plotH), &image.Uniform{shade}, image.Point{}, draw.Src)
		}
	}
	// Grid and axes.
	for v := 0.0; v <= maxY; v += 5e6 {
		line(img, left, y(v), left+plotW, y(v), grey, 1, 0)
		text(img, 8, y(v)+4, fmt.Sprintf("%2.0f MB/s", v/1e6), dark)
	}
	for t := 0.0; t <= maxT; t += 10 {
		line(img, x(t), top, x(t), top+plotH, grey, 1, 0)
		text(img, x(t)-8, top+plotH+16, fmt.Sprintf("%.0fs", t), dark)
	}
	line(img, left, top+plotH, left+plotW, top+plotH, dark, 1, 0)
	line(img, left, top, left, top+plotH, dark, 1, 0)
	// C = 36 MB/s.
	line(img, left, y(36e6), left+plotW, y(36e6), dark, 1, 6)
	text(img, left+plotW-215, y(36e6)-6, "C = capacity x 0.9 = 36 MB/s", dark)
	// Phase markers.
	for i, p := range story {
		t := p.at.Seconds()
		line(img, x(t), top, x(t), top+plotH, color.RGBA{0x99, 0x99, 0x99, 0xff}, 1, 3)
		text(img, x(t)+3, top-8-12*(i%2), fmt.Sprintf("%d", i+1), dark)
	}
	text(img, left, 14, "sluice demo: produce rate per entity from the broker sockets' tcp_info (solid) vs dynamic limit (dotted) and reservation (dashed);", dark)
	text(img, left, 28, "sluice's own counter: thin faint line; shaded: overcommit alert", dark)
	// Series.
	for i := range series {
		c := palette[i%len(palette)]
		faint := color.RGBA{c.R/2 + 0x80, c.G/2 + 0x80, c.B/2 + 0x80, 0xff}
		for j := 1; j < len(samples); j++ {
			a, b := samples[j-1], samples[j]
			if a.lim[i] > 0 && b.lim[i] > 0 {
				line(img, x(a.t.Seconds()), y(a.lim[i]), x(b.t.Seconds()), y(b.lim[i]), c, 1, 4)
			}
			if a.res[i] > 0 && b.res[i] > 0 {
				line(img, x(a.t.Seconds()), y(a.res[i]), x(b.t.Seconds()), y(b.res[i]), c, 1, 10)
			}
			if a.own[i] > 0 || b.own[i] > 0 {
				line(img, x(a.t.Seconds()), y(a.own[i]), x(b.t.Seconds()), y(b.own[i]), faint, 1, 0)
			}
			if a.rate[i] > 0 || b.rate[i] > 0 {
				line(img, x(a.t.Seconds()), y(a.rate[i]), x(b.t.Seconds()), y(b.rate[i]), c, 3, 0)
			}
		}
	}
	// Legend and phases.
	ly := top + plotH + 40
	for i, s := range series {
		c := palette[i%len(palette)]
		line(img, left, ly+i*18-4, left+30, ly+i*18-4, c, 3, 0)
		text(img, left+38, ly+i*18, s.label, dark)
	}
	for i, p := range story {
		text(img, left+420, ly+i*18, fmt.Sprintf("%d  %2.0fs  %s", i+1, p.at.Seconds(), p.title), dark)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, img)
}

// line draws from (x0,y0) to (x1,y1) with a width; dash > 0 draws dots of
// that period.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, width, dash int) {
	dx, dy := abs(x1-x0), abs(y1-y0)
	steps := max(dx, dy, 1)
	for i := 0; i <= steps; i++ {
		if dash > 0 && (i/dash)%2 == 1 {
			continue
		}
		px := x0 + (x1-x0)*i/steps
		py := y0 + (y1-y0)*i/steps
		for w := -(width / 2); w <= width/2; w++ {
			if dx >= dy {
				img.SetRGBA(px, py+w, c)
			} else {
				img.SetRGBA(px+w, py, c)
			}
		}
	}
}

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
