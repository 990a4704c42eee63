package agent

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/status"
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
	if n := r.a.Snapshot().ObjectiveTransitions; n < 3 {
		t.Errorf("transitions %d, want open, half open and closed", n)
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
	with := baseConfig + "entities: {clients: {core: {producer_byte_reservation: 100, produce_latency_objective: {p99: 50ms}}}}\n"
	if err := reloadWith(t, r, with); err != nil {
		t.Fatal(err)
	}
	if s := r.cycle(); len(s.Objectives) != 1 || s.Objectives[0].Entity != "client:core" || s.Objectives[0].ObjectiveMillis != 50 {
		t.Fatalf("after the reload: %+v", s.Objectives)
	}
	// Open the breaker, then reload: a breaker built anew would be closed.
	core := r.learn(46000, "core", apiVersions())
	bulk := r.learn(46001, "bulk", apiVersions())
	var s *status.Snapshot
	for i := 0; i < 40; i++ {
		if s = stepProduce(r, map[maps.Binding]uint64{core: 100, bulk: 800}, map[maps.Binding]time.Duration{core: 200 * time.Millisecond}); s.Objectives[0].State == "open" {
			break
		}
	}
	if s.Objectives[0].State != "open" {
		t.Fatalf("objective missed for 40 s: %+v", s.Objectives)
	}
	if err := reloadWith(t, r, with+"update_threshold: 0.1\n"); err != nil {
		t.Fatal(err)
	}
	if o := r.cycle().Objectives; len(o) != 1 || o[0].State != "open" || o[0].Level >= 1 {
		t.Errorf("an unchanged objective lost its breaker across a reload: %+v", o)
	}
	if err := reloadWith(t, r, baseConfig); err != nil {
		t.Fatal(err)
	}
	if s := r.cycle(); len(s.Objectives) != 0 {
		t.Errorf("a dropped objective stayed: %+v", s.Objectives)
	}
}

// stepProduce is one cycle of produce traffic (bytes per client) and, for
// each client in slow, a window's worth of its requests at that latency.
func stepProduce(r *rig, bytes map[maps.Binding]uint64, latencies map[maps.Binding]time.Duration) *status.Snapshot {
	for b, n := range bytes {
		r.dp.add(maps.Produce, b.Produce, n)
	}
	for b, d := range latencies {
		for i := 0; i < 30; i++ {
			r.a.ObserveLatency(measured([2]uint32{b.Produce, b.Fetch}, 0, d))
		}
	}
	return r.cycle()
}

// The objective's hold is an allocator input (allocator.Trim): at the
// level it opens at (0.8) the backfill is held to 80 % of what
// best-effort traffic used, not less however many nearly idle
// best-effort clients share the direction (capping the sum of limits
// after the allocation held it to 58 % beside 4 of them, 48 % beside 50:
// allocator/trim_test.go), and the objective entity is not trimmed.
func TestLatencyObjectiveHoldsBackfillToItsLevel(t *testing.T) {
	r := newRig(t, "entities: {clients: {core: {producer_byte_reservation: 100, produce_latency_objective: {p99: 50ms}}}}\n")
	core := r.learn(46000, "core", apiVersions())
	bulk := r.learn(46001, "bulk", apiVersions())
	bytes := map[maps.Binding]uint64{core: 100, bulk: 800}
	for i := 0; i < 4; i++ { // nearly idle: a byte a second keeps them active
		bytes[r.learn(uint16(46010+i), "idle"+strconv.Itoa(i), apiVersions())] = 1
	}
	r.cycle()
	var s *status.Snapshot
	for i := 0; i < 40; i++ {
		s = stepProduce(r, bytes, map[maps.Binding]time.Duration{core: 200 * time.Millisecond})
		if s.Objectives[0].State == "open" {
			break
		}
	}
	if s.Objectives[0].State != "open" || s.Objectives[0].Level != 0.8 {
		t.Fatalf("objective missed for 40 s: %+v", s.Objectives)
	}
	// Best-effort used 804 when it opened: the cap is 0.8 × 804, of which
	// the idle clients claim their byte each.
	b := entityView(s, entity.Produce, "bulk")
	if share := float64(b.DynamicLimit) / 800; math.Abs(share-0.8) > 0.01 || b.HeldBy == "" {
		t.Errorf("bulk held to %v (%.1f %% of its 800), held by %q: want 80 %%", b.DynamicLimit, 100*share, b.HeldBy)
	}
	if c := entityView(s, entity.Produce, "core"); c.HeldBy != "" {
		t.Errorf("the objective entity was trimmed: %+v", c)
	}
}

// Every objective entity of a direction is protected (allocator.Trim
// never takes from it): one objective's hold never trims another's
// tenant, whatever its reservation covers. Ledger, its objective met,
// sends past its reservation; core's hold takes only from the backfill.
func TestLatencyObjectivesDoNotTrimEachOther(t *testing.T) {
	r := newRig(t, "entities: {clients: {core: {producer_byte_reservation: 50, produce_latency_objective: {p99: 50ms}}, ledger: {producer_byte_reservation: 10, produce_latency_objective: {p99: 50ms}}}}\n")
	core := r.learn(46000, "core", apiVersions())
	ledger := r.learn(46001, "ledger", apiVersions())
	bulk := r.learn(46002, "bulk", apiVersions())
	bytes := map[maps.Binding]uint64{core: 100, ledger: 300, bulk: 500}
	r.cycle()
	free := stepProduce(r, bytes, nil)
	ledgerFree := entityView(free, entity.Produce, "ledger").DynamicLimit
	var s *status.Snapshot
	for i := 0; i < 40; i++ {
		s = stepProduce(r, bytes, map[maps.Binding]time.Duration{core: 200 * time.Millisecond, ledger: 5 * time.Millisecond})
	}
	var open int
	for _, o := range s.Objectives {
		if o.State == "open" {
			open++
		}
	}
	if open != 1 {
		t.Fatalf("want core's objective open and ledger's closed: %+v", s.Objectives)
	}
	for _, in := range r.a.dirs[entity.Produce].pub.inputs { // the last cycle's
		if want := in.Slot == core.Produce || in.Slot == ledger.Produce; in.Protected != want {
			t.Errorf("entity %d protected %v, want %v (core %d and ledger %d have objectives)", in.Slot, in.Protected, want, core.Produce, ledger.Produce)
		}
	}
	if l := entityView(s, entity.Produce, "ledger"); l.HeldBy != "" || l.DynamicLimit < ledgerFree-1e-9 {
		t.Errorf("ledger, another objective's tenant, trimmed by core's objective: %+v (free %v)", l, ledgerFree)
	}
	if b := entityView(s, entity.Produce, "bulk"); b.HeldBy == "" || b.DynamicLimit >= 500 {
		t.Errorf("the best-effort backfill was not held: %+v", b)
	}
}

// fetchMeasured is a fetch of the connection bound to (produce, fetch)
// answered d after its last byte, with request and response sizes.
func fetchMeasured(b maps.Binding, d time.Duration, request, response uint32) maps.LatencyEvent {
	ev := measured([2]uint32{b.Produce, b.Fetch}, 1, d)
	ev.RequestSize, ev.ResponseSize = request, response
	return ev
}

// An idle consumer's long polls (empty responses after fetch.max.wait.ms,
// 500 ms) do not trip a 100 ms fetch objective: it judges only fetches
// that returned data, judged from the sizes the data path sends with each
// measurement (through ObserveLatency). The same polls counted (no sizes,
// or a request size unknown: the behaviour before) trip it; slow fetches
// that return data still do.
func TestFetchObjectiveIgnoresLongPolls(t *testing.T) {
	run := func(t *testing.T, d time.Duration, request, response uint32) *status.Snapshot {
		r := newRig(t, "entities: {clients: {reader: {consumer_byte_reservation: 100, fetch_latency_objective: {p99: 100ms}}}}\n")
		reader := r.learn(46000, "reader", apiVersions())
		bulk := r.learn(46001, "bulk", apiVersions())
		r.cycle()
		var s *status.Snapshot
		for i := 0; i < 40; i++ {
			r.dp.add(maps.Fetch, bulk.Fetch, 500)
			for j := 0; j < 30; j++ {
				r.a.ObserveLatency(fetchMeasured(reader, d, request, response))
			}
			s = r.cycle()
		}
		return s
	}
	// An incremental fetch session's idle poll: a 60-byte request, an
	// 18-byte response with no partition in it.
	if s := run(t, 500*time.Millisecond, 60, 18); s.Objectives[0].State != "closed" || s.Objectives[0].Requests != 0 {
		t.Errorf("long polls judged: %+v", s.Objectives)
	}
	// A full fetch of 100 idle partitions: 3,360 bytes asked, 3,750 back.
	if s := run(t, 500*time.Millisecond, 3360, 3750); s.Objectives[0].State != "closed" {
		t.Errorf("full-fetch long polls judged: %+v", s.Objectives)
	}
	if s := run(t, 500*time.Millisecond, 0, 0); s.Objectives[0].State != "open" {
		t.Errorf("without sizes every fetch counts and the long polls trip it; got %+v", s.Objectives)
	}
	// A request size the data path did not know (0: a request pending
	// across an upgrade) counts whatever the response.
	if s := run(t, 500*time.Millisecond, 0, 18); s.Objectives[0].State != "open" {
		t.Errorf("polls of unknown request size not judged: %+v", s.Objectives)
	}
	// One small batch (75 bytes) in a session's response, late.
	if s := run(t, 500*time.Millisecond, 60, 145); s.Objectives[0].State != "open" {
		t.Errorf("slow fetches that returned data did not trip it: %+v", s.Objectives)
	}
	if s := run(t, 500*time.Millisecond, 60, 18+61+70); s.Objectives[0].State != "open" {
		t.Errorf("slow fetches that returned a batch did not trip it: %+v", s.Objectives)
	}
}

// An objective entity gets its own latency series even when the series
// budget was spent before it arrived, so its objective is judged.
func TestObjectiveEntityAlwaysHasSeries(t *testing.T) {
	r := newRig(t, "metrics: {entities: all, max_entity_series: 2}\n")
	for i := 0; i < 3; i++ {
		r.learn(uint16(46010+i), "early"+strconv.Itoa(i), apiVersions())
	}
	r.cycle()
	if err := reloadWith(t, r, baseConfig+"metrics: {entities: all, max_entity_series: 2}\nentities: {clients: {core: {producer_byte_reservation: 100, produce_latency_objective: {p99: 50ms}}}}\n"); err != nil {
		t.Fatal(err)
	}
	core := r.learn(46000, "core", apiVersions())
	r.cycle()
	if !r.a.objectives.OwnSeries(core.Produce) {
		t.Fatal("the objective entity has no series of its own: its requests go to <others>")
	}
	for i := 0; i < 30; i++ {
		r.a.ObserveLatency(measured([2]uint32{core.Produce, core.Fetch}, 0, 5*time.Millisecond))
	}
	s := r.cycle()
	if s.Objectives[0].Requests != 30 {
		t.Errorf("objective judged %d requests, want 30", s.Objectives[0].Requests)
	}
	held := 0
	for id := entity.ID(0); int(id) < r.a.registry.Limit(); id++ {
		if r.a.objectives.OwnSeries(uint32(id)) && id != entity.UnknownID && id != entity.OverflowID {
			held++
		}
	}
	if held > 3 {
		t.Errorf("%d entities with series, want the budget of 2 and the objective's", held)
	}
}

// A produce objective whose p99 only the fetch direction's best-effort
// traffic moves (catch-up reads on the broker's disk): through the
// cycle, the produce hold proves ineffective (no best-effort producer to
// hold), the objective then holds fetch, so the reader's fetch limit
// comes down with held_by naming core's produce objective, core's own
// fetches untouched; status says fetch is held.
func TestLatencyObjectiveHoldsTheOtherDirection(t *testing.T) {
	r := newRig(t, "entities: {clients: {core: {producer_byte_reservation: 100, produce_latency_objective: {p99: 50ms}}}}\n")
	core := r.learn(46000, "core", apiVersions())
	reader := r.learn(46001, "reader", apiVersions())
	r.cycle()
	var s *status.Snapshot
	free := 0.0
	for i := 0; i < 300; i++ {
		r.dp.add(maps.Fetch, reader.Fetch, 800)
		r.dp.add(maps.Fetch, core.Fetch, 50)
		d := 200 * time.Millisecond
		if s != nil && s.Objectives[0].Trims == "fetch" && entityView(s, entity.Fetch, "reader").DynamicLimit <= 500 {
			d = 5 * time.Millisecond // held, the reader's reads leave the disk to core
		}
		s = stepProduce(r, map[maps.Binding]uint64{core: 100}, map[maps.Binding]time.Duration{core: d})
		if i == 0 {
			free = float64(entityView(s, entity.Fetch, "reader").DynamicLimit)
		}
		if s.Objectives[0].Trims == "fetch" && d == 5*time.Millisecond {
			break
		}
	}
	o := s.Objectives[0]
	rd, cf := entityView(s, entity.Fetch, "reader"), entityView(s, entity.Fetch, "core")
	if o.Trims != "fetch" || o.Releases["ineffective"] != 1 || float64(rd.DynamicLimit) > 500 || float64(rd.DynamicLimit) >= free {
		t.Fatalf("after 300 s: objective %+v, reader's fetch limit %v (free %v)", o, rd.DynamicLimit, free)
	}
	if !strings.Contains(rd.HeldBy, "core's produce latency objective") || !strings.Contains(rd.HeldBy, "holding fetch") || cf.HeldBy != "" {
		t.Errorf("reader held by %q, core's fetch by %q: want the reader by core's produce objective, holding fetch; core's fetch not", rd.HeldBy, cf.HeldBy)
	}
}
