package objectives

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
)

// learnFetchLead runs the cross world until its objective leads with fetch
// and has released (the episode that taught it).
func learnFetchLead(t *testing.T) *crossWorld {
	w := newCrossWorld(t)
	w.until(200, "the move to fetch", func() bool { return w.fetch.Enabled })
	w.until(30, "the p99 back under", func() bool { return w.fetch.Cap <= w.hurtAbove })
	w.contended = false
	w.until(300, "the release", func() bool { return !w.fetch.Enabled && w.tr.Views()[0].State == "closed" })
	return w
}

// A lead learned before a restart is the restarted agent's: its first
// episode holds fetch at once, without failing on produce first.
func TestLeadOutlivesARestart(t *testing.T) {
	w := learnFetchLead(t)
	leads, changed := w.tr.Leads()
	want := Lead{Objective: entity.Objective{Key: client("core"), Direction: entity.Produce, P99: 50 * time.Millisecond}, Lead: entity.Fetch}
	if len(leads) != 1 || leads[0] != want || !changed {
		t.Fatalf("leads %+v (changed %v): want %+v, changed", leads, changed, want)
	}
	w.tr.LeadsSaved(leads)
	if _, changed := w.tr.Leads(); changed {
		t.Fatal("leads changed right after they were saved")
	}
	file := EncodeLeads(leads)

	// The restart: a new tracker, the same configuration, the file read back.
	back, err := DecodeLeads(file)
	if err != nil {
		t.Fatal(err)
	}
	r := newCrossWorld(t)
	if n := r.tr.RestoreLeads(back); n != 1 {
		t.Fatalf("restored %d leads from %s: want 1", n, file)
	}
	if _, changed := r.tr.Leads(); changed {
		t.Fatal("restored leads read as changed: they would be written back for nothing")
	}
	r.until(60, "the first episode", func() bool { return r.produce.Enabled || r.fetch.Enabled })
	if !r.fetch.Enabled || r.produce.Enabled {
		t.Fatalf("restarted: produce %+v, fetch %+v: want fetch held first", r.produce, r.fetch)
	}

	// Without the file the restarted agent starts from produce (what the
	// file is for: the mutation that ignores it fails above).
	fresh := newCrossWorld(t)
	fresh.until(60, "the first episode", func() bool { return fresh.produce.Enabled || fresh.fetch.Enabled })
	if !fresh.produce.Enabled {
		t.Fatalf("without leads: produce %+v, fetch %+v: want produce held first", fresh.produce, fresh.fetch)
	}
}

// An objective configured differently (another p99) starts from its own
// direction: what it learned was about the old one.
func TestLeadOfAChangedObjectiveIsNotRestored(t *testing.T) {
	w := learnFetchLead(t)
	leads, _ := w.tr.Leads()
	tr := New(8, slog.New(slog.DiscardHandler))
	tr.Sync(objectivesOf(map[string]time.Duration{"core": 60 * time.Millisecond}))
	tr.AssignSeries(newRegistry(), config.Metrics{Entities: config.MetricsConfigured, MaxEntitySeries: 10})
	if n := tr.RestoreLeads(leads); n != 0 {
		t.Fatalf("restored %d leads onto a changed objective", n)
	}
	if got, changed := tr.Leads(); len(got) != 0 || changed {
		t.Fatalf("leads %+v (changed %v): want none", got, changed)
	}
	// A reload that changes the objective drops its lead: the list changes
	// and is saved again without it.
	w.tr.LeadsSaved(leads)
	w.tr.Sync(objectivesOf(map[string]time.Duration{"core": 60 * time.Millisecond}))
	if got, changed := w.tr.Leads(); len(got) != 0 || !changed {
		t.Fatalf("after the reload: leads %+v (changed %v): want none, changed", got, changed)
	}
}

func TestDecodeLeadsRefusesWhatSluiceDidNotWrite(t *testing.T) {
	good := `{"version": 1, "leads": [{"kind": 2, "name": "core", "direction": "produce", "p99": "50ms", "lead": "fetch"}]}`
	if l, err := DecodeLeads([]byte(good)); err != nil || len(l) != 1 || l[0].Lead != entity.Fetch || l[0].Objective.P99 != 50*time.Millisecond {
		t.Fatalf("%s: %+v, %v", good, l, err)
	}
	for name, c := range map[string]struct{ file, says string }{
		"not json":        {`{"version": 1, "leads": [`, "not a leads file"},
		"newer version":   {`{"version": 2, "leads": []}`, "version 2"},
		"no version":      {`{"leads": []}`, "version 0"},
		"unknown kind":    {`{"version": 1, "leads": [{"kind": 0, "name": "x", "direction": "produce", "p99": "5ms", "lead": "fetch"}]}`, "not a configured entity"},
		"kind past last":  {`{"version": 1, "leads": [{"kind": 200, "name": "x", "direction": "produce", "p99": "5ms", "lead": "fetch"}]}`, "not a configured entity"},
		"empty name":      {`{"version": 1, "leads": [{"kind": 2, "name": "", "direction": "produce", "p99": "5ms", "lead": "fetch"}]}`, "not a configured entity"},
		"bad direction":   {`{"version": 1, "leads": [{"kind": 2, "name": "x", "direction": "sideways", "p99": "5ms", "lead": "fetch"}]}`, "produce or fetch"},
		"bad lead":        {`{"version": 1, "leads": [{"kind": 2, "name": "x", "direction": "produce", "p99": "5ms", "lead": ""}]}`, "produce or fetch"},
		"negative p99":    {`{"version": 1, "leads": [{"kind": 2, "name": "x", "direction": "produce", "p99": "-5ms", "lead": "fetch"}]}`, "positive duration"},
		"p99 not a time":  {`{"version": 1, "leads": [{"kind": 2, "name": "x", "direction": "produce", "p99": "soon", "lead": "fetch"}]}`, "positive duration"},
		"larger than cap": {`{"version": 1, "leads": []}` + strings.Repeat(" ", MaxLeadsFileBytes), "more than"},
	} {
		if l, err := DecodeLeads([]byte(c.file)); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %+v, %v: want an error saying %q", name, l, err, c.says)
		}
	}
	// What EncodeLeads writes, DecodeLeads reads back as it was.
	leads := []Lead{
		{Objective: entity.Objective{Key: entity.Key{Kind: entity.KindUser, Name: "User:alice"}, Direction: entity.Fetch, P99: 120 * time.Millisecond}, Lead: entity.Produce},
		{Objective: entity.Objective{Key: client("core"), Direction: entity.Produce, P99: 7500 * time.Microsecond}, Lead: entity.Fetch},
	}
	back, err := DecodeLeads(EncodeLeads(leads))
	if err != nil || len(back) != 2 || back[0] != leads[0] || back[1] != leads[1] {
		t.Fatalf("round trip: %+v, %v: want %+v", back, err, leads)
	}
}

func FuzzDecodeLeads(f *testing.F) {
	f.Add([]byte(`{"version": 1, "leads": [{"kind": 2, "name": "core", "direction": "produce", "p99": "50ms", "lead": "fetch"}]}`))
	f.Add([]byte(`{"version": 1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		leads, err := DecodeLeads(data)
		if err != nil {
			return
		}
		// Whatever it accepts, it writes back and reads back the same.
		back, err := DecodeLeads(EncodeLeads(leads))
		if err != nil || len(back) != len(leads) {
			t.Fatalf("accepted %q as %+v, then %+v, %v", data, leads, back, err)
		}
		for i := range leads {
			if back[i] != leads[i] {
				t.Fatalf("accepted %q: %+v came back as %+v", data, leads[i], back[i])
			}
		}
	})
}
