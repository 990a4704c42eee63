package agent

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/maps"
)

// A produce latency objective missed for three windows opens its breaker:
// the best-effort producer's limit comes down (never the reserved
// tenant's), status says who holds it and why; once the objective holds
// again the breaker probes after its cool-down and closes, and the limit
// comes back.
func TestLatencyObjectiveTakesFromBestEffort(t *testing.T) {
	r := newRig(t, "entities: {clients: {core: {producer_byte_reservation: 100, produce_latency_objective: {p99: 50ms}}}}\n")
	core := r.learn(46000, "core", apiVersions())
	bulk := r.learn(46001, "bulk", apiVersions())
	r.cycle()
	step := func(coreLatency time.Duration) {
		r.dp.add(maps.Produce, core.Produce, 100)
		r.dp.add(maps.Produce, bulk.Produce, 800)
		for i := 0; i < 30; i++ { // a window's worth of core's requests, measured at the NIC
			r.a.ObserveLatency(measured([2]uint32{core.Produce, core.Fetch}, 0, coreLatency))
		}
		r.cycle()
	}
	for i := 0; i < 3; i++ {
		step(5 * time.Millisecond)
	}
	s := r.cycle()
	free := entityView(s, entity.Produce, "bulk").DynamicLimit
	if len(s.Objectives) != 1 || s.Objectives[0].State != "closed" || entityView(s, entity.Produce, "bulk").HeldBy != "" {
		t.Fatalf("objective met: %+v, bulk %+v", s.Objectives, entityView(s, entity.Produce, "bulk"))
	}
	// Three disjoint bad windows (20 s) open it; each further one takes
	// more (the level falls by 0.8 from the best-effort usage when it
	// opened).
	for i := 0; i < 25; i++ {
		step(200 * time.Millisecond)
	}
	s = r.a.Snapshot()
	b := entityView(s, entity.Produce, "bulk")
	if s.Objectives[0].State != "open" || b.HeldBy == "" || b.DynamicLimit >= free {
		t.Fatalf("objective missed: %+v; bulk limit %v (free %v), held by %q", s.Objectives, b.DynamicLimit, free, b.HeldBy)
	}
	if c := entityView(s, entity.Produce, "core"); c.HeldBy != "" || c.DynamicLimit < c.EffectiveReservation {
		t.Errorf("the reserved tenant was trimmed: %+v", c)
	}
	// Good again: the breaker waits out its cool-down (10 s), probes (a step under the level that failed, for 80 s), and
	// closes after three good windows; the 10 s window forgets the bad ones.
	for i := 0; i < 200 && r.a.Snapshot().Objectives[0].State != "closed"; i++ {
		step(5 * time.Millisecond)
	}
	s = r.a.Snapshot()
	if s.Objectives[0].State != "closed" || entityView(s, entity.Produce, "bulk").HeldBy != "" {
		t.Fatalf("objective met again: %+v, bulk %+v", s.Objectives, entityView(s, entity.Produce, "bulk"))
	}
	if r.a.objectiveTransitions < 3 {
		t.Errorf("transitions %d, want open, half open and closed", r.a.objectiveTransitions)
	}
}

// A reload that adds an objective puts it in force at once; one that keeps
// it keeps its breaker; one that drops it ends it.
func TestLatencyObjectiveFollowsReloads(t *testing.T) {
	r := newRig(t, "")
	r.cycle()
	if s := r.cycle(); len(s.Objectives) != 0 {
		t.Fatalf("objectives with none configured: %+v", s.Objectives)
	}
	with := baseConfig + "entities: {clients: {core: {produce_latency_objective: {p99: 50ms}}}}\n"
	if err := reloadWith(t, r, with); err != nil {
		t.Fatal(err)
	}
	first := r.a.objectives[0].breaker
	if s := r.cycle(); len(s.Objectives) != 1 || s.Objectives[0].Entity != "client:core" || s.Objectives[0].ObjectiveMillis != 50 {
		t.Fatalf("after the reload: %+v", s.Objectives)
	}
	if err := reloadWith(t, r, with+"update_threshold: 0.1\n"); err != nil {
		t.Fatal(err)
	}
	if len(r.a.objectives) != 1 || r.a.objectives[0].breaker != first {
		t.Error("an unchanged objective lost its breaker across a reload")
	}
	if err := reloadWith(t, r, baseConfig); err != nil {
		t.Fatal(err)
	}
	if s := r.cycle(); len(s.Objectives) != 0 {
		t.Errorf("a dropped objective stayed: %+v", s.Objectives)
	}
}
