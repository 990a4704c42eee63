package apply

import (
	"errors"
	"math"
	"testing"

	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/maps"
)

// recorder is a shaper that records what it is given and can refuse.
type recorder struct {
	shaping.Shadow
	writes   [][]shaping.Rate
	removed  []uint32
	capacity [2]float64
	refuse   bool
}

func (r *recorder) SetRates(_ maps.Direction, rates []shaping.Rate) error {
	if r.refuse {
		return errors.New("refused")
	}
	r.writes = append(r.writes, append([]shaping.Rate(nil), rates...))
	return nil
}

func (r *recorder) SetCapacity(dir maps.Direction, c float64) error {
	if r.refuse {
		return errors.New("refused")
	}
	r.capacity[dir] = c
	return nil
}

func (r *recorder) Remove(_ maps.Direction, id uint32) error {
	if r.refuse {
		return errors.New("refused")
	}
	r.removed = append(r.removed, id)
	return nil
}

func TestApplyWritesWhatMoved(t *testing.T) {
	inf := math.Inf(1)
	cases := []struct {
		name  string
		first Target
		next  Target
		write bool
	}{
		{"first rate", Target{}, Target{Entity: 2, Rate: 100}, true},
		{"within threshold", Target{Entity: 2, Rate: 100}, Target{Entity: 2, Rate: 100.5}, false},
		{"beyond threshold", Target{Entity: 2, Rate: 100}, Target{Entity: 2, Rate: 102}, true},
		{"guarantee moved", Target{Entity: 2, Rate: 100, Guaranteed: 10}, Target{Entity: 2, Rate: 100, Guaranteed: 20}, true},
		{"to unlimited", Target{Entity: 2, Rate: 100}, Target{Entity: 2, Rate: inf}, true},
		{"unlimited stays", Target{Entity: 2, Rate: inf}, Target{Entity: 2, Rate: inf}, false},
		{"small lowering of a cluster share", Target{Entity: 2, Rate: 100}, Target{Entity: 2, Rate: 99.9, LowerExactly: true}, true},
		{"small raise of a cluster share", Target{Entity: 2, Rate: 100}, Target{Entity: 2, Rate: 100.1, LowerExactly: true}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{}
			w := New(r, 4, 0.01)
			if c.first != (Target{}) {
				if _, err := w.Apply(maps.Fetch, []Target{c.first}); err != nil {
					t.Fatal(err)
				}
			}
			before := len(r.writes)
			n, err := w.Apply(maps.Fetch, []Target{c.next})
			if err != nil {
				t.Fatal(err)
			}
			if wrote := len(r.writes) > before; wrote != c.write || (n == 1) != c.write {
				t.Errorf("wrote %v (n=%d), want %v", wrote, n, c.write)
			}
		})
	}
}

func TestRefusedBatchIsRetried(t *testing.T) {
	r := &recorder{}
	w := New(r, 4, 0.01)
	w.Apply(maps.Produce, []Target{{Entity: 1, Rate: 100}})
	r.refuse = true
	if _, err := w.Apply(maps.Produce, []Target{{Entity: 1, Rate: 200}, {Entity: 3, Rate: 50}}); err == nil || w.Failures != 1 {
		t.Fatalf("err %v, failures %d", err, w.Failures)
	}
	if rate, _ := w.InForce(maps.Produce, 1); !math.IsNaN(rate) {
		t.Errorf("a refused rate is in force as %v; want none (retried)", rate)
	}
	r.refuse = false
	// The same rate as refused must be written now, although it did not move.
	if n, err := w.Apply(maps.Produce, []Target{{Entity: 1, Rate: 200}, {Entity: 3, Rate: 50}}); err != nil || n != 2 {
		t.Errorf("retry wrote %d (err %v), want 2", n, err)
	}
}

func TestLowerOnlyLowers(t *testing.T) {
	r := &recorder{}
	w := New(r, 4, 0.01)
	if err := w.Lower(maps.Produce, 1, 50); err != nil || len(r.writes) != 1 {
		t.Fatalf("no rate in force: lower must write (err %v, writes %d)", err, len(r.writes))
	}
	w.Apply(maps.Produce, []Target{{Entity: 2, Rate: 100, Guaranteed: 80}})
	before := len(r.writes)
	w.Lower(maps.Produce, 2, 120)
	if len(r.writes) != before {
		t.Errorf("a share above the rate in force was written: lower must never raise")
	}
	w.Lower(maps.Produce, 2, 60)
	if rate, g := w.InForce(maps.Produce, 2); rate != 60 || g != 60 {
		t.Errorf("after lowering to 60: rate %v guaranteed %v, want 60 and 60 (the guarantee follows down)", rate, g)
	}
}

func TestUseReplaysRatesInForce(t *testing.T) {
	old := &recorder{}
	w := New(old, 4, 0.01)
	w.Apply(maps.Produce, []Target{{Entity: 1, Rate: 100, Guaranteed: 10}})
	w.Standby(maps.Fetch, 2, 30)
	next := &recorder{}
	if err := w.Use(next, [2]float64{1000, 2000}); err != nil {
		t.Fatal(err)
	}
	if len(next.writes) != 2 || next.writes[0][0] != (shaping.Rate{Entity: 1, BytesPerSecond: 100, Guaranteed: 10}) ||
		next.writes[1][0] != (shaping.Rate{Entity: 2, BytesPerSecond: 30}) || next.capacity != [2]float64{1000, 2000} {
		t.Errorf("new shaper got %v, capacity %v", next.writes, next.capacity)
	}
	if w.Shaper() != shaping.Shaper(next) {
		t.Errorf("writer still writes to the old shaper")
	}
}

func TestRemoveOnlyDecided(t *testing.T) {
	r := &recorder{}
	w := New(r, 4, 0.01)
	w.Apply(maps.Produce, []Target{{Entity: 1, Rate: 100}})
	if err := w.Remove(1, true); err != nil || len(r.removed) != 1 {
		t.Errorf("only-decided removal of an entity with a produce rate: removed %v (err %v), want one direction", r.removed, err)
	}
	if rate, _ := w.InForce(maps.Produce, 1); !math.IsNaN(rate) {
		t.Errorf("removed entity keeps rate %v", rate)
	}
	r.removed = nil
	if err := w.Remove(3, false); err != nil || len(r.removed) != 2 {
		t.Errorf("reclaim removal: removed %v (err %v), want both directions", r.removed, err)
	}
}
