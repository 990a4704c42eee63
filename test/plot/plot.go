// Package plot draws the project's figures (docs/demo.png, docs/latency.png)
// as PNG with nothing but the standard library and a bitmap font: lines,
// dashes, filled rectangles and text on a white canvas.
package plot

import (
	"encoding/json"
	"flag"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"log"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Palette is the series colours, in order.
var Palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0x94, 0x67, 0xbd, 0xff}, // purple
}

// Greys for grids, text and markers.
var (
	Grid  = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	Dark  = color.RGBA{0x33, 0x33, 0x33, 0xff}
	Mark  = color.RGBA{0x99, 0x99, 0x99, 0xff}
	Shade = color.RGBA{0xff, 0xee, 0xcc, 0xff}
)

// Canvas is an image being drawn.
type Canvas struct{ img *image.RGBA }

// New is a white canvas of w × h pixels.
func New(w, h int) *Canvas {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	return &Canvas{img: img}
}

// Fill paints the rectangle from (x0,y0) to (x1,y1).
func (c *Canvas) Fill(x0, y0, x1, y1 int, col color.RGBA) {
	draw.Draw(c.img, image.Rect(x0, y0, x1, y1), &image.Uniform{col}, image.Point{}, draw.Src)
}

// Line draws from (x0,y0) to (x1,y1) with a width; dash > 0 draws dashes
// of that period.
func (c *Canvas) Line(x0, y0, x1, y1 int, col color.RGBA, width, dash int) {
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
				c.img.SetRGBA(px, py+w, col)
			} else {
				c.img.SetRGBA(px+w, py, col)
			}
		}
	}
}

// Text writes s with its baseline's left end at (x,y), 7 × 13 pixels a
// character.
func (c *Canvas) Text(x, y int, s string, col color.RGBA) {
	d := &font.Drawer{Dst: c.img, Src: image.NewUniform(col), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// Flags reads a plotting command's -in (the JSON a scenario wrote) and
// -out (the PNG), and decodes -in into v; it exits naming the file when it
// cannot.
func Flags(in, out string, v any) (outPath string) {
	inPath := flag.String("in", in, "the scenario's results (JSON)")
	o := flag.String("out", out, "the PNG to write")
	flag.Parse()
	data, err := os.ReadFile(*inPath)
	if err != nil {
		log.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		log.Fatalf("%s: %v", *inPath, err)
	}
	return *o
}

// Save writes the canvas to path as PNG.
func (c *Canvas) Save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, c.img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
