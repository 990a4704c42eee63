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

func objectivesOf(p99 map[string]time.Duration) config.Entities {
	e := config.Entities{Clients: map[string]config.Quota{}}
	for name, d := range p99 {
		e.Clients[name] = config.Quota{ProduceLatencyObjective: &d}
	}
	return e
}

// A sync keeps the breaker of an objective that did not change, builds
// one for a new or changed objective, and drops the others.
func TestSyncKeepsUnchangedBreakers(t *testing.T) {
	tr := New(8, slog.Default())
	tr.Sync(objectivesOf(map[string]time.Duration{"core": 50 * time.Millisecond, "ledger": 20 * time.Millisecond}))
	breakers := map[string]any{}
	for _, o := range tr.list {
		breakers[o.Key.Name] = o.breakers[o.Direction]
	}
	tr.Sync(objectivesOf(map[string]time.Duration{"core": 50 * time.Millisecond, "ledger": 30 * time.Millisecond, "new": 10 * time.Millisecond}))
	if len(tr.list) != 3 {
		t.Fatalf("objectives %+v, want core, ledger and new", tr.list)
	}
	for _, o := range tr.list {
		if kept := breakers[o.Key.Name] == any(o.breakers[o.Direction]); kept != (o.Key.Name == "core") {
			t.Errorf("%s's breaker kept %v: only the unchanged core's is", o.Key.Name, kept)
		}
	}
	tr.Sync(config.Entities{})
	if len(tr.list) != 0 || len(tr.Views()) != 0 {
		t.Errorf("objectives left after a sync to none: %+v", tr.Views())
	}
}

// Trim protects every objective entity of its direction (and only of
// its direction), holds nothing while the objective is met, and once its
// breaker opens caps best-effort traffic at the level × the best-effort
// usage when it opened; NoteTrim says whom the hold trimmed, and the
// gauges split that between entities with series and the others.
func TestTrimHoldsBestEffort(t *testing.T) {
	reg := newRegistry()
	reg.add(2, client("core"), true)
	reg.add(3, client("ledger"), true)
	reg.add(4, client("bulk"), true)
	reg.add(5, client("stranger"), false)
	tr := New(8, slog.Default())
	tr.Sync(objectivesOf(map[string]time.Duration{"core": 50 * time.Millisecond, "ledger": 50 * time.Millisecond}))
	tr.AssignSeries(reg, config.Metrics{Entities: config.MetricsConfigured, MaxEntitySeries: 10})
	inputs := func() []allocator.Entity {
		return []allocator.Entity{
			{Slot: 2, Reservation: 100, Weight: 1, Limit: math.Inf(1), Usage: 100},
			{Slot: 3, Weight: 1, Limit: math.Inf(1), Usage: 300},
			{Slot: 4, Weight: 1, Limit: math.Inf(1), Usage: 600},
			{Slot: 5, Weight: 1, Limit: math.Inf(1), Usage: 200},
		}
	}
	now := time.Unix(1000, 0)
	var trim allocator.Trim
	for i := 0; i < 40 && !trim.Enabled; i++ {
		now = now.Add(time.Second)
		for j := 0; j < 30; j++ {
			tr.Observe(now, measured([2]uint32{2, 2}, 0, 200*time.Millisecond))
			tr.Observe(now, measured([2]uint32{3, 3}, 0, 5*time.Millisecond))
		}
		in := inputs()
		if fetchTrim := tr.Trim(entity.Fetch, in, reg, now); fetchTrim.Enabled || in[0].Protected {
			t.Fatalf("the fetch direction, with no objective, trimmed %+v or protected %+v", fetchTrim, in[0])
		}
		trim = tr.Trim(entity.Produce, in, reg, now)
		for k, want := range []bool{true, true, false, false} {
			if in[k].Protected != want {
				t.Fatalf("entity %d protected %v, want %v", in[k].Slot, in[k].Protected, want)
			}
		}
		if !trim.Enabled {
			if h := tr.HeldBy(entity.Produce); len(h) != 0 {
				t.Fatalf("held by %v with nothing held", h)
			}
		}
	}
	// Best-effort: bulk and the stranger, 800 when it opened; the first level is 0.8.
	if !trim.Enabled || math.Abs(trim.Cap-0.8*800) > 1e-9 {
		t.Fatalf("trim %+v after 40 s over the objective, want a cap of 640", trim)
	}
	if s := tr.Views(); s[0].State != "open" || s[1].State != "closed" || tr.Transitions() != 1 {
		t.Errorf("views %+v, %d transitions: want core open, ledger closed, one transition", s, tr.Transitions())
	}
	outputs := []allocator.Allocation{{}, {}, {Trimmed: 120}, {Trimmed: 40}}
	keys := []entity.Key{client("core"), client("ledger"), client("bulk"), client("stranger")}
	tr.NoteTrim(entity.Produce, allocator.Summary{Trim: trim, Trimmed: 160}, inputs(), outputs, keys)
	held := tr.HeldBy(entity.Produce)
	if len(held) != 2 || !strings.Contains(held[4], "core's produce latency objective") || held[5] == "" {
		t.Errorf("held by %v, want bulk (4) and stranger (5) by core's objective", held)
	}
	g := tr.Gauges([2]bool{true, false})
	if len(g.directions) != 1 {
		t.Fatalf("gauges of %d directions, want the enabled produce only", len(g.directions))
	}
	d := g.directions[0]
	if !d.capped || d.cap != trim.Cap || d.trimmed != 160 || len(d.entities) != 1 || d.entities[0].name != "bulk" || d.entities[0].bytes != 120 || d.others != 40 {
		t.Errorf("produce gauges %+v: want capped at %v, 160 trimmed, 120 from bulk, 40 from the others", d, trim.Cap)
	}
	if len(g.objectives) != 2 || g.objectives[0].p99 < 150*time.Millisecond || !g.objectives[0].judged {
		t.Errorf("objective gauges %+v", g.objectives)
	}
}
