package objectives

import (
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/allocator"
)

// crossWorld is a broker whose core tenant's produce p99 (objective
// 50 ms) is hurt by best-effort fetches, not produce: 200 ms while the
// fetch direction's best-effort traffic may use more than hurtAbove, 5 ms
// below it, whatever produce is held to.
type crossWorld struct {
	t         *testing.T
	tr        *Tracker
	reg       *registry
	now       time.Time
	contended bool
	hurtAbove float64
	// fetchBestEffort is the fetch direction's best-effort usage (the
	// reader's); 0: no fetch traffic to hold.
	fetchBestEffort float64
	produce, fetch  allocator.Trim
	fetchInputs     []allocator.Entity
}

func newCrossWorld(t *testing.T) *crossWorld {
	reg := newRegistry()
	reg.add(2, client("core"), true)
	reg.add(3, client("bulk"), true)
	reg.add(4, client("reader"), true)
	tr := New(8, slog.New(slog.DiscardHandler))
	tr.Sync(objectivesOf(map[string]time.Duration{"core": 50 * time.Millisecond}))
	tr.AssignSeries(reg, config.Metrics{Entities: config.MetricsConfigured, MaxEntitySeries: 10})
	return &crossWorld{t: t, tr: tr, reg: reg, now: time.Unix(1000, 0), contended: true, hurtAbove: 500, fetchBestEffort: 1000}
}

// second runs one cycle: core's requests of the second past, then both
// directions' Trim, produce first as the agent's cycle does.
func (w *crossWorld) second() {
	w.now = w.now.Add(time.Second)
	d := 5 * time.Millisecond
	if w.contended && (!w.fetch.Enabled || w.fetch.Cap > w.hurtAbove) {
		d = 200 * time.Millisecond
	}
	for range 30 {
		w.tr.Observe(w.now, measured([2]uint32{2, 2}, 0, d))
	}
	produce := []allocator.Entity{
		{Slot: 2, Reservation: 100, Weight: 1, Limit: math.Inf(1), Usage: 100},
		{Slot: 3, Weight: 1, Limit: math.Inf(1), Usage: 600},
	}
	w.fetchInputs = []allocator.Entity{
		{Slot: 2, Weight: 1, Limit: math.Inf(1), Usage: 50},
		{Slot: 4, Weight: 1, Limit: math.Inf(1), Usage: w.fetchBestEffort},
	}
	w.produce = w.tr.Trim(entity.Produce, produce, w.reg, w.now)
	w.fetch = w.tr.Trim(entity.Fetch, w.fetchInputs, w.reg, w.now)
}

// until runs cycles until cond holds, at most limit of them.
func (w *crossWorld) until(limit int, what string, cond func() bool) {
	w.t.Helper()
	for range limit {
		w.second()
		if cond() {
			return
		}
	}
	w.t.Fatalf("%s: not within %d s; views %+v, produce %+v, fetch %+v", what, limit, w.tr.Views(), w.produce, w.fetch)
}

func (w *crossWorld) view() (trims, state string, releases map[string]uint64) {
	v := w.tr.Views()[0]
	return v.Trims, v.State, v.Releases
}

// A produce objective whose p99 the fetch direction's best-effort traffic
// hurts: the produce hold goes to the floor and proves ineffective, the
// objective then holds fetch (its own tenant's fetches protected), which
// brings the p99 back, and once the contention ends it releases; the
// next episode starts by holding fetch.
func TestObjectiveHoldsTheOtherDirectionWhenItsOwnIsIneffective(t *testing.T) {
	w := newCrossWorld(t)
	w.until(60, "the produce hold", func() bool { return w.produce.Enabled })
	if trims, state, _ := w.view(); trims != "produce" || state != "open" || w.fetch.Enabled {
		t.Fatalf("first hold: trims %s, %s, fetch %+v: want produce held, fetch not", trims, state, w.fetch)
	}
	w.until(200, "the move to fetch", func() bool { return w.fetch.Enabled })
	trims, state, rel := w.view()
	if trims != "fetch" || state != "open" || w.produce.Enabled || rel["ineffective"] != 1 {
		t.Fatalf("moved: trims %s, %s, releases %v, produce %+v: want fetch held from open, produce released as ineffective once", trims, state, rel, w.produce)
	}
	// The first level down is 0.8 of the reader's 1000 (core's own 50
	// protected, not counted).
	if math.Abs(w.fetch.Cap-800) > 1e-9 || !w.fetchInputs[0].Protected || w.fetchInputs[1].Protected {
		t.Fatalf("fetch held to %v, inputs %+v: want 800, core's fetch protected", w.fetch.Cap, w.fetchInputs)
	}
	w.until(30, "the p99 back under", func() bool { return w.fetch.Cap <= w.hurtAbove })
	// Held, it stays under: no bad window for a minute.
	for range 60 {
		w.second()
		if !w.fetch.Enabled || w.fetch.Cap > w.hurtAbove && w.tr.Views()[0].State != "half_open" {
			t.Fatalf("holding fetch: %+v, views %+v", w.fetch, w.tr.Views())
		}
		if w.produce.Enabled {
			t.Fatalf("produce held again while fetch holds: %+v", w.produce)
		}
	}
	w.tr.NoteTrim(entity.Fetch, allocator.Summary{Trim: w.fetch, Trimmed: 500}, w.fetchInputs,
		[]allocator.Allocation{{}, {Trimmed: 500}}, []entity.Key{client("core"), client("reader")})
	if why := w.tr.HeldBy(entity.Fetch)[4]; !strings.Contains(why, "core's produce latency objective") || !strings.Contains(why, "holding fetch") {
		t.Errorf("the reader held by %q: want core's produce objective named, holding fetch", why)
	}
	w.contended = false
	w.until(300, "the release", func() bool { return !w.fetch.Enabled && !w.produce.Enabled && w.tr.Views()[0].State == "closed" })
	if trims, _, rel := w.view(); trims != "fetch" || rel["recovered"] != 1 {
		t.Fatalf("released: trims %s, releases %v: want fetch leading, one recovery", trims, rel)
	}
	w.contended = true
	w.until(60, "the next episode", func() bool { return w.produce.Enabled || w.fetch.Enabled })
	if !w.fetch.Enabled || w.produce.Enabled {
		t.Fatalf("next episode: produce %+v, fetch %+v: want fetch held first", w.produce, w.fetch)
	}
}

// With no best-effort traffic on the other side, or when holding it does
// not help either, the objective is ineffective as before: released,
// nothing held, and its next episode starts from its own direction.
func TestObjectiveIneffectiveBothWays(t *testing.T) {
	t.Run("no fetch traffic", func(t *testing.T) {
		w := newCrossWorld(t)
		w.fetchBestEffort = 0
		w.until(300, "ineffective", func() bool { return w.tr.Views()[0].State == "ineffective" })
		if trims, _, rel := w.view(); trims != "produce" || w.fetch.Enabled || w.produce.Enabled || rel["ineffective"] != 1 {
			t.Fatalf("trims %s, releases %v, produce %+v, fetch %+v: want nothing held, produce's ineffective", trims, rel, w.produce, w.fetch)
		}
	})
	t.Run("fetch does not help", func(t *testing.T) {
		w := newCrossWorld(t)
		w.hurtAbove = -1 // bad at any fetch level
		w.until(200, "the move to fetch", func() bool { return w.fetch.Enabled })
		w.until(300, "ineffective both ways", func() bool { return !w.fetch.Enabled && w.tr.Views()[0].State == "ineffective" })
		if trims, _, rel := w.view(); trims != "produce" || w.produce.Enabled || rel["ineffective"] != 2 {
			t.Fatalf("trims %s, releases %v, produce %+v: want back on produce, ineffective, released twice", trims, rel, w.produce)
		}
		for range 120 { // ineffective: nothing held until it re-arms
			w.second()
			if w.fetch.Enabled || w.produce.Enabled {
				t.Fatalf("held while ineffective: produce %+v, fetch %+v", w.produce, w.fetch)
			}
		}
	})
}
