package objectives

import (
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
)

// Who has series of their own: unknown and overflow always, an
// objective's entity always (and counted against the budget), then
// entities that had series, then new ones, pinned only unless mode is
// all, up to max_entity_series.
func TestAssignSeries(t *testing.T) {
	p99 := 50 * time.Millisecond
	cases := []struct {
		name      string
		mode      string
		budget    int
		objective string      // client with a produce objective ("": none)
		had       []entity.ID // entities with series before
		want      map[entity.ID]bool
	}{
		{"configured: pinned up to the budget", config.MetricsConfigured, 2, "", nil,
			map[entity.ID]bool{0: true, 1: true, 2: true, 3: true, 4: false, 5: false}},
		{"all: any entity up to the budget", config.MetricsAll, 3, "", nil,
			map[entity.ID]bool{2: true, 3: true, 4: true, 5: false}},
		{"an objective's unpinned entity past the budget", config.MetricsConfigured, 2, "e", nil,
			map[entity.ID]bool{2: true, 3: false, 4: false, 5: true}},
		{"those that had series keep them", config.MetricsConfigured, 1, "", []entity.ID{4},
			map[entity.ID]bool{2: false, 3: false, 4: true}},
		{"an unpinned entity loses them unless mode is all", config.MetricsConfigured, 4, "", []entity.ID{5},
			map[entity.ID]bool{2: true, 3: true, 4: true, 5: false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reg := newRegistry()
			reg.add(entity.UnknownID, entity.Key{Kind: entity.KindUnknown}, false)
			reg.add(entity.OverflowID, entity.Key{Kind: entity.KindOverflow}, false)
			for i, n := range []string{"b", "c", "d"} {
				reg.add(entity.ID(2+i), client(n), true)
			}
			reg.add(5, client("e"), false)
			tr := New(64, slog.Default())
			if c.objective != "" {
				tr.Sync(config.Entities{Clients: map[string]config.Quota{c.objective: {ProduceLatencyObjective: &p99}}})
			}
			for _, id := range c.had {
				tr.series.own[id] = true
			}
			tr.AssignSeries(reg, config.Metrics{Entities: c.mode, MaxEntitySeries: c.budget})
			for id, want := range c.want {
				if got := tr.OwnSeries(uint32(id)); got != want {
					t.Errorf("entity %d has series %v, want %v", id, got, want)
				}
			}
		})
	}
}

// The passes over the registry run only after something changed.
func TestAssignSeriesOnlyWhenStale(t *testing.T) {
	reg := newRegistry()
	reg.add(2, client("b"), true)
	tr := New(64, slog.Default())
	mc := config.Metrics{Entities: config.MetricsConfigured, MaxEntitySeries: 10}
	tr.AssignSeries(reg, mc)
	reg.add(3, client("c"), true)
	tr.AssignSeries(reg, mc)
	if tr.OwnSeries(3) {
		t.Fatal("series assigned again with nothing marked changed")
	}
	tr.EntitiesChanged()
	tr.AssignSeries(reg, mc)
	if !tr.OwnSeries(3) {
		t.Error("a pinned entity got no series after EntitiesChanged")
	}
	tr.Forget(3)
	if tr.OwnSeries(3) || tr.OwnSeries(1000) {
		t.Error("a forgotten entity (or one past the ids) has series")
	}
}
