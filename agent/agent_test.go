package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/entity"
	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
)

const baseConfig = `
interfaces: [eth0]
listeners: [9092]
refresh_interval: 1s
rate_window: 1
produce: {capacity: 1000, safety_ratio: 1, activity_threshold: 0, memory_cycles: 3, min_limit: 0}
fetch:   {capacity: 1000, safety_ratio: 0.9, activity_threshold: 0, memory_cycles: 3, min_limit: 0}
`

// baseConfig's capacities are abstract units, far below the default
// min_limit floors, which the floor tests set themselves.

type rig struct {
	t          *testing.T
	a          *Agent
	dp         *fakeDataPath
	sh         *fakeShaper   // the shaper in use
	built      []*fakeShaper // every shaper the factory built
	failShaper error         // when set, the factory fails to build enforcing shapers
	faults     *writeFaults  // given to every shaper the factory builds, and the factory's own call
	clock      *fakeClock
	logs       *bytes.Buffer
}

func newRig(t *testing.T, yaml string) *rig {
	t.Helper()
	return newRigFrom(t, baseConfig+yaml)
}

func newRigFrom(t *testing.T, yaml string) *rig {
	t.Helper()
	return newRigWith(t, yaml, nil)
}

// newRigWith builds a rig whose deps edit may change (nil: none).
func newRigWith(t *testing.T, yaml string, edit func(*Deps)) *rig {
	t.Helper()
	cfg, err := configfile.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, dp: newFakeDataPath(), clock: &fakeClock{t: time.Unix(1_000_000, 0)}, logs: &bytes.Buffer{}}
	log := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The factory builds a fake of the kind the configuration asks for; r.sh
	// is always the one in use.
	newShaper := func(c config.Config) (ShaperChoice, error) {
		if r.failShaper != nil && c.Mode == config.ModeEnforce {
			return ShaperChoice{}, r.failShaper
		}
		if r.faults.hit("NewShaper") {
			return ShaperChoice{}, errPartway
		}
		r.sh = newFakeShaper()
		r.sh.faults = r.faults
		if c.Mode == config.ModeShadow {
			r.sh.kind = "shadow"
		}
		r.built = append(r.built, r.sh)
		return ShaperChoice{Shaper: r.sh, Reason: "test"}, nil
	}
	deps := Deps{DataPath: r.dp, NewShaper: newShaper, Clock: r.clock, Log: log}
	if edit != nil {
		edit(&deps)
	}
	r.a, err = New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var brokerAddr = netip.MustParseAddrPort("198.18.0.1:9092")

func conn(port uint16) maps.ConnKey {
	return maps.ConnKey{Peer: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), port), Local: brokerAddr}
}

func apiVersions() kmsg.Request {
	r := kmsg.NewPtrApiVersionsRequest()
	r.SetVersion(3)
	r.ClientSoftwareName, r.ClientSoftwareVersion = "t", "1"
	return r
}

// learn feeds a request from a client-id on a connection and returns its binding.
func (r *rig) learn(port uint16, clientID string, req kmsg.Request) maps.Binding {
	r.t.Helper()
	if err := r.a.Learn(maps.Sample{Conn: conn(port), Data: kt.Frame(req, 1, kt.Str(clientID)), Complete: true}); err != nil {
		r.t.Fatal(err)
	}
	return r.dp.bindings[conn(port)]
}

func (r *rig) cycle() *status.Snapshot {
	r.t.Helper()
	r.clock.advance(time.Second)
	if err := r.a.Cycle(); err != nil {
		r.t.Fatal(err)
	}
	return r.a.Snapshot()
}

func entityView(s *status.Snapshot, dir entity.Direction, name string) status.EntityView {
	for _, e := range s.Directions[dir].Entities {
		if e.Name == name {
			return e
		}
	}
	return status.EntityView{}
}

func TestAgentNewEntityGetsStandbyLimitAtOnce(t *testing.T) {
	r := newRig(t, `
entities:
  clients:
    core: {consumer_byte_reservation: 300, consumer_byte_rate: 500}
    capped: {consumer_byte_rate: 50}
`)
	core := r.learn(40000, "core", apiVersions())
	plain := r.learn(40001, "random-1", apiVersions())
	capped := r.learn(40002, "capped", apiVersions())
	for _, b := range []maps.Binding{core, plain, capped} {
		if b.Produce == maps.EntityUnknown || b.Produce == maps.NotGoverned || b.Produce != b.Fetch {
			t.Fatalf("binding %+v: both directions should be the client's entity", b)
		}
	}
	// Fetch: H = 1000 − 900 = 100. Standby = min(L, max(res, H)).
	for _, c := range []struct {
		b    maps.Binding
		want float64
	}{{core, 300}, {plain, 100}, {capped, 50}} {
		if got := r.sh.rates[maps.Fetch][c.b.Fetch]; got != c.want {
			t.Errorf("entity %d standby limit %v, want %v", c.b.Fetch, got, c.want)
		}
	}
	// Produce has safety 1: H = 0, so a new entity without reservation waits at the floor.
	if got := r.sh.rates[maps.Produce][plain.Produce]; got != 0 {
		t.Errorf("produce standby with H = 0: %v", got)
	}
	// A client that names itself a broker fetcher is governed all the same:
	// only exempt_peers exempt (and the data path never samples them).
	if b := r.learn(40003, "broker-2-fetcher-0", apiVersions()); b.Produce == maps.NotGoverned || b.Produce == maps.EntityUnknown || b.Produce != b.Fetch {
		t.Errorf("a forged broker fetcher bound to %+v, want its own client entity", b)
	}
}

// A sample whose connection entry lost its binding (evicted, re-entered)
// is bound again at once, though the learner's decision did not change.
func TestAgentRebindsAConnectionThatLostItsBinding(t *testing.T) {
	r := newRig(t, "")
	b := r.learn(40000, "orders", apiVersions())
	delete(r.dp.bindings, conn(40000)) // the data path lost the entry
	sample := maps.Sample{Conn: conn(40000), Data: kt.Frame(apiVersions(), 2, kt.Str("orders")), Complete: true}
	if err := r.a.Learn(sample); err != nil {
		t.Fatal(err)
	}
	if got, ok := r.dp.bindings[conn(40000)]; !ok || got.Produce != b.Produce {
		t.Fatalf("binding after the entry was lost: %+v %v, want %+v", got, ok, b)
	}
	// A sample that shows the binding in place binds nothing.
	delete(r.dp.bindings, conn(40000))
	sample.Bound = [2]uint32{b.Produce, b.Fetch}
	if err := r.a.Learn(sample); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.dp.bindings[conn(40000)]; ok {
		t.Error("a sample whose entry held the binding was bound again")
	}
	if got := r.a.Snapshot(); got != nil && got.Connections.Rebound != 1 {
		t.Errorf("rebound %d, want 1", got.Connections.Rebound)
	}
}

// The scan removes closed connections from the table and frees the
// learner's state of every connection no longer in it.
func TestAgentScanReapsClosedConnectionsAndLearnerState(t *testing.T) {
	r := newRig(t, "")
	for port := uint16(41000); port < 41100; port++ {
		r.learn(port, fmt.Sprint("client-", port), apiVersions())
	}
	r.dp.mu.Lock()
	for port := uint16(41000); port < 41050; port++ { // half closed
		b := r.dp.bindings[conn(port)]
		b.Closing = true
		r.dp.bindings[conn(port)] = b
	}
	for port := uint16(41050); port < 41060; port++ { // ten evicted
		delete(r.dp.bindings, conn(port))
	}
	r.dp.mu.Unlock()
	r.clock.advance(bindingsScanEvery)
	s := r.cycle()
	if len(r.dp.bindings) != 40 || s.Learner.Connections != 40 || s.Connections.Reaped != 50 || s.Connections.Tracked != 40 {
		t.Errorf("after the scan: %d entries, %d learner states, reaped %d, tracked %d; want 40, 40, 50, 40",
			len(r.dp.bindings), s.Learner.Connections, s.Connections.Reaped, s.Connections.Tracked)
	}
}

// Counters become measured rates, the allocator runs on them, and the
// shaper gets each entity's dynamic limit (docs/design.md §4, worked example 1 on fetch).
func TestAgentAllocatesFromCounters(t *testing.T) {
	r := newRig(t, `
entities:
  clients:
    A: {consumer_byte_rate: 800}
    B: {consumer_byte_reservation: 300}
    Cbf: {quota_weight: 0.1}
`)
	ids := map[string]uint32{}
	for i, name := range []string{"A", "B", "Cbf"} {
		ids[name] = r.learn(uint16(41000+i), name, apiVersions()).Fetch
	}
	r.cycle() // baseline
	r.dp.add(maps.Fetch, ids["A"], 800)
	r.dp.add(maps.Fetch, ids["B"], 200)
	r.dp.add(maps.Fetch, ids["Cbf"], 100)
	r.sh.throttled[maps.Fetch][ids["A"]] = true
	s := r.cycle()
	for name, want := range map[string]float64{"A": 636.36, "B": 300, "Cbf": 63.64} {
		if got := r.sh.rates[maps.Fetch][ids[name]]; math.Abs(got-want) > 0.01 {
			t.Errorf("%s: rate %v, want %v", name, got, want)
		}
		if v := entityView(s, entity.Fetch, name); math.Abs(float64(v.DynamicLimit)-want) > 0.01 || v.State != "active" {
			t.Errorf("%s snapshot %+v", name, v)
		}
	}
	if got := r.sh.rates[maps.Fetch][maps.EntityUnknown]; math.Abs(got-100) > 1e-9 {
		t.Errorf("unknown entity held to %v, want H = 100", got)
	}
	if v := entityView(s, entity.Fetch, "A"); float64(v.Rate) != 800 || !v.Throttled {
		t.Errorf("A measured %+v", v)
	}
}

// The first cycle reads every counter slot (its baseline: pinned counters
// may hold an earlier agent's history); later cycles read only the ids the
// registry handed out, an entity learned between cycles included, and an
// entity past them is still charged the bytes counted since the baseline,
// not its history.
func TestAgentReadsCountersOfTheIDsHandedOut(t *testing.T) {
	r := newRig(t, "entities:\n  clients:\n    A: {consumer_byte_reservation: 300}\n")
	next := r.a.registry.Extent()            // the id the next entity gets
	r.dp.add(maps.Fetch, uint32(next), 5000) // history in a slot not handed out yet
	r.cycle()
	if got, want := r.dp.readIDs, []int{len(r.a.gather.counters[0])}; !slices.Equal(got, want) {
		t.Fatalf("first reading %v, want every slot %v", got, want)
	}
	extent := r.a.registry.Extent()
	if extent >= len(r.a.gather.counters[0]) {
		t.Fatalf("the registry's extent %d reaches the last slot: nothing to tell apart", extent)
	}
	r.cycle()
	if got := r.dp.readIDs[1]; got != extent {
		t.Fatalf("second reading up to %d, want the registry's extent %d", got, extent)
	}
	b := r.learn(41000, "newcomer", apiVersions())
	if int(b.Fetch) != next || next != extent {
		t.Fatalf("the newcomer got id %d, want %d, the extent %d: the test needs the slot with history", b.Fetch, next, extent)
	}
	r.dp.add(maps.Fetch, b.Fetch, 700)
	s := r.cycle()
	if got := r.dp.readIDs[2]; got <= int(b.Fetch) {
		t.Fatalf("third reading up to %d: the newcomer's id %d not read", got, b.Fetch)
	}
	if v := entityView(s, entity.Fetch, "newcomer"); float64(v.Rate) != 700 {
		t.Errorf("newcomer measured %v B/s, want 700", v.Rate)
	}
}

// The snapshot shows the last cycle that measured: a cycle whose shaper
// could not be read keeps the one before it (not an older one, though the
// cycle's buffers and the published ones change places each cycle), and
// the next good cycle shows its own figures.
func TestAgentSnapshotKeepsLastMeasuredCycle(t *testing.T) {
	r := newRig(t, `
entities:
  clients:
    A: {consumer_byte_rate: 800}
`)
	id := r.learn(41000, "A", apiVersions()).Fetch
	r.cycle() // baseline
	for _, n := range []uint64{100, 300} {
		r.dp.add(maps.Fetch, id, n)
		if v := entityView(r.cycle(), entity.Fetch, "A"); float64(v.Rate) != float64(n) {
			t.Fatalf("A measured %v, want %d", v.Rate, n)
		}
	}
	r.sh.failHeld = true
	r.dp.add(maps.Fetch, id, 700)
	r.clock.advance(time.Second)
	if err := r.a.Cycle(); err == nil {
		t.Fatal("a cycle that cannot read the shaper succeeded")
	}
	if v := entityView(r.a.Snapshot(), entity.Fetch, "A"); float64(v.Rate) != 300 || float64(v.DynamicLimit) != 800 {
		t.Errorf("after a failed cycle A shows rate %v limit %v; want the last measured cycle's 300 and 800", v.Rate, v.DynamicLimit)
	}
	r.sh.failHeld = false
	r.dp.add(maps.Fetch, id, 500)
	for _, want := range []float64{700 + 500, 0} { // the failed cycle's bytes count in the next
		if v := entityView(r.cycle(), entity.Fetch, "A"); float64(v.Rate) != want {
			t.Errorf("A measured %v, want %v", v.Rate, want)
		}
	}
}

func TestAgentUpdateThresholdFiltersSmallChanges(t *testing.T) {
	r := newRig(t, "update_threshold: 0.05\n")
	id := r.learn(42000, "solo", apiVersions()).Fetch
	r.cycle()
	r.dp.add(maps.Fetch, id, 100)
	r.cycle()
	first := r.sh.rates[maps.Fetch][id]
	writes := r.sh.writes
	// Same use: same limit, nothing rewritten.
	r.dp.add(maps.Fetch, id, 100)
	r.cycle()
	if r.sh.writes != writes {
		t.Errorf("unchanged rates rewritten: %d writes, had %d", r.sh.writes, writes)
	}
	if r.sh.rates[maps.Fetch][id] != first {
		t.Errorf("rate moved without a change")
	}
}

func TestAgentOvercommitLoggedAfterConfirmation(t *testing.T) {
	r := newRig(t, `
entities:
  clients:
    tp-a: {producer_byte_reservation: 600}
    tp-b: {producer_byte_reservation: 600}
`)
	a := r.learn(45000, "tp-a", apiVersions()).Produce
	b := r.learn(45001, "tp-b", apiVersions()).Produce
	r.cycle()
	var alerts []bool
	for i := 0; i < 4; i++ {
		r.dp.add(maps.Produce, a, 500)
		r.dp.add(maps.Produce, b, 500)
		r.sh.throttled[maps.Produce][a], r.sh.throttled[maps.Produce][b] = true, true
		s := r.cycle()
		alerts = append(alerts, s.Directions[entity.Produce].Overcommit)
		if v := entityView(s, entity.Produce, "tp-a"); math.Abs(float64(v.DynamicLimit)-500) > 0.01 {
			t.Errorf("cycle %d: tp-a limit %v, want 500 (reservations scaled at once)", i, v.DynamicLimit)
		}
	}
	// Default confirmation: 3 cycles.
	if alerts[1] || !alerts[2] {
		t.Errorf("overcommit alert %v, want raised on the third cycle", alerts)
	}
	logs := r.logs.String()
	if strings.Count(logs, "overcommit entered") != 1 || !strings.Contains(logs, "scale=0.833") || !strings.Contains(logs, "entities=2") {
		t.Errorf("overcommit log missing or repeated:\n%s", logs)
	}
}

func TestAgentHeartbeatEveryCycle(t *testing.T) {
	r := newRig(t, "")
	for i := 0; i < 3; i++ {
		r.cycle()
	}
	if len(r.dp.heartbeats) != 3 || r.dp.heartbeats[2] <= r.dp.heartbeats[1] {
		t.Errorf("heartbeats %v, want one per cycle, rising", r.dp.heartbeats)
	}
	if r.a.RefreshAge() != 0 {
		t.Errorf("refresh age %v right after a cycle", r.a.RefreshAge())
	}
	r.clock.advance(3 * time.Second)
	if r.a.RefreshAge() != 3*time.Second {
		t.Errorf("refresh age %v, want 3s", r.a.RefreshAge())
	}
}

func TestAgentReload(t *testing.T) {
	r := newRig(t, "")
	id := r.learn(43000, "late-core", apiVersions()).Fetch
	r.cycle()
	r.dp.add(maps.Fetch, id, 10)
	r.sh.throttled[maps.Fetch][id] = true
	r.cycle()
	// A valid file applies from the next cycle: the client gets a reservation.
	cfg, err := configfile.Parse([]byte(baseConfig + "mode: shadow\nentities: {clients: {late-core: {consumer_byte_reservation: 700, consumer_byte_rate: 800}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.a.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	r.dp.add(maps.Fetch, id, 10)
	s := r.cycle()
	if v := entityView(s, entity.Fetch, "late-core"); float64(v.EffectiveReservation) != 700 || float64(v.Limit) != 800 {
		t.Errorf("after reload: %+v", v)
	}
	if r.dp.settings.Shaper != maps.ShaperNone || s.Mode != "shadow" {
		t.Errorf("shadow mode not applied: %+v", r.dp.settings)
	}
	// A configuration the allocator refuses is refused whole, and the
	// running configuration stays. (A file that does not parse never
	// reaches the agent: daemon/reload_test.go.)
	bad := cfg
	bad.Fetch.MemoryCycles = 0
	if err := r.a.Reload(bad); err == nil || !strings.Contains(err.Error(), "nothing changed") {
		t.Errorf("invalid reload: %v", err)
	}
	r.dp.add(maps.Fetch, id, 10)
	if v := entityView(r.cycle(), entity.Fetch, "late-core"); float64(v.EffectiveReservation) != 700 {
		t.Errorf("running configuration lost after a refused reload: %+v", v)
	}
}

func TestAgentReclaimsIdleEntities(t *testing.T) {
	r := newRig(t, "entity_idle_timeout: 10s\n")
	id := r.learn(44000, "short-lived", apiVersions()).Fetch
	delete(r.dp.bindings, conn(44000)) // the connection closed
	r.dp.add(maps.Fetch, id, 10)
	r.cycle()
	for i := 0; i < 12; i++ {
		r.cycle()
	}
	if len(r.dp.resets) != 1 || r.dp.resets[0] != id {
		t.Fatalf("counter resets %v, want entity %d reclaimed", r.dp.resets, id)
	}
	if _, ok := r.sh.rates[maps.Fetch][id]; ok {
		t.Error("reclaimed entity still shaped")
	}
	// Its id is reused by the next new entity, with no memory of the old one.
	if again := r.learn(44001, "next", apiVersions()).Fetch; again != id {
		t.Errorf("released id %d not reused (got %d)", id, again)
	}
	// An entity with a live connection is kept however idle it is.
	kept := r.learn(44002, "idle-but-connected", apiVersions()).Fetch
	for i := 0; i < 70; i++ {
		r.cycle()
	}
	for _, reset := range r.dp.resets {
		if reset == kept {
			t.Error("entity with a live connection reclaimed")
		}
	}
}

// A shaper that queued a burst of an entity running well under its rate
// does not make it claim bandwidth it does not want; one running at its rate
// does.
func TestAgentBurstsBelowTheLimitAreNotThrottled(t *testing.T) {
	r := newRig(t, "")
	slow := r.learn(47000, "bursty-but-slow", apiVersions()).Fetch
	fast := r.learn(47001, "at-its-limit", apiVersions()).Fetch
	r.cycle()
	for i := 0; i < 3; i++ {
		r.dp.add(maps.Fetch, slow, 50)
		r.dp.add(maps.Fetch, fast, uint64(r.sh.rates[maps.Fetch][fast]))
		r.sh.throttled[maps.Fetch][slow], r.sh.throttled[maps.Fetch][fast] = true, true
		r.cycle()
	}
	s := r.a.Snapshot()
	if v := entityView(s, entity.Fetch, "bursty-but-slow"); v.Throttled {
		t.Errorf("an entity at 50 B/s under a %v limit counted as throttled", v.DynamicLimit)
	}
	if v := entityView(s, entity.Fetch, "at-its-limit"); !v.Throttled {
		t.Errorf("an entity running at its limit not counted as throttled: %+v", v)
	}
}

// Configured tenants are registered before any traffic and keep their ids
// and reservations however many client-ids clients invent: unconfigured
// ones draw from their own budget, and each peer may create only
// new_entities_per_peer of them per second; the rest share overflow.
func TestAgentConfiguredTenantsKeepTheirEntities(t *testing.T) {
	r := newRig(t, `
max_entities: 60
max_unconfigured_entities: 40
new_entities_per_peer: 1
entities:
  clients:
    core: {consumer_byte_reservation: 300}
`)
	core, ok := r.a.registry.Lookup(entity.Key{Kind: entity.KindClient, Name: "core"})
	if !ok {
		t.Fatal("a configured client is not registered before its first request")
	}
	if got := r.sh.rates[maps.Fetch][uint32(core)]; got != 300 {
		t.Errorf("core's standby limit %v before any traffic, want its reservation 300", got)
	}
	learnFrom := func(peer netip.Addr, port uint16, clientID string) maps.Binding {
		c := maps.ConnKey{Peer: netip.AddrPortFrom(peer, port), Local: brokerAddr}
		if err := r.a.Learn(maps.Sample{Conn: c, Born: 1, Data: kt.Frame(apiVersions(), 1, kt.Str(clientID)), Complete: true}); err != nil {
			t.Fatal(err)
		}
		return r.dp.bindings[c]
	}
	// One peer inventing ids: ten in its burst, then the rest overflow.
	one := netip.MustParseAddr("198.18.0.9")
	overflowed := 0
	for i := range 100 {
		if b := learnFrom(one, uint16(20000+i), fmt.Sprint("random-", i)); b.Produce == uint32(entity.OverflowID) {
			overflowed++
		}
	}
	if overflowed != 90 {
		t.Errorf("one peer: %d of 100 new ids overflowed, want 90 (burst of 10)", overflowed)
	}
	// Ten thousand ids from many peers: the budget holds.
	for i := range 10000 {
		learnFrom(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), 30000, fmt.Sprint("churn-", i))
	}
	if n := r.a.registry.Unconfigured(); n != 40 {
		t.Errorf("unconfigured entities %d, want the budget 40", n)
	}
	// core connects now and gets its own entity, not overflow.
	if b := learnFrom(netip.MustParseAddr("198.18.0.2"), 40000, "core"); b.Fetch != uint32(core) {
		t.Errorf("core bound to %d, want its id %d", b.Fetch, core)
	}
	r.clock.advance(2 * time.Minute)
	s := r.cycle()
	if s.Overflowed+s.PeerRateRefused < 10000 {
		t.Errorf("overflow counted %d + %d, want ≥ 10000", s.Overflowed, s.PeerRateRefused)
	}
	if !strings.Contains(r.logs.String(), "new entities share the overflow entity") {
		t.Error("overflow was not logged")
	}
}

// Client-chosen strings are data: invalid UTF-8, NUL, ANSI escapes and a
// 32 KiB client-id become entities whose names are valid, printable,
// bounded and distinct, and they pass through metrics and status.
func TestAgentHostileClientIDsAreData(t *testing.T) {
	r := newRig(t, "metrics: {entities: all}\n") // every entity gets series
	hostile := []string{"\xff\xfe", "nul\x00id", "\x1b[2J\x1b[31mred", strings.Repeat("k", 32<<10), "fine-id"}
	for i, id := range hostile {
		r.learn(uint16(45000+i), id, apiVersions())
	}
	r.dp.add(maps.Fetch, 2, 1000)
	s := r.cycle()
	names := map[string]bool{}
	for _, e := range s.Directions[maps.Fetch].Entities {
		if e.Kind != "client" {
			continue
		}
		names[e.Name] = true
		if !utf8.ValidString(e.Name) || len(e.Name) > entity.MaxNameBytes || strings.ContainsAny(e.Name, "\x00\x1b\n") {
			t.Errorf("entity name %q is not safe to show", e.Name)
		}
	}
	if len(names) != len(hostile) || !names["fine-id"] {
		t.Errorf("%d distinct client entities %v, want %d", len(names), names, len(hostile))
	}
	m := NewMetrics(r.a, r.dp, MetricsInfo{})
	if _, err := m.Registry.Gather(); err != nil {
		t.Errorf("scrape with hostile client-ids: %v", err)
	}
	if _, err := json.Marshal(s); err != nil {
		t.Errorf("status with hostile client-ids: %v", err)
	}

	// Restart: an agent that keeps its registry in the data path's pinned
	// map, and a second agent that restores it, show the same safe names
	// under the same ids.
	cfg, err := configfile.Parse([]byte(baseConfig))
	if err != nil {
		t.Fatal(err)
	}
	dp := newStoringDataPath()
	first := agentOn(t, cfg, dp, r.clock)
	for i, id := range hostile {
		req := maps.Sample{Conn: conn(uint16(46000 + i)), Data: kt.Frame(apiVersions(), 1, kt.Str(id)), Complete: true}
		if err := first.Learn(req); err != nil {
			t.Fatal(err)
		}
	}
	saved := map[uint32]string{}
	for id, e := range dp.names {
		saved[id] = e.name
	}
	second := agentOn(t, cfg, dp, r.clock)
	r.clock.advance(time.Second)
	if err := second.Cycle(); err != nil {
		t.Fatal(err)
	}
	restored := map[uint32]string{}
	for _, e := range second.Snapshot().Directions[maps.Fetch].Entities {
		if e.Kind == "client" {
			restored[e.ID] = e.Name
		}
	}
	if len(saved) != len(hostile) || !sameNames(saved, restored) {
		t.Errorf("after a restart the registry is %v, saved was %v", restored, saved)
	}
	for _, name := range restored {
		if !utf8.ValidString(name) || len(name) > entity.MaxNameBytes || strings.ContainsAny(name, "\x00\x1b\n") {
			t.Errorf("restored name %q is not safe to show", name)
		}
	}
}

func sameNames(a, b map[uint32]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// min_limit is a floor under every limit the agent writes: standby limits
// where H is 0, the unknown entity's, and a throttled entity whose weight
// would give it almost nothing.
func TestAgentFloorsEveryLimit(t *testing.T) {
	r := newRigFrom(t, strings.ReplaceAll(baseConfig, "min_limit: 0", "min_limit: 40"))
	plain := r.learn(48000, "plain", apiVersions())
	if got := r.sh.rates[maps.Produce][plain.Produce]; got != 40 {
		t.Errorf("produce standby with H = 0 and min_limit 40: %v, want 40", got)
	}
	r.cycle()
	if got := r.sh.rates[maps.Produce][uint32(entity.UnknownID)]; got != 40 {
		t.Errorf("unknown entity's produce limit %v, want max(H 0, min_limit 40)", got)
	}
	if got := r.sh.rates[maps.Fetch][uint32(entity.UnknownID)]; got != 100 {
		t.Errorf("unknown entity's fetch limit %v, want max(H 100, min_limit 40)", got)
	}
	r = newRigFrom(t, strings.ReplaceAll(baseConfig, "min_limit: 0", "min_limit: 40")+`
entities:
  clients:
    bulk: {quota_weight: 1}
    slow: {quota_weight: 0.001}
`)
	bulk := r.learn(48001, "bulk", apiVersions()).Fetch
	slow := r.learn(48002, "slow", apiVersions()).Fetch
	r.cycle()
	for i := 0; i < 3; i++ {
		for _, id := range []uint32{bulk, slow} {
			r.dp.add(maps.Fetch, id, uint64(r.sh.rates[maps.Fetch][id]))
			r.sh.throttled[maps.Fetch][id] = true
		}
		r.cycle()
	}
	// C = 900: floors 40 each, the other 820 shared 1 : 0.001.
	if got := r.sh.rates[maps.Fetch][slow]; math.Abs(got-40.82) > 0.01 {
		t.Errorf("slow entity's limit %v, want its floor 40 + 820 × 0.001/1.001 = 40.82", got)
	}
	if got := r.sh.rates[maps.Fetch][bulk]; math.Abs(got-859.18) > 0.01 {
		t.Errorf("bulk entity's limit %v, want 859.18", got)
	}
}

func reloadWith(t *testing.T, r *rig, yaml string) error {
	t.Helper()
	cfg, err := configfile.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return r.a.Reload(cfg)
}

// shadow → enforce → shadow by reload: each switch closes the old backend,
// builds the new one, gives it every rate in force, and tells the data
// path; the status names the backend in use.
func TestAgentReloadSwitchesTheShaper(t *testing.T) {
	r := newRig(t, "mode: shadow\n")
	shadow := r.sh
	id := r.learn(49000, "tenant", apiVersions()).Fetch
	r.cycle()
	if r.dp.settings.Shaper != maps.ShaperNone || r.a.Snapshot().Shaper != "shadow" {
		t.Fatalf("shadow start: settings %+v, shaper %s", r.dp.settings, r.a.Snapshot().Shaper)
	}
	if err := reloadWith(t, r, baseConfig+"mode: enforce\n"); err != nil {
		t.Fatal(err)
	}
	if !shadow.closed || r.sh == shadow || r.sh.Kind() != "htb" {
		t.Fatalf("enforce: old closed %v, new %s", shadow.closed, r.sh.Kind())
	}
	if r.dp.settings.Shaper != maps.ShaperHTB {
		t.Errorf("the data path was not told to shape: %+v", r.dp.settings)
	}
	if got := r.sh.rates[maps.Fetch][id]; got != 100 {
		t.Errorf("the new shaper did not get the entity's rate in force: %v, want its standby limit 100", got)
	}
	if s := r.cycle(); s.Shaper != "htb" || s.Mode != "enforce" {
		t.Errorf("status after the switch: shaper %s mode %s", s.Shaper, s.Mode)
	}
	htb := r.sh
	if err := reloadWith(t, r, baseConfig+"mode: shadow\n"); err != nil {
		t.Fatal(err)
	}
	if !htb.closed || r.sh.Kind() != "shadow" || r.dp.settings.Shaper != maps.ShaperNone {
		t.Errorf("back to shadow: htb closed %v, shaper %s, settings %+v", htb.closed, r.sh.Kind(), r.dp.settings)
	}
	// A backend that cannot be built refuses the reload; the old one is
	// built again and keeps its rates.
	r.cycle()
	before := r.sh
	r.failShaper = errors.New("no IFB")
	err := reloadWith(t, r, baseConfig+"mode: enforce\n")
	if err == nil || !strings.Contains(err.Error(), "shaper: no IFB") {
		t.Errorf("unbuildable shaper: err %v", err)
	}
	r.failShaper = nil
	if s := r.cycle(); s.Mode != "shadow" || s.Shaper != "shadow" || r.sh == before || !before.closed || r.sh.rates[maps.Fetch][id] != 100 {
		t.Errorf("after a refused switch: mode %s shaper %s, rebuilt %v, rate %v", s.Mode, s.Shaper, r.sh != before, r.sh.rates[maps.Fetch][id])
	}
}

// Keys bound at start refuse the reload, naming each key; nothing changes.
func TestAgentReloadRefusesRestartOnlyKeys(t *testing.T) {
	r := newRig(t, "")
	err := reloadWith(t, r, baseConfig+"max_entities: 100\nsocket: /run/other.sock\nmode: shadow\nlog_format: json\nattach: clsact\n")
	if err == nil || !strings.Contains(err.Error(), "attach, log_format, max_entities, socket: cannot change while the agent runs") {
		t.Errorf("restart-only keys: %v", err)
	}
	if r.cycle().Mode != "enforce" || len(r.built) != 1 {
		t.Errorf("a refused reload changed something: built %d", len(r.built))
	}
}

// Rates divide by the time that passed between counter reads, not the
// nominal interval. (A reloaded refresh_interval reaches the daemon's
// ticker: daemon/reload_test.go.)
func TestAgentRatesUseTheTimeThatPassed(t *testing.T) {
	r := newRig(t, "")
	id := r.learn(49100, "steady", apiVersions()).Fetch
	r.cycle()
	r.dp.add(maps.Fetch, id, 3000)
	r.clock.advance(2 * time.Second) // a late tick: 3 s since the last read
	s := r.cycle()
	if v := entityView(s, entity.Fetch, "steady"); float64(v.Rate) != 1000 {
		t.Errorf("3000 bytes over 3 s measured as %v B/s, want 1000", v.Rate)
	}
}

// A rate write that fails is counted, retried next cycle, and the
// heartbeat is not written until the data path holds the decided rates.
func TestAgentFailedRateWritesAreRetriedWithoutHeartbeat(t *testing.T) {
	r := newRig(t, "")
	id := r.learn(49200, "tenant", apiVersions()).Fetch
	r.cycle()
	beats := len(r.dp.heartbeats)
	r.sh.failWrite = true
	delete(r.sh.rates[maps.Fetch], id)
	r.a.rates.Forget(maps.Fetch, id) // no rate in force: the next cycle must write one
	r.clock.advance(time.Second)
	if err := r.a.Cycle(); err == nil || r.a.RateWriteFailures() != 1 {
		t.Errorf("failed write: err %v, failures %d", err, r.a.RateWriteFailures())
	}
	if len(r.dp.heartbeats) != beats {
		t.Errorf("heartbeat written although the rates were not")
	}
	r.sh.failWrite = false
	r.cycle()
	if _, ok := r.sh.rates[maps.Fetch][id]; !ok || len(r.dp.heartbeats) != beats+1 {
		t.Errorf("not retried: rate present %v, heartbeats %d (want %d)", ok, len(r.dp.heartbeats), beats+1)
	}
}

// An agent that fails to start closes the shaper and the metadata client
// it built; a reload that changes the metadata client's keys rebuilds it.
func TestAgentOwnsItsShaperAndMetadataClient(t *testing.T) {
	cfg, err := configfile.Parse([]byte(baseConfig))
	if err != nil {
		t.Fatal(err)
	}
	built, stopped := 0, 0
	sh := newFakeShaper()
	deps := Deps{DataPath: newFakeDataPath(), Clock: &fakeClock{t: time.Unix(1_000_000, 0)},
		NewShaper: func(config.Config) (ShaperChoice, error) { return ShaperChoice{Shaper: sh}, nil },
		NewMetadata: func(config.Config) (Metadata, error) {
			built++
			return Metadata{Stop: func() { stopped++ }}, nil
		}}
	bad := cfg
	bad.Fetch.MemoryCycles = 0 // the allocator refuses it after both were built
	if _, err := New(bad, deps); err == nil || !sh.closed || stopped != 1 {
		t.Fatalf("failed start: err %v, shaper closed %v, metadata stopped %d", err, sh.closed, stopped)
	}
	sh = newFakeShaper()
	a, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	next := cfg
	next.Bootstrap = []string{"10.1.2.3:9092"}
	if err := a.Reload(next); err != nil {
		t.Fatal(err)
	}
	if built != 3 || stopped != 2 {
		t.Errorf("bootstrap change: built %d stopped %d, want 3 and 2", built, stopped)
	}
	a.StopMetadata()
	if stopped != 3 {
		t.Errorf("StopMetadata: stopped %d, want 3", stopped)
	}
}

// The shaper's hierarchy gets each direction's capacity, and each entity a
// guarantee: its effective reservation once active, nothing while standby;
// the unknown entity is guaranteed the headroom H. A reload moves the
// capacity.
func TestAgentGuaranteesAndCapacityReachTheShaper(t *testing.T) {
	r := newRig(t, `
entities:
  clients:
    core: {consumer_byte_reservation: 300, consumer_byte_rate: 500}
`)
	if r.sh.capacity != [2]float64{1000, 1000} {
		t.Errorf("capacities %v, want 1000 both ways", r.sh.capacity)
	}
	core := r.learn(40000, "core", apiVersions()).Fetch
	plain := r.learn(40001, "plain", apiVersions()).Fetch
	if g := r.sh.guaranteed[maps.Fetch][core]; g != 0 {
		t.Errorf("standby core guaranteed %v, want 0 until the loop knows it", g)
	}
	r.cycle()
	r.dp.add(maps.Fetch, core, 200)
	r.dp.add(maps.Fetch, plain, 200)
	r.cycle()
	if g := r.sh.guaranteed[maps.Fetch][core]; g != 300 {
		t.Errorf("active core guaranteed %v, want its reservation 300", g)
	}
	if g := r.sh.guaranteed[maps.Fetch][plain]; g != 0 {
		t.Errorf("plain guaranteed %v, want 0", g)
	}
	if g := r.sh.guaranteed[maps.Fetch][uint32(entity.UnknownID)]; g != 100 {
		t.Errorf("unknown guaranteed %v, want H = 100", g)
	}
	if err := reloadWith(t, r, strings.Replace(baseConfig, "fetch:   {capacity: 1000", "fetch:   {capacity: 2000", 1)); err != nil {
		t.Fatal(err)
	}
	if r.sh.capacity[maps.Fetch] != 2000 {
		t.Errorf("after the reload the fetch capacity is %v, want 2000", r.sh.capacity[maps.Fetch])
	}
}

// Java's default client-ids are one per instance; a pattern gives the
// group one entity: three consumers share its id, its bytes and its one
// limit, and survive a restart of the agent under the same id.
func TestAgentClientPatternSharesOneEntity(t *testing.T) {
	r := newRig(t, `
entities:
  clients:
    'consumer-orders-*': {consumer_byte_rate: 300}
`)
	var ids []uint32
	for i, id := range []string{"consumer-orders-1", "consumer-orders-2", "consumer-orders-3"} {
		ids = append(ids, r.learn(uint16(47000+i), id, apiVersions()).Fetch)
	}
	other := r.learn(47010, "consumer-payments-1", apiVersions()).Fetch
	if ids[0] != ids[1] || ids[1] != ids[2] || other == ids[0] {
		t.Fatalf("entity ids %v and %d: the group must share one, others not", ids, other)
	}
	r.cycle()
	for _, id := range ids {
		r.dp.add(maps.Fetch, id, 200)
	}
	s := r.cycle()
	e := entityView(s, entity.Fetch, "consumer-orders-*")
	if e.Kind != "client-pattern" || e.Bytes != 600 || float64(e.Limit) != 300 || !e.Configured {
		t.Errorf("pattern entity %+v: want kind client-pattern, 600 bytes, limit 300, configured", e)
	}
	if float64(e.DynamicLimit) > 300 {
		t.Errorf("the group's dynamic limit %v exceeds its one limit 300", e.DynamicLimit)
	}

	// Restart: the pattern entity is restored under its id, as its kind.
	cfg, err := configfile.Parse([]byte(baseConfig + "entities: {clients: {'consumer-orders-*': {consumer_byte_rate: 300}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	dp := newStoringDataPath()
	first := agentOn(t, cfg, dp, r.clock)
	pattern := entity.Key{Kind: entity.KindClientPattern, Name: "consumer-orders-*"}
	before, _ := first.registry.Lookup(pattern)
	second := agentOn(t, cfg, dp, r.clock)
	if after, ok := second.registry.Lookup(pattern); !ok || after != before {
		t.Errorf("after a restart the pattern entity has id %d (%v), want %d", after, ok, before)
	}
}

// agentOn builds an agent on dp with a fake shaper: a second one on the
// same storing data path is a restarted agent restoring the registry.
func agentOn(t *testing.T, cfg config.Config, dp DataPath, clock *fakeClock) *Agent {
	t.Helper()
	a, err := New(cfg, Deps{DataPath: dp, Shaper: newFakeShaper(), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return a
}
