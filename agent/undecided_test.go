package agent

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/kafka"
	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
	"github.com/sluice-dev/sluice/maps"
)

// A connection no request has decided yet is held to the unresolved entity
// (the most restrictive limits configured), never left at the unknown
// entity (the headroom H): a SASL connection before its login, one whose
// first sample could not be parsed, one whose sample ended inside its
// header. A connection bound to an entity keeps it until a request
// decides otherwise; an exempt peer's entry is never touched.
func TestUndecidedConnectionIsHeldToUnresolved(t *testing.T) {
	cfg, err := configfile.Parse([]byte(identityConfig))
	if err != nil {
		t.Fatal(err)
	}
	dp := newIdentityDataPath()
	a := agentOn(t, cfg, dp, &fakeClock{})
	learn := func(s maps.Sample) (maps.Binding, error) {
		t.Helper()
		err := a.Learn(s)
		return dp.bindings[s.Conn], err
	}
	unresolvedID := func() uint32 { return idOf(t, a, entity.UnresolvedKey) }

	// SASL_PLAINTEXT: ApiVersions and the handshake decide nothing.
	sasl := maps.ConnKey{Peer: conn(41000).Peer, Local: netip.MustParseAddrPort("198.18.0.1:9094")}
	for _, req := range []kmsg.Request{apiVersions(), saslHandshake()} {
		b, err := learn(dp.sample(sasl, "app", req))
		if err != nil {
			t.Fatal(err)
		}
		if b.Produce != unresolvedID() || b.Fetch != unresolvedID() {
			t.Fatalf("SASL connection before its login (%s): bound %+v, want unresolved %d both ways", kafka.APIName(req.Key()), b, unresolvedID())
		}
	}
	b, _ := learn(dp.sample(sasl, "app", saslPlain("alice")))
	if alice := idOf(t, a, entity.Key{Kind: entity.KindUser, Name: "alice"}); b.Produce != alice || b.Fetch != alice {
		t.Fatalf("after the login: %+v, want alice's %d", b, alice)
	}
	if n := a.identity.learner.Stats.Unresolved; n != 0 {
		t.Errorf("the SASL exchange before a login counted %d unresolved requests, want 0", n)
	}

	// A first sample the parser refuses (an ApiVersions version no client
	// sends): the error is returned, and the connection held.
	odd := conn(41001)
	bad := kt.Frame(apiVersions(), 1, kt.Str("app"))
	bad[7] = 99 // version 99
	b, err = learn(maps.Sample{Conn: odd, Born: 1, Data: bad, Complete: true})
	if !errors.Is(err, kafka.ErrUnknownAPI) {
		t.Errorf("unparseable sample: error %v, want ErrUnknownAPI", err)
	}
	if b.Produce != unresolvedID() || b.Fetch != unresolvedID() {
		t.Errorf("a connection whose first sample could not be parsed: %+v, want unresolved", b)
	}

	// A sample that ends inside its header (fragments lost): held, counted.
	cut := conn(41002)
	long := kt.Frame(apiVersions(), 1, kt.Str(strings.Repeat("c", 300)))
	before := a.identity.learner.Stats.Unresolved
	if b, _ = learn(maps.Sample{Conn: cut, Born: 1, Data: long[:100]}); b.Produce != unresolvedID() || b.Fetch != unresolvedID() {
		t.Errorf("a header the sample could not hold: %+v, want unresolved", b)
	}
	if a.identity.learner.Stats.Unresolved == before {
		t.Error("a request that decided nothing was not counted as unresolved")
	}

	// The next request that tells decides it.
	if b, _ = learn(maps.Sample{Conn: cut, Born: 1, Data: kt.Frame(apiVersions(), 2, kt.Str("app")), Complete: true}); b.Produce == unresolvedID() {
		t.Errorf("a readable request left the connection unresolved: %+v", b)
	}

	// Bound to an entity: an undecided request leaves it there.
	bound := conn(41003)
	learn(dp.sample(bound, "app", apiVersions()))
	app := dp.bindings[bound]
	a.identity.learner.Retain(func(maps.ConnKey) bool { return false })
	dp.reenter(bound)
	dp.bindings[bound] = maps.Binding{Conn: bound, Produce: app.Produce, Fetch: app.Fetch}
	if b, _ = learn(dp.sample(bound, "app", kt.Fetch(12, 9, 3, nil, nil))); b.Produce != app.Produce || b.Fetch != app.Fetch {
		t.Errorf("an incremental fetch of a session never seen moved a bound connection: %+v, want %+v", b, app)
	}

	// An exempt peer's entry (the data path marks it so) is never bound.
	exempt := conn(41004)
	s := maps.Sample{Conn: exempt, Born: 1, Bound: [2]uint32{maps.NotGoverned, maps.NotGoverned}, Data: kt.Frame(apiVersions(), 1, kt.Str("app")), Complete: true}
	if b, _ = learn(s); b != (maps.Binding{}) {
		t.Errorf("an exempt peer's connection was bound: %+v", b)
	}
}

// The unresolved entity never falls into overflow (unlimited by
// default): before a new unconfigured entity takes the registry's last id,
// the unresolved entity is registered.
func TestUnresolvedKeepsRoomInAFullRegistry(t *testing.T) {
	r := newRig(t, "max_entities: 4\nmax_unconfigured_entities: 4\n")
	for i := range 6 {
		r.learn(uint16(42000+i), "client-"+string(rune('a'+i)), apiVersions())
	}
	id, ok := r.a.registry.Lookup(entity.UnresolvedKey)
	if !ok || id == entity.OverflowID {
		t.Fatalf("a full registry: unresolved registered %v as %d, want an id of its own", ok, id)
	}
	// A connection no request decides now goes to it, not to overflow.
	if err := r.a.Learn(maps.Sample{Conn: conn(42100), Born: 1, Data: kt.Frame(apiVersions(), 1, kt.Str(strings.Repeat("c", 300)))[:50]}); err != nil {
		t.Fatal(err)
	}
	if b := r.dp.bindings[conn(42100)]; b.Produce != uint32(id) || b.Fetch != uint32(id) {
		t.Errorf("an undecided connection in a full registry: %+v, want unresolved %d", b, id)
	}
}

// A connection that never sends anything the data path can sample (no
// plausible request header, so the agent never gets a sample) is held to
// the unresolved entity by the connection scan within unsampledGrace plus
// one scan interval (20 s), counted, and never left at the headroom H;
// not before the grace (a client's first request is sampled within a
// poll). A request read later still decides it; exempt and closing entries
// are left alone; a new connection on the 4-tuple starts its grace over.
func TestUnsampledConnectionIsHeldToUnresolved(t *testing.T) {
	r := newRig(t, "")
	garbage, reused := conn(43000), conn(43001)
	exempt, closing := conn(43002), conn(43003)
	r.dp.bindings[garbage] = maps.Binding{Conn: garbage, Born: 1}
	r.dp.bindings[reused] = maps.Binding{Conn: reused, Born: 1}
	r.dp.bindings[exempt] = maps.Binding{Conn: exempt, Produce: maps.NotGoverned, Fetch: maps.NotGoverned, Born: 1}
	r.dp.bindings[closing] = maps.Binding{Conn: closing, Closing: true, Born: 1}
	start := r.clock.Now()
	unresolvedBefore := r.a.identity.learner.Stats.Unresolved
	var heldAfter time.Duration
	for heldAfter == 0 && r.clock.Now().Sub(start) < time.Minute {
		r.cycle()
		if r.clock.Now().Sub(start) == 5*time.Second {
			// The 4-tuple is taken by a new connection: its grace starts over.
			r.dp.bindings[reused] = maps.Binding{Conn: reused, Born: 2}
		}
		if b := r.dp.bindings[garbage]; b.Produce != maps.EntityUnknown {
			heldAfter = r.clock.Now().Sub(start)
		}
	}
	id, ok := r.a.registry.Lookup(entity.UnresolvedKey)
	if !ok || id == entity.OverflowID {
		t.Fatalf("unresolved registered %v as %d", ok, id)
	}
	if b := r.dp.bindings[garbage]; b.Produce != uint32(id) || b.Fetch != uint32(id) {
		t.Fatalf("a connection nothing was sampled from: %+v after %v, want held to unresolved %d", b, r.clock.Now().Sub(start), id)
	}
	if heldAfter < unsampledGrace || heldAfter > unsampledGrace+bindingsScanEvery {
		t.Errorf("held to unresolved %v after it was first seen, want within [%v, %v]", heldAfter, unsampledGrace, unsampledGrace+bindingsScanEvery)
	}
	if b := r.dp.bindings[reused]; b.Produce != maps.EntityUnknown {
		t.Errorf("a new connection on a 4-tuple inherited the grace of the one before: %+v", b)
	}
	if n := r.a.identity.learner.Stats.Unresolved - unresolvedBefore; n != 1 {
		t.Errorf("%d unresolved counted, want 1 (the connection held)", n)
	}
	if b := r.dp.bindings[exempt]; b.Produce != maps.NotGoverned || b.Fetch != maps.NotGoverned {
		t.Errorf("an exempt peer's entry was bound: %+v", b)
	}
	if _, ok := r.dp.bindings[closing]; ok {
		t.Error("a closing entry was not reaped")
	}
	views, err := r.a.Connections(garbage.Peer.Addr())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range views {
		if v.Peer == garbage.Peer.String() && (v.Reason != "unsampled" || v.Produce != entity.UnresolvedKey.String()) {
			t.Errorf("explain: %+v, want held to unresolved as unsampled", v)
		}
	}
	// The reused 4-tuple's new connection is held a grace after it came.
	for range 20 {
		r.cycle()
	}
	if b := r.dp.bindings[reused]; b.Produce != uint32(id) {
		t.Errorf("the new connection on a reused 4-tuple: %+v, want unresolved %d after its grace", b, id)
	}
	// A readable request still decides it.
	b := r.dp.bindings[garbage]
	s := maps.Sample{Conn: garbage, Born: 1, Bound: [2]uint32{b.Produce, b.Fetch}, Data: kt.Frame(apiVersions(), 1, kt.Str("late")), Complete: true}
	if err := r.a.Learn(s); err != nil {
		t.Fatal(err)
	}
	if b := r.dp.bindings[garbage]; b.Produce == uint32(id) || b.Produce == maps.EntityUnknown {
		t.Errorf("a readable request left the connection at %+v, want its client's entity", b)
	}
}

// The unresolved entity keeps its id across a reload (the reload pins the
// new configured set, which must not unpin it: its connections stay bound
// to it, and idling never reclaims it), and a reload whose new configured
// entities take the registry's last ids leaves one for it: a connection
// no request decides after such a reload is held to unresolved, never to
// overflow (unlimited by default).
func TestUnresolvedSurvivesReload(t *testing.T) {
	const yaml = baseConfig + "max_entities: 6\nmax_unconfigured_entities: 3\nentity_idle_timeout: 2s\nnew_entities_per_peer: 1000\n" +
		"entities:\n  clients:\n    c1: {producer_byte_rate: 500}\n"
	reload := func(a *Agent, clients ...string) {
		t.Helper()
		y := baseConfig + "max_entities: 6\nmax_unconfigured_entities: 3\nentity_idle_timeout: 2s\nnew_entities_per_peer: 1000\n" +
			"entities:\n  clients:\n"
		for i, c := range clients {
			y += "    " + c + ": {producer_byte_rate: " + string(rune('1'+i)) + "00}\n"
		}
		next, err := configfile.Parse([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Reload(next); err != nil {
			t.Fatal(err)
		}
	}
	undecided := func(r *rig, port uint16) maps.Binding {
		t.Helper()
		// A header the sample could not hold: decides nothing.
		s := maps.Sample{Conn: conn(port), Born: 1, Data: kt.Frame(apiVersions(), 1, kt.Str(strings.Repeat("c", 300)))[:50]}
		if err := r.a.Learn(s); err != nil {
			t.Fatal(err)
		}
		return r.dp.bindings[conn(port)]
	}

	// Registered before the reload: same id after it, still held, never
	// reclaimed however long it idles.
	r := newRigFrom(t, yaml)
	held := undecided(r, 44000)
	id := idOf(t, r.a, entity.UnresolvedKey)
	if held.Produce != id {
		t.Fatalf("undecided connection bound %+v, want unresolved %d", held, id)
	}
	reload(r.a, "c2", "c3")
	if got := idOf(t, r.a, entity.UnresolvedKey); got != id || !r.a.registry.Pinned(entity.ID(id)) {
		t.Errorf("after a reload unresolved is %d (pinned %v), want %d pinned", got, r.a.registry.Pinned(entity.ID(got)), id)
	}
	delete(r.dp.bindings, conn(44000)) // nothing holds it: it idles
	for range 10 {
		r.cycle()
	}
	if got, ok := r.a.registry.Lookup(entity.UnresolvedKey); !ok || uint32(got) != id {
		t.Errorf("after idling past entity_idle_timeout: unresolved %d (%v), want %d", got, ok, id)
	}
	if b := undecided(r, 44001); b.Produce != id || b.Fetch != id {
		t.Errorf("an undecided connection after the reload: %+v, want unresolved %d", b, id)
	}

	// Clients fill the unconfigured budget, then a reload fills the
	// configured entities' room (max_entities less the budget): unresolved
	// takes the budget's last id, not a client, so the reload leaves it
	// one, and every configured entity gets its own.
	r = newRigFrom(t, yaml)
	for i, name := range []string{"a", "b", "c"} {
		r.learn(uint16(44100+i), "client-"+name, apiVersions())
	}
	if n, budget := r.a.registry.Unconfigured(), r.a.registry.UnconfiguredBudget(); n > budget {
		t.Errorf("%d unconfigured entities, more than the budget %d", n, budget)
	}
	reload(r.a, "c1", "c2", "c3")
	b := undecided(r, 44200)
	got, ok := r.a.registry.Lookup(entity.UnresolvedKey)
	if !ok || got == entity.OverflowID || b.Produce != uint32(got) || b.Fetch != uint32(got) {
		t.Errorf("an undecided connection after a reload filled the registry: %+v, unresolved %d (%v); want an id of its own", b, got, ok)
	}
	for _, c := range []string{"c1", "c2", "c3"} {
		if id, ok := r.a.registry.Lookup(entity.Key{Kind: entity.KindClient, Name: c}); !ok || id == entity.OverflowID {
			t.Errorf("configured client %s has no id of its own after the reload (%d, %v)", c, id, ok)
		}
	}
}
