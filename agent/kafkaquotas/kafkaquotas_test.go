package kafkaquotas

import (
	"maps"
	"slices"
	"testing"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/learner"
)

func rate(r float64) *float64 { return &r }

func clients(names ...string) map[string]config.Quota {
	out := map[string]config.Quota{}
	for _, n := range names {
		out[n] = config.Quota{ConsumerByteRate: rate(100)}
	}
	return out
}

// Fit keeps what fits the room: entities the file names take none,
// clients before users, each by name; a user takes one for its own quota
// and one per client of its own (not the file's, not <default>).
func TestFit(t *testing.T) {
	file := config.Entities{Clients: clients("b"), Users: map[string]config.UserQuota{"u2": {Clients: clients("c1")}}}
	imported := entity.KafkaQuotas{Clients: clients("a", "b", "c"),
		Users: map[string]config.UserQuota{
			config.DefaultKey: {Quota: config.Quota{ConsumerByteRate: rate(5)}},
			"u1":              {Quota: config.Quota{ConsumerByteRate: rate(7)}, Clients: clients("x", config.DefaultKey)},
			"u2":              {Quota: config.Quota{ConsumerByteRate: rate(9)}, Clients: clients("c1", "c2")},
		}}
	for _, c := range []struct {
		room    int
		clients []string
		users   []string
		left    int
	}{
		{room: 0, clients: []string{"b"}, users: []string{config.DefaultKey}, left: 2 + 2 + 1},
		{room: 1, clients: []string{"a", "b"}, users: []string{config.DefaultKey}, left: 1 + 2 + 1},
		{room: 2, clients: []string{"a", "b", "c"}, users: []string{config.DefaultKey}, left: 2 + 1},
		{room: 4, clients: []string{"a", "b", "c"}, users: []string{config.DefaultKey, "u1"}, left: 1},
		{room: 5, clients: []string{"a", "b", "c"}, users: []string{config.DefaultKey, "u1", "u2"}, left: 0},
	} {
		got, left := Fit(imported, file, c.room)
		if gc, gu := slices.Sorted(maps.Keys(got.Clients)), slices.Sorted(maps.Keys(got.Users)); !slices.Equal(gc, c.clients) || !slices.Equal(gu, c.users) || left != c.left {
			t.Errorf("room %d: clients %v users %v left %d, want %v %v %d", c.room, gc, gu, left, c.clients, c.users, c.left)
		}
	}
}

type source struct {
	quotas entity.KafkaQuotas
	stats  learner.QuotaImportStats
}

func (s *source) Latest() (entity.KafkaQuotas, learner.QuotaImportStats) { return s.quotas, s.stats }

// Pull reports a set only when the import is new and differs from the last
// good set; a replaced source's counters stay in the totals; turning
// import off forgets the set.
func TestPullAndReplace(t *testing.T) {
	if v := New(nil).View(); v != nil {
		t.Errorf("import off: view %+v, want none", v)
	}
	src := &source{quotas: entity.KafkaQuotas{Clients: clients("a")}, stats: learner.QuotaImportStats{Generation: 1, Failures: 2}}
	k := New(src)
	steps := []struct {
		name  string
		edit  func()
		taken bool
	}{
		{"first import", func() {}, true},
		{"same generation", func() {}, false},
		{"new generation, same set", func() { src.stats.Generation = 2 }, false},
		{"new generation, new set", func() { src.stats.Generation, src.quotas = 3, entity.KafkaQuotas{Clients: clients("a", "b")} }, true},
		{"a failed read keeps the generation", func() { src.stats.Failures = 3 }, false},
	}
	for _, s := range steps {
		s.edit()
		if q, _, taken := k.Pull(); taken != s.taken || len(q.Clients) != len(src.quotas.Clients) {
			t.Errorf("%s: taken %v with %d clients, want %v with %d", s.name, taken, len(q.Clients), s.taken, len(src.quotas.Clients))
		}
	}
	if k.Installed(Held{InUse: src.quotas, Trimmed: 1}) != true || k.Installed(Held{InUse: src.quotas, Trimmed: 1}) != false {
		t.Error("Installed: a new trim is worth a warning once")
	}
	next := &source{stats: learner.QuotaImportStats{Generation: 4, Failures: 1}}
	k.ReplaceSource(next)
	if len(k.Quotas().Clients) != 2 {
		t.Error("a replaced source dropped the last good set before the new one imported")
	}
	k.Pull()
	if v := k.View(); v.Imports != 3+4 || v.Failures != 3+1 || v.LeftOut != 1 {
		t.Errorf("view after a replaced source %+v, want imports 7, failures 4, left out 1", v)
	}
	k.ReplaceSource(nil)
	if len(k.Quotas().Clients) != 0 || k.View() != nil {
		t.Error("import turned off kept the set")
	}
}
