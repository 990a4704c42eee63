// Package apply is the control cycle's last writing stage: the only code
// that writes rates, guarantees and capacities to the shaper. Everything
// that wants an entity's rate changed (the cycle's allocation, a new
// entity's standby limit, a cluster share lowered between cycles, a new
// shaper after a reload) asks the Writer, which remembers what is in force
// so that each of them compares against the same truth, and so that a
// failed write is retried by the next cycle instead of being forgotten.
//
// A test (only_writer_test.go) fails when any other package of the module
// calls a shaper's SetRates, SetCapacity or Remove.
package apply

import (
	"errors"
	"fmt"
	"math"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/maps"
)

// Target is a rate the allocation wants in force for an entity.
type Target struct {
	Entity     uint32
	Rate       float64 // bytes per second (+Inf: no limit)
	Guaranteed float64
	// LowerExactly writes a lowered rate however little it moved: a
	// cluster share the next report says is in force must be in force.
	LowerExactly bool
}

// Writer holds the shaper and the rates in force in it.
type Writer struct {
	shaper shaping.Shaper
	// threshold: a rate that moved by this fraction or less is not
	// written again (update_threshold).
	threshold float64
	dirs      [2]inForce
	// Failures counts batches the shaper refused (retried next cycle).
	Failures uint64
}

// inForce is one direction's rates as last written (NaN: none decided, or
// a write that failed and must be retried).
type inForce struct {
	rate, guaranteed []float64
}

// New returns a writer for entity ids below entities.
func New(s shaping.Shaper, entities int, threshold float64) *Writer {
	w := &Writer{shaper: s, threshold: threshold}
	for d := range w.dirs {
		w.dirs[d] = inForce{rate: make([]float64, entities), guaranteed: make([]float64, entities)}
		for i := range w.dirs[d].rate {
			w.dirs[d].rate[i] = math.NaN()
		}
	}
	return w
}

// Shaper is the backend rates are written to (its Kind and Held are read
// by the other stages; writes go through the Writer).
func (w *Writer) Shaper() shaping.Shaper { return w.shaper }

// SetThreshold follows a reloaded update_threshold.
func (w *Writer) SetThreshold(t float64) { w.threshold = t }

// InForce returns the rate and guarantee written for an entity (rate NaN:
// none).
func (w *Writer) InForce(dir maps.Direction, id uint32) (rate, guaranteed float64) {
	d := &w.dirs[dir]
	return d.rate[id], d.guaranteed[id]
}

// moved says whether a new value differs enough from the one in force to
// be written.
func (w *Writer) moved(old, now float64) bool {
	return math.IsNaN(old) || math.Abs(now-old) > w.threshold*old || math.IsInf(now, 1) != math.IsInf(old, 1)
}

// Apply writes, in one batch, the targets whose rate or guarantee moved
// beyond the threshold, and returns how many it wrote. A refused batch is
// counted and every target in it is retried next time.
func (w *Writer) Apply(dir maps.Direction, targets []Target) (int, error) {
	d := &w.dirs[dir]
	var changes []shaping.Rate
	for _, t := range targets {
		lowered := t.LowerExactly && t.Rate < d.rate[t.Entity]
		if lowered || w.moved(d.rate[t.Entity], t.Rate) || w.moved(d.guaranteed[t.Entity], t.Guaranteed) {
			changes = append(changes, shaping.Rate{Entity: t.Entity, BytesPerSecond: t.Rate, Guaranteed: t.Guaranteed})
		}
	}
	if len(changes) == 0 {
		return 0, nil
	}
	if err := w.shaper.SetRates(dir, changes); err != nil {
		for _, c := range changes {
			d.rate[c.Entity] = math.NaN()
		}
		w.Failures++
		return 0, fmt.Errorf("write rates: %w", err)
	}
	for _, c := range changes {
		d.rate[c.Entity], d.guaranteed[c.Entity] = c.BytesPerSecond, c.Guaranteed
	}
	return len(changes), nil
}

// Standby holds a new entity to its standby limit with nothing guaranteed
// until the loop knows it (HTB lends it what the guarantees leave).
func (w *Writer) Standby(dir maps.Direction, id uint32, limit float64) error {
	if err := w.shaper.SetRates(dir, []shaping.Rate{{Entity: id, BytesPerSecond: limit}}); err != nil {
		return err
	}
	w.dirs[dir].rate[id], w.dirs[dir].guaranteed[id] = limit, 0
	return nil
}

// Lower writes share as an entity's rate at once if the rate in force is
// above it (or none is): never a raise, which only the cycle decides.
func (w *Writer) Lower(dir maps.Direction, id uint32, share float64) error {
	d := &w.dirs[dir]
	if d.rate[id] <= share && !math.IsNaN(d.rate[id]) {
		return nil
	}
	r := shaping.Rate{Entity: id, BytesPerSecond: share, Guaranteed: min(d.guaranteed[id], share)}
	if err := w.shaper.SetRates(dir, []shaping.Rate{r}); err != nil {
		w.Failures++
		return err
	}
	d.rate[id], d.guaranteed[id] = r.BytesPerSecond, r.Guaranteed
	return nil
}

// Remove takes an entity out of the shaper in both directions and forgets
// its rates. Entities without a rate in force are skipped only when
// onlyDecided is set (a refused reload's new entities).
func (w *Writer) Remove(id uint32, onlyDecided bool) error {
	var errs []error
	for d := range w.dirs {
		f := &w.dirs[d]
		if onlyDecided && math.IsNaN(f.rate[id]) {
			continue
		}
		if err := w.shaper.Remove(maps.Direction(d), id); err != nil {
			errs = append(errs, fmt.Errorf("remove the %s class of entity %d: %w", entity.Direction(d), id, err))
			continue
		}
		f.rate[id], f.guaranteed[id] = math.NaN(), 0
	}
	return errors.Join(errs...)
}

// Forget drops what the writer remembers of an entity's rate in dir, so
// that the next Apply writes it whatever it is: for a shaper known to have
// lost it.
func (w *Writer) Forget(dir maps.Direction, id uint32) {
	w.dirs[dir].rate[id], w.dirs[dir].guaranteed[id] = math.NaN(), 0
}

// SetCapacities caps each direction's governed traffic (+Inf: no cap).
func (w *Writer) SetCapacities(capacities [2]float64) error {
	return setCapacities(w.shaper, capacities)
}

func setCapacities(s shaping.Shaper, capacities [2]float64) error {
	for d, c := range capacities {
		if err := s.SetCapacity(maps.Direction(d), c); err != nil {
			return fmt.Errorf("%s capacity: %w", entity.Direction(d), err)
		}
	}
	return nil
}

// Use makes s the backend and gives it the capacities and every rate in
// force. Rates it refuses are retried by the next cycle; the errors say
// what was not written.
func (w *Writer) Use(s shaping.Shaper, capacities [2]float64) error {
	w.shaper = s
	var errs []error
	if err := setCapacities(s, capacities); err != nil {
		errs = append(errs, fmt.Errorf("capacities for the new shaper: %w", err))
	}
	for d := range w.dirs {
		f := &w.dirs[d]
		var rates []shaping.Rate
		for id, r := range f.rate {
			if !math.IsNaN(r) {
				rates = append(rates, shaping.Rate{Entity: uint32(id), BytesPerSecond: r, Guaranteed: f.guaranteed[id]})
			}
		}
		if len(rates) == 0 {
			continue
		}
		if err := s.SetRates(maps.Direction(d), rates); err != nil {
			for _, r := range rates {
				f.rate[r.Entity] = math.NaN()
			}
			errs = append(errs, fmt.Errorf("%s rates for the new shaper: %w", entity.Direction(d), err))
		}
	}
	return errors.Join(errs...)
}
