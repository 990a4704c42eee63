package agent

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/kafka"
	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
	"github.com/sluice-dev/sluice/maps"
)

// identityDataPath is a fake data path that keeps the registry and the
// connections' identities as the pinned maps do, and remembers each
// connection's born, so that its samples carry what the entry holds.
type identityDataPath struct {
	*storingDataPath
	idents map[maps.ConnKey]maps.Identity
	born   map[maps.ConnKey]uint64
}

func newIdentityDataPath() *identityDataPath {
	return &identityDataPath{storingDataPath: newStoringDataPath(), idents: map[maps.ConnKey]maps.Identity{}, born: map[maps.ConnKey]uint64{}}
}

func (f *identityDataPath) SaveIdentity(c maps.ConnKey, id maps.Identity) error {
	f.idents[c] = id
	return nil
}
func (f *identityDataPath) Identity(c maps.ConnKey) (maps.Identity, bool, error) {
	id, ok := f.idents[c]
	return id, ok, nil
}
func (f *identityDataPath) ForgetIdentities(conns []maps.ConnKey) error {
	for _, c := range conns {
		delete(f.idents, c)
	}
	return nil
}
func (f *identityDataPath) EachIdentity(fn func(maps.ConnKey)) error {
	for c := range f.idents {
		fn(c)
	}
	return nil
}

// sample is what the data path would deliver for req on c: the entry's
// born and its current binding.
func (f *identityDataPath) sample(c maps.ConnKey, clientID string, req kmsg.Request) maps.Sample {
	if f.born[c] == 0 {
		f.born[c] = 1
	}
	b := f.bindings[c]
	return maps.Sample{Conn: c, Born: f.born[c], Bound: [2]uint32{b.Produce, b.Fetch}, Data: kt.Frame(req, 1, kt.Str(clientID)), Complete: true}
}

// reenter is the data path entering c again for the same live connection
// (its entry was forgotten or left the LRU table): unbound, a new born.
func (f *identityDataPath) reenter(c maps.ConnKey) {
	delete(f.bindings, c)
	f.born[c]++
}

var identityConfig = strings.Replace(baseConfig, "listeners: [9092]", "listeners: [9092, {port: 9094, protocol: SASL_PLAINTEXT}]", 1) + `
entities:
  users:
    alice: {producer_byte_rate: 9MiB}
  topic-partitions:
    orders-0: {consumer_byte_rate: 5MiB}
`

func saslHandshake() kmsg.Request {
	r := kmsg.NewPtrSASLHandshakeRequest()
	r.SetVersion(1)
	r.Mechanism = "PLAIN"
	return r
}

func saslPlain(user string) kmsg.Request {
	r := kmsg.NewPtrSASLAuthenticateRequest()
	r.SetVersion(2)
	r.SASLAuthBytes = []byte("\x00" + user + "\x00secret")
	return r
}

func idOf(t *testing.T, a *Agent, k entity.Key) uint32 {
	t.Helper()
	id, ok := a.registry.Lookup(k)
	if !ok {
		t.Fatalf("%v is not registered", k)
	}
	return uint32(id)
}

// What bound a connection outlives the agent that learned it: a SASL
// user's connection stays the user's across a restart, a learner that
// freed its state, and the data path entering it again; a fetch session's
// consumer stays its topic-partition's. "Not known yet" never moves it;
// only a new connection on the 4-tuple (its identity dropped) starts over.
func TestIdentityOutlivesTheAgent(t *testing.T) {
	cfg, err := configfile.Parse([]byte(identityConfig))
	if err != nil {
		t.Fatal(err)
	}
	dp := newIdentityDataPath()
	clock := &fakeClock{}
	first := agentOn(t, cfg, dp, clock)
	sasl := maps.ConnKey{Peer: netip.MustParseAddrPort("198.18.0.2:40001"), Local: netip.MustParseAddrPort("198.18.0.1:9094")}
	consumer := maps.ConnKey{Peer: netip.MustParseAddrPort("198.18.0.2:40002"), Local: brokerAddr}
	learn := func(a *Agent, c maps.ConnKey, req kmsg.Request) maps.Binding {
		t.Helper()
		if err := a.Learn(dp.sample(c, "app", req)); err != nil {
			t.Fatal(err)
		}
		return dp.bindings[c]
	}
	produce := kt.Produce(9, kt.TP{Topic: "events", Partitions: []int32{0}})
	learn(first, sasl, apiVersions())
	learn(first, sasl, saslHandshake())
	alice := idOf(t, first, entity.Key{Kind: entity.KindUser, Name: "alice"})
	if b := learn(first, sasl, saslPlain("alice")); b.Produce != alice || b.Fetch != alice {
		t.Fatalf("after the login: %+v, want alice's entity %d", b, alice)
	}
	if got := dp.idents[sasl]; got.User != "alice" || got.Mechanism != "PLAIN" {
		t.Fatalf("saved identity %+v, want PLAIN alice", got)
	}
	orders := idOf(t, first, entity.Key{Kind: entity.KindTopicPartition, Name: "orders-0"})
	learn(first, consumer, apiVersions())
	if b := learn(first, consumer, kt.Fetch(12, 7, 0, []kt.TP{{Topic: "orders", Partitions: []int32{0}}}, nil)); b.Fetch != orders {
		t.Fatalf("session opened on orders-0: %+v, want %d", b, orders)
	}

	// The agent restarts on the same pinned state.
	second := agentOn(t, cfg, dp, clock)
	if b := learn(second, sasl, produce); b.Produce != alice || b.Fetch != alice {
		t.Errorf("SASL connection after a restart: %+v, want alice's %d", b, alice)
	}
	if b := learn(second, consumer, kt.Fetch(12, 7, 5, nil, nil)); b.Fetch != orders {
		t.Errorf("incremental fetch after a restart: %+v, want orders-0's %d", b, orders)
	}
	if b := learn(second, consumer, apiVersions()); b.Fetch != orders {
		t.Errorf("another request after a restart: %+v, want orders-0's %d", b, orders)
	}
	// The learner frees its state (Retain), then the data path enters the
	// SASL connection again (unbound, new born).
	second.identity.learner.Retain(func(maps.ConnKey) bool { return false })
	if b := learn(second, sasl, produce); b.Produce != alice {
		t.Errorf("after the learner freed its state: %+v, want alice's %d", b, alice)
	}
	dp.reenter(sasl)
	if b := learn(second, sasl, produce); b.Produce != alice || b.Fetch != alice {
		t.Errorf("entered again: %+v, want alice's %d", b, alice)
	}
	if n := second.identity.conns.Rebinds["to_unknown"]; n != 0 {
		t.Errorf("%d rebinds to unknown, want 0", n)
	}
	// A new connection on the 4-tuple: the data path dropped the entry
	// and its identity (SYN-ACK). It proves nothing yet: held to
	// unresolved until it logs in, never to H.
	delete(dp.idents, sasl)
	dp.reenter(sasl)
	unresolved, _ := second.registry.Lookup(entity.UnresolvedKey)
	if b := learn(second, sasl, produce); b.Produce != uint32(unresolved) || b.Fetch != uint32(unresolved) || unresolved == 0 {
		t.Errorf("a new connection inherited %+v, want unresolved (%d) until it logs in", b, unresolved)
	}
	// A closed connection's identity goes with it (the scan reaps it).
	learn(second, sasl, saslHandshake())
	learn(second, sasl, saslPlain("alice"))
	b := dp.bindings[sasl]
	b.Closing = true
	dp.bindings[sasl] = b
	if err := second.scanConnections(clock.Now()); err != nil {
		t.Fatal(err)
	}
	if _, ok := dp.idents[sasl]; ok {
		t.Error("a closed connection's identity was kept")
	}
}

// A rebind says why: a rule change that moves a connection counts as
// rule_change, a new fetch session's partitions as request.
func TestRebindReasons(t *testing.T) {
	cfg, err := configfile.Parse([]byte(identityConfig))
	if err != nil {
		t.Fatal(err)
	}
	dp := newIdentityDataPath()
	a := agentOn(t, cfg, dp, &fakeClock{})
	c := maps.ConnKey{Peer: netip.MustParseAddrPort("198.18.0.2:40003"), Local: brokerAddr}
	learn := func(req kmsg.Request) {
		t.Helper()
		if err := a.Learn(dp.sample(c, "app", req)); err != nil {
			t.Fatal(err)
		}
	}
	learn(kt.Fetch(12, 7, 0, []kt.TP{{Topic: "events", Partitions: []int32{0}}}, nil))
	learn(kt.Fetch(12, 7, 1, []kt.TP{{Topic: "orders", Partitions: []int32{0}}}, nil))
	if n := a.identity.conns.Rebinds["request"]; n != 1 {
		t.Errorf("request rebinds %d, want 1 (client -> orders-0)", n)
	}
	next, err := configfile.Parse([]byte(identityConfig + "    orders-1: {consumer_byte_rate: 1MiB}\n"))
	if err != nil {
		t.Fatal(err)
	}
	delete(next.Entities.TopicPartitions, "orders-0")
	if err := a.Reload(next); err != nil {
		t.Fatal(err)
	}
	learn(kt.Fetch(12, 7, 2, nil, nil))
	if n := a.identity.conns.Rebinds["rule_change"]; n != 1 {
		t.Errorf("rule_change rebinds %d, want 1 (orders-0 no longer configured); all: %v", n, a.identity.conns.Rebinds)
	}
}

// explain on a connection says which entity holds it, by which rule, and
// which request bound it, from the data path's table.
func TestConnectionsExplainTheirBinding(t *testing.T) {
	cfg, err := configfile.Parse([]byte(identityConfig))
	if err != nil {
		t.Fatal(err)
	}
	dp := newIdentityDataPath()
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	a := agentOn(t, cfg, dp, clock)
	sasl := maps.ConnKey{Peer: netip.MustParseAddrPort("198.18.0.7:40001"), Local: netip.MustParseAddrPort("198.18.0.1:9094")}
	consumer := maps.ConnKey{Peer: netip.MustParseAddrPort("198.18.0.7:40002"), Local: brokerAddr}
	other := maps.ConnKey{Peer: netip.MustParseAddrPort("198.18.0.8:40003"), Local: brokerAddr}
	for _, step := range []struct {
		c   maps.ConnKey
		req kmsg.Request
	}{
		{sasl, saslHandshake()}, {sasl, saslPlain("alice")},
		{consumer, kt.Fetch(12, 7, 0, []kt.TP{{Topic: "orders", Partitions: []int32{0}}}, nil)},
		{other, apiVersions()},
	} {
		if err := a.Learn(dp.sample(step.c, "app", step.req)); err != nil {
			t.Fatal(err)
		}
	}
	views, err := a.Connections(netip.MustParseAddr("198.18.0.7"))
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != 2 {
		t.Fatalf("%d connections from 198.18.0.7, want 2: %+v", len(views), views)
	}
	login, fetch := views[0], views[1]
	if login.Produce != "user:alice" || !strings.Contains(login.Rule, "SASL principal alice") || login.BoundBy != "SASLAuthenticate" ||
		login.Reason != "login" || login.Listener != config.ProtocolSASLPlaintext || login.Since == nil || !login.Since.Equal(clock.Now()) {
		t.Errorf("SASL connection: %+v", login)
	}
	if fetch.Fetch != "topic-partition:orders-0" || !strings.Contains(fetch.Rule, "fetch: configured topic-partition orders-0") || fetch.BoundBy != "Fetch" {
		t.Errorf("consumer: %+v", fetch)
	}
	// A restarted agent adopts the binding and says so.
	clock.advance(time.Minute)
	second := agentOn(t, cfg, dp, clock)
	if err := second.Learn(dp.sample(sasl, "app", apiVersions())); err != nil {
		t.Fatal(err)
	}
	views, _ = second.Connections(netip.MustParseAddr("198.18.0.7"))
	if len(views) != 2 || views[0].Reason != "adopted" || views[0].Produce != "user:alice" || views[0].BoundBy != "" {
		t.Errorf("after a restart: %+v", views)
	}
}

func saslHandshakeFor(mechanism string) kmsg.Request {
	r := kmsg.NewPtrSASLHandshakeRequest()
	r.SetVersion(1)
	r.Mechanism = mechanism
	return r
}

// A restart (or freed learner state, or the data path entering the
// connection again) between a SaslHandshake and its SaslAuthenticate still
// reads the login: the handshake's mechanism is saved beside the binding,
// as the principal is, and until the login the connection is held to
// unresolved, never to H. Without the mechanism (its handshake's sample
// was lost, or nothing was saved) the login cannot be read, and the
// connection stays unresolved, counted, rather than going by its
// client-id.
func TestLoginUnderWayOutlivesTheAgent(t *testing.T) {
	cfg, err := configfile.Parse([]byte(identityConfig))
	if err != nil {
		t.Fatal(err)
	}
	dp := newIdentityDataPath()
	clock := &fakeClock{}
	first := agentOn(t, cfg, dp, clock)
	c := maps.ConnKey{Peer: netip.MustParseAddrPort("198.18.0.2:40011"), Local: netip.MustParseAddrPort("198.18.0.1:9094")}
	lost := maps.ConnKey{Peer: netip.MustParseAddrPort("198.18.0.2:40012"), Local: netip.MustParseAddrPort("198.18.0.1:9094")}
	gssapi := maps.ConnKey{Peer: netip.MustParseAddrPort("198.18.0.2:40013"), Local: netip.MustParseAddrPort("198.18.0.1:9094")}
	learn := func(a *Agent, c maps.ConnKey, req kmsg.Request) maps.Binding {
		t.Helper()
		if err := a.Learn(dp.sample(c, "app", req)); err != nil {
			t.Fatal(err)
		}
		return dp.bindings[c]
	}
	produce := kt.Produce(9, kt.TP{Topic: "events", Partitions: []int32{0}})
	for _, x := range []maps.ConnKey{c, lost, gssapi} {
		learn(first, x, apiVersions())
	}
	learn(first, c, saslHandshake())
	learn(first, gssapi, saslHandshakeFor("GSSAPI"))
	// lost: its handshake's sample never reached the agent.
	unresolved := idOf(t, first, entity.UnresolvedKey)
	if b := dp.bindings[c]; b.Produce != unresolved || b.Fetch != unresolved {
		t.Fatalf("after the handshake: %+v, want unresolved %d", b, unresolved)
	}
	if got, ok := dp.idents[c]; !ok || got != (maps.Identity{Mechanism: "PLAIN"}) {
		t.Fatalf("saved for a login under way: %+v (%v), want the mechanism PLAIN alone", got, ok)
	}

	// The agent restarts between the handshake and the login.
	second := agentOn(t, cfg, dp, clock)
	if b := learn(second, c, apiVersions()); b.Produce != unresolved || b.Fetch != unresolved {
		t.Errorf("before the login, after a restart: %+v, want unresolved %d", b, unresolved)
	}
	alice := idOf(t, second, entity.Key{Kind: entity.KindUser, Name: "alice"})
	if b := learn(second, c, saslPlain("alice")); b.Produce != alice || b.Fetch != alice {
		t.Errorf("a login after a restart: %+v, want alice's %d", b, alice)
	}
	if got := dp.idents[c]; got != (maps.Identity{Mechanism: "PLAIN", User: "alice"}) {
		t.Errorf("saved after the login: %+v, want PLAIN alice", got)
	}
	// The data path enters a connection again between its handshake and
	// its login (its entry left the LRU table): unbound, a new born.
	again := maps.ConnKey{Peer: netip.MustParseAddrPort("198.18.0.2:40014"), Local: c.Local}
	learn(second, again, saslHandshakeFor("SCRAM-SHA-512"))
	dp.reenter(again)
	scram := kmsg.NewPtrSASLAuthenticateRequest()
	scram.SetVersion(2)
	scram.SASLAuthBytes = []byte("n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL")
	if b := learn(second, again, scram); b.Produce != alice || b.Fetch != alice {
		t.Errorf("a login after the entry was entered again: %+v, want alice's %d", b, alice)
	}

	// Without the mechanism the login is not read: held to unresolved,
	// counted, and never moved to H or to the client-id by what follows.
	before := second.identity.learner.Stats.Unresolved
	for _, req := range []kmsg.Request{saslPlain("alice"), produce, apiVersions()} {
		if b := learn(second, lost, req); b.Produce != unresolved || b.Fetch != unresolved {
			t.Errorf("a login whose handshake was not seen, then %s: %+v, want unresolved %d", kafka.APIName(req.Key()), b, unresolved)
		}
	}
	// ApiVersions decides nothing by design on a SASL listener: not counted.
	if n := second.identity.learner.Stats.Unresolved - before; n != 2 {
		t.Errorf("%d requests after an unread login counted as unresolved, want 2 (the login and the produce)", n)
	}
	// A mechanism whose login names nobody sluice reads (GSSAPI) goes by
	// its client-id after a restart as before one.
	// (Its fetch direction waits for a request that decides it, as it does
	// without a restart.)
	b := learn(second, gssapi, produce)
	if app := idOf(t, second, entity.Key{Kind: entity.KindClient, Name: "app"}); b.Produce != app || b.Fetch != unresolved {
		t.Errorf("a GSSAPI connection after a restart: %+v, want the client's %d", b, app)
	}
	if n := second.identity.conns.Rebinds["to_unknown"]; n != 0 {
		t.Errorf("%d rebinds to unknown, want 0", n)
	}
}

// A saved identity whose connection's end the data path missed (its entry
// evicted, or closed while no agent ran) is reclaimed once the connection
// has had no entry for identityGrace: the table of identities cannot fill
// with the dead. One whose connection is in the table, or comes back
// before the grace ends, is kept. Before, such identities stayed until
// their 4-tuple was reused.
func TestIdentitiesOfMissedEndsAreReclaimed(t *testing.T) {
	cfg, err := configfile.Parse([]byte(identityConfig))
	if err != nil {
		t.Fatal(err)
	}
	dp := newIdentityDataPath()
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	a := agentOn(t, cfg, dp, clock)
	conn := func(port uint16) maps.ConnKey {
		return maps.ConnKey{Peer: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), port), Local: netip.MustParseAddrPort("198.18.0.1:9094")}
	}
	dead, live, back := conn(41001), conn(41002), conn(41003)
	for _, c := range []maps.ConnKey{dead, live, back} {
		for _, req := range []kmsg.Request{apiVersions(), saslHandshake(), saslPlain("alice")} {
			if err := a.Learn(dp.sample(c, "app", req)); err != nil {
				t.Fatal(err)
			}
		}
		if _, ok := dp.idents[c]; !ok {
			t.Fatalf("%v: no identity saved", c)
		}
	}
	backBinding := dp.bindings[back]
	delete(dp.bindings, dead) // its end missed: no entry, no FIN seen
	delete(dp.bindings, back) // evicted; the connection goes on
	step := func(d time.Duration) {
		t.Helper()
		clock.advance(d)
		if err := a.Cycle(); err != nil {
			t.Fatal(err)
		}
	}
	step(bindingsScanEvery)
	step(identityGrace / 2)
	dp.bindings[back] = backBinding // entered again by its next segment
	step(identityGrace/2 + bindingsScanEvery)
	if _, ok := dp.idents[dead]; ok {
		t.Errorf("the identity of a connection with no entry for %v was kept", identityGrace)
	}
	for name, c := range map[string]maps.ConnKey{"live": live, "back before the grace": back} {
		if _, ok := dp.idents[c]; !ok {
			t.Errorf("%s: identity reclaimed", name)
		}
	}
	if n := a.identity.conns.IdentitiesReclaimed; n != 1 {
		t.Errorf("reclaimed %d, want 1", n)
	}
}
