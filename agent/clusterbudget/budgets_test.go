package clusterbudget

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/cluster"
)

// budgetsOf is a Budgets of one budget applying applied, with only what
// Measure reads.
func budgetsOf(t *testing.T, applied float64) *Budgets {
	t.Helper()
	cfg := cluster.DefaultConfig("c", []cluster.BrokerID{1, 2}, []cluster.Entity{{ID: "e", Limit: 10e6}})
	core, err := cluster.NewAgent(cfg, cluster.Start{Broker: 1, Instance: 1, Boot: 1,
		Disk: &cluster.Disk{Epoch: 1, Boot: 1, Anchored: true}, Applied: []float64{applied}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &Budgets{core: core, locals: make([]cluster.Local, 1), heldFor: make([]uint8, 1)}
}

// Measure reports what a budget's client did: a client that left (its last
// second under half the average, not held back) gives its share up at
// once; one held back stays held for heldCycles cycles while it still runs
// at half its share or more, and is let go at once when it stops.
func TestMeasure(t *testing.T) {
	for _, tc := range []struct {
		name               string
		usage, last        float64
		held               bool
		before             uint8 // cycles still reported held before this one
		wantUsage          float64
		wantHeld           bool
		wantCyclesAfterOne uint8
	}{
		{"left mid-window", 2e6, 0.2e6, false, 0, 0.2e6, false, 0},
		{"gone", 2e6, 0, false, 0, 0, false, 0},
		{"slower: the average stands", 2e6, 1.5e6, false, 0, 2e6, false, 0},
		{"held back: the average stands", 2e6, 0.2e6, true, 0, 2e6, true, heldCycles},
		{"was held, still at its share", 2e6, 2e6, false, heldCycles, 2e6, true, heldCycles - 1},
		{"was held, stopped", 2e6, 0, false, heldCycles, 0, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb := budgetsOf(t, 2e6)
			cb.heldFor[0] = tc.before
			cb.Measure(0, tc.usage, tc.last, tc.held)
			if l := cb.Local(0); l.Usage != tc.wantUsage || l.HeldBack != tc.wantHeld || cb.heldFor[0] != tc.wantCyclesAfterOne {
				t.Errorf("reported usage %v held %v (held for %d more), want %v %v (%d)", l.Usage, l.HeldBack, cb.heldFor[0], tc.wantUsage, tc.wantHeld, tc.wantCyclesAfterOne)
			}
		})
	}
}

// The state file round-trips (an unlimited share as the largest float, which
// no share reaches); a missing file is no state; a file that is not a
// sluice cluster state is an error naming it, never a silent fresh start.
func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "cluster.state")
	if st, err := readClusterState(path); st != nil || err != nil {
		t.Fatalf("missing file: %+v, %v; want no state and no error", st, err)
	}
	want := clusterStateFile{Disk: cluster.Disk{Epoch: 7, ProcessedSent: 41, Boot: 3, Anchored: true}, Applied: []float64{5e6, math.Inf(1)}}
	w := stateWriter{path: path}
	if err := w.write(want); err != nil {
		t.Fatal(err)
	}
	got, err := readClusterState(path)
	if err != nil || got.Disk != want.Disk || got.Applied[0] != 5e6 || got.Applied[1] != math.MaxFloat64 {
		t.Fatalf("read back %+v, %v; want %+v with +Inf stored as the largest float", got, err, want)
	}
	if !math.IsInf(want.Applied[1], 1) {
		t.Fatal("writing the state changed the caller's shares")
	}
	// The single JSON document earlier agents wrote is still read.
	legacy := []byte(`{"version":1,"disk":{"Epoch":9,"Boot":3,"Anchor":0,"Anchored":false,"ProcessedSent":12},"applied":[1000]}`)
	if err := os.WriteFile(path, legacy, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := readClusterState(path); err != nil || got.Disk.Epoch != 9 || got.Disk.ProcessedSent != 12 || got.Applied[0] != 1000 {
		t.Fatalf("an earlier agent's file read as %+v, %v", got, err)
	}
	if err := os.WriteFile(path, []byte(`{"version": 9}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readClusterState(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("a foreign file read as %v; want an error naming %s", err, path)
	}
}
