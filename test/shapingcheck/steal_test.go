package main

import (
	"testing"
	"time"
)

func TestHeldTo(t *testing.T) {
	for _, c := range []struct {
		goodput float64
		stolen  time.Duration
		want    bool
	}{
		{29.2, 0, true},                       // within 3 %
		{29.05, 0, false},                     // 3.2 % short, nothing stolen
		{29.05, 100 * time.Millisecond, true}, // 1 % of 10 s stolen explains it
		{28.0, 100 * time.Millisecond, false}, // 6.7 % short: more than the host took
		{31.0, 5 * time.Second, false},        // an excess is never excused
	} {
		if got := heldTo(c.goodput, 30, 0.03, c.stolen, 10); got != c.want {
			t.Errorf("heldTo(%v of 30, stolen %v) = %v, want %v", c.goodput, c.stolen, got, c.want)
		}
	}
}
