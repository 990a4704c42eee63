package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/test/harness"
)

// The machine watch's part of the judging (no world: it runs with the
// scenarios because this package's tests run only there).
func TestScenarioJudgesWithoutDisturbedRequests(t *testing.T) {
	zero := time.Date(2026, 12, 7, 20, 0, 0, 0, time.UTC)
	ends := []float64{100, 1000, 1100, 1400, 1600, 3000}
	latencies := []float64{5, 6, 300, 40, 7, 8}
	// A stall from 1.0 s for 200 ms: what completed in it, or within
	// drainAfter (250 ms) of its end, is set aside; 1600 ms is not.
	stall := disturbance{At: zero.Add(time.Second), For: 200 * time.Millisecond, Why: "test"}
	e, l, dropped := undisturbed(ends, latencies, zero, []disturbance{stall})
	if dropped != 3 || !slices.Equal(e, []float64{100, 1600, 3000}) || !slices.Equal(l, []float64{5, 7, 8}) {
		t.Fatalf("kept %v %v, dropped %d; want [100 1600 3000] [5 7 8], 3", e, l, dropped)
	}
	if e, _, dropped := undisturbed(ends, latencies, zero, nil); dropped != 0 || len(e) != len(ends) {
		t.Fatalf("nothing disturbed: kept %d of %d, dropped %d", len(e), len(ends), dropped)
	}

	m := &machineWatch{}
	m.note(stall)
	if d := m.between(zero.Add(1100*time.Millisecond), zero.Add(5*time.Second)); len(d) != 1 {
		t.Fatalf("a run overlapping the stall sees %v", d)
	}
	if d := m.between(zero.Add(1300*time.Millisecond), zero.Add(5*time.Second)); len(d) != 0 {
		t.Fatalf("a run after the stall sees %v", d)
	}
	if d := m.between(zero, zero.Add(999*time.Millisecond)); len(d) != 0 {
		t.Fatalf("a run before the stall sees %v", d)
	}
	if _, err := harness.ReadSteal(); err != nil {
		t.Fatalf("/proc/stat's steal column cannot be read (%v): the watch would see no hypervisor", err)
	}
}
