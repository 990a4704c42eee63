package harness

import (
	"testing"
	"time"
)

func TestParseSteal(t *testing.T) {
	stat := []byte("cpu  73776 0 93734 143387 1314 0 51334 8340 0 0\n" +
		"cpu0 36055 0 46646 73265 223 0 25596 4159 0 0\n" +
		"cpu1 37721 0 47087 70122 1091 0 25738 4181 0 0\nintr 1 2 3\n")
	s, err := ParseSteal(stat)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || s[0] != 41590*time.Millisecond || s[1] != 41810*time.Millisecond {
		t.Fatalf("steal %v, want [41.59s 41.81s]", s)
	}
	later := StealClock{s[0] + 30*time.Millisecond, s[1] + 120*time.Millisecond}
	if got := later.Since(s); got != 120*time.Millisecond {
		t.Errorf("worst CPU's steal %v, want 120ms", got)
	}
	if got := later.Mean(s); got != 75*time.Millisecond {
		t.Errorf("the CPUs' mean steal %v, want 75ms", got)
	}
	if _, err := ParseSteal([]byte("cpu0 1 2 3 4 5 6 7 x\n")); err == nil {
		t.Error("a steal column that is not a number was accepted")
	}
	if _, err := ParseSteal([]byte("intr 1\n")); err == nil {
		t.Error("a /proc/stat without cpuN lines was accepted")
	}
}
