package agent

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

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
	if n := a.learner.Stats.Unresolved; n != 0 {
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
	before := a.learner.Stats.Unresolved
	if b, _ = learn(maps.Sample{Conn: cut, Born: 1, Data: long[:100]}); b.Produce != unresolvedID() || b.Fetch != unresolvedID() {
		t.Errorf("a header the sample could not hold: %+v, want unresolved", b)
	}
	if a.learner.Stats.Unresolved == before {
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
	a.learner.Retain(func(maps.ConnKey) bool { return false })
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
