package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/objectives"
)

// fakeLeads is the daemon's leads file in memory.
type fakeLeads struct {
	load             []objectives.Lead
	loadErr, saveErr error
	saved            [][]objectives.Lead
}

func (f *fakeLeads) LoadLeads() ([]objectives.Lead, error) { return f.load, f.loadErr }
func (f *fakeLeads) SaveLeads(l []objectives.Lead) error {
	if f.saveErr != nil {
		return f.saveErr
	}
	f.saved = append(f.saved, l)
	return nil
}

const coreObjective = "entities: {clients: {core: {producer_byte_reservation: 100, produce_latency_objective: {p99: 50ms}}}}\n"

func coreLeadsWithFetch(p99 time.Duration) []objectives.Lead {
	return []objectives.Lead{{Objective: entity.Objective{Key: entity.Key{Kind: entity.KindClient, Name: "core"}, Direction: entity.Produce, P99: p99}, Lead: entity.Fetch}}
}

// A restarted agent takes back the lead its objective learned (it holds
// fetch first), a lead of another objective is not anyone's, and what it
// restored is not written back for nothing.
func TestAgentRestoresObjectiveLeads(t *testing.T) {
	store := &fakeLeads{load: append(coreLeadsWithFetch(50*time.Millisecond), coreLeadsWithFetch(70*time.Millisecond)...)}
	r := newRigWith(t, baseConfig+coreObjective, func(d *Deps) { d.Leads = store })
	s := r.cycle()
	if len(s.Objectives) != 1 || s.Objectives[0].Trims != "fetch" {
		t.Fatalf("objectives %+v: want core's leading with fetch", s.Objectives)
	}
	if !strings.Contains(r.logs.String(), "lead directions restored") {
		t.Errorf("log %q: want the restore said", r.logs.String())
	}
	r.cycle()
	if len(store.saved) != 0 {
		t.Fatalf("saved %+v: nothing changed since the restore", store.saved)
	}
	// A reload that changes the objective drops what it learned, and the
	// file follows.
	if err := reloadWith(t, r, baseConfig+strings.Replace(coreObjective, "50ms", "60ms", 1)); err != nil {
		t.Fatal(err)
	}
	s = r.cycle()
	if s.Objectives[0].Trims != "produce" || len(store.saved) != 1 || len(store.saved[0]) != 0 {
		t.Fatalf("after the reload: objectives %+v, saved %+v: want produce, the leads saved empty once", s.Objectives, store.saved)
	}
}

// A leads file that cannot be read costs only the learning: the agent
// starts, says so, and the objective starts from its own direction. A
// write that fails is said once and tried again each cycle.
func TestAgentWithoutItsLeads(t *testing.T) {
	store := &fakeLeads{load: coreLeadsWithFetch(50 * time.Millisecond), loadErr: errors.New("objective-leads.json: version 9")}
	r := newRigWith(t, baseConfig+coreObjective, func(d *Deps) { d.Leads = store })
	if s := r.cycle(); s.Objectives[0].Trims != "produce" || !strings.Contains(r.logs.String(), "version 9") {
		t.Fatalf("objectives %+v, log %q: want produce, the error logged", s.Objectives, r.logs.String())
	}

	store = &fakeLeads{load: coreLeadsWithFetch(50 * time.Millisecond), saveErr: errors.New("read-only file system")}
	r = newRigWith(t, baseConfig+coreObjective, func(d *Deps) { d.Leads = store })
	if err := reloadWith(t, r, baseConfig+strings.Replace(coreObjective, "50ms", "60ms", 1)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.cycle()
	}
	if n := strings.Count(r.logs.String(), "read-only file system"); n != 1 {
		t.Fatalf("the failed write logged %d times in 3 cycles: want once", n)
	}
	store.saveErr = nil
	r.cycle()
	if len(store.saved) != 1 || len(store.saved[0]) != 0 {
		t.Fatalf("saved %+v once the store works again: want the empty list once", store.saved)
	}
}
