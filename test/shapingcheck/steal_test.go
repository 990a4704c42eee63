package main

import (
	"testing"
	"time"
)

func TestParseSteal(t *testing.T) {
	stat := []byte("cpu  73776 0 93734 143387 1314 0 51334 8340 0 0\n" +
		"cpu0 36055 0 46646 73265 223 0 25596 4159 0 0\n" +
		"cpu1 37721 0 47087 70122 1091 0 25738 4181 0 0\nintr 1 2 3\n")
	s, err := parseSteal(stat)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || s[0] != 41590*time.Millisecond || s[1] != 41810*time.Millisecond {
		t.Fatalf("steal %v, want [41.59s 41.81s]", s)
	}
	later := stealClock{s[0] + 30*time.Millisecond, s[1] + 120*time.Millisecond}
	if got := later.since(s); got != 120*time.Millisecond {
		t.Errorf("worst CPU's steal %v, want 120ms", got)
	}
	if _, err := parseSteal([]byte("cpu0 1 2 3 4 5 6 7 x\n")); err == nil {
		t.Error("a steal column that is not a number was accepted")
	}
	if _, err := parseSteal([]byte("intr 1\n")); err == nil {
		t.Error("a /proc/stat without cpuN lines was accepted")
	}
}

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
