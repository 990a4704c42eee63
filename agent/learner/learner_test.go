package learner

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/kafka"
	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

func mustPolicy(t testing.TB, yaml string) *entity.Policy {
	t.Helper()
	cfg, err := configfile.Parse([]byte("interfaces: [eth0]\nlisteners: [9092]\nproduce: {capacity: 1GiB}\nfetch: {capacity: 1GiB}\n" + yaml))
	if err != nil {
		t.Fatal(err)
	}
	return entity.NewPolicy(cfg.Entities)
}

const precedenceConfig = `
entities:
  clients:
    core-group:   {consumer_byte_reservation: 100MiB, consumer_byte_rate: 300MiB, producer_byte_rate: 5MiB}
    weighted:     {quota_weight: 4}
    clamped:      {consumer_byte_reservation: 900MiB}
    <default>:    {quota_weight: 0.1, consumer_byte_rate: 500MiB}
  topic-partitions:
    core-topic-0:      {producer_byte_reservation: 50MiB}
    broadcast-topic-0: {consumer_byte_reservation: 50MiB, consumer_byte_rate: 200MiB}
    broadcast-topic-1: {consumer_byte_rate: 150MiB}
    __mine-0:          {producer_byte_rate: 5MiB}
    <default>:         {quota_weight: 2, producer_byte_rate: 40MiB}
`

type names map[[16]byte]string

func (n names) TopicName(id [16]byte) (string, bool) { s, ok := n[id]; return s, ok }

var (
	ordersID    = [16]byte{1, 1}
	broadcastID = [16]byte{2, 2}
	unknownID   = [16]byte{9, 9}
)

func learn(t *testing.T, l *Learner[int], c int, req kmsg.Request, clientID string) Decision {
	t.Helper()
	d, _, err := l.Learn(c, 1, kt.Frame(req, 1, kt.Str(clientID)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func apiVersions() kmsg.Request {
	r := kmsg.NewPtrApiVersionsRequest()
	r.SetVersion(3)
	r.ClientSoftwareName, r.ClientSoftwareVersion = "test", "1"
	return r
}

func client(name string) Target {
	return Target{Key: entity.Key{Kind: entity.KindClient, Name: name}}
}

func topicPart(name string) Target {
	return Target{Key: entity.Key{Kind: entity.KindTopicPartition, Name: name}}
}

// TestPrecedence covers every rule of docs/design.md §5: which entity a request's
// bytes belong to.
func TestPrecedence(t *testing.T) {
	policy := mustPolicy(t, precedenceConfig)
	topics := names{ordersID: "orders", broadcastID: "broadcast-topic"}
	cases := []struct {
		name     string
		clientID string
		req      kmsg.Request
		dir      entity.Direction
		want     Target
	}{
		{"configured topic-partition wins over configured client", "core-group",
			kt.Produce(9, kt.TP{Topic: "core-topic", Partitions: []int32{0}}), entity.Produce, topicPart("core-topic-0")},
		{"first configured topic-partition in request order", "x",
			kt.Fetch(12, 0, -1, []kt.TP{{Topic: "plain", Partitions: []int32{0}}, {Topic: "broadcast-topic", Partitions: []int32{7, 1, 0}}}, nil),
			entity.Fetch, topicPart("broadcast-topic-1")},
		{"unconfigured partitions fall to the configured client", "core-group",
			kt.Fetch(12, 0, -1, []kt.TP{{Topic: "broadcast-topic", Partitions: []int32{5}}}, nil), entity.Fetch, client("core-group")},
		{"unconfigured client gets its own fallback entity", "random-4711",
			kt.Fetch(12, 0, -1, []kt.TP{{Topic: "plain", Partitions: []int32{0}}}, nil), entity.Fetch, client("random-4711")},
		{"another unconfigured client gets another entity, not a shared bucket", "random-4712",
			kt.Fetch(12, 0, -1, []kt.TP{{Topic: "plain", Partitions: []int32{0}}}, nil), entity.Fetch, client("random-4712")},
		{"topic IDs resolve to configured topic-partitions (produce v13)", "x",
			kt.Produce(13, kt.TP{ID: broadcastID, Partitions: []int32{0}}), entity.Produce, topicPart("broadcast-topic-0")},
		{"topic IDs resolve (fetch v18)", "x",
			kt.Fetch(18, 0, -1, []kt.TP{{ID: ordersID, Partitions: []int32{3}}, {ID: broadcastID, Partitions: []int32{1}}}, nil), entity.Fetch, topicPart("broadcast-topic-1")},
		{"a share group's fetch resolves topic IDs like Fetch (KIP-932)", "x",
			kt.ShareFetch(1, 0, kt.TP{ID: ordersID, Partitions: []int32{3}}, kt.TP{ID: broadcastID, Partitions: []int32{0}}), entity.Fetch, topicPart("broadcast-topic-0")},
		{"a share group's fetch of unconfigured partitions is its client's", "core-group",
			kt.ShareFetch(1, 0, kt.TP{ID: ordersID, Partitions: []int32{3}}), entity.Fetch, client("core-group")},
		{"an unknown topic ID is held to the strictest configured topic-partition until its name is known", "core-group",
			kt.Fetch(18, 0, -1, []kt.TP{{ID: unknownID, Partitions: []int32{0}}}, nil), entity.Fetch, topicPart("broadcast-topic-1")},
		{"internal topics are skipped", "x",
			kt.Produce(9, kt.TP{Topic: "__transaction_state", Partitions: []int32{0}}, kt.TP{Topic: "core-topic", Partitions: []int32{0}}), entity.Produce, topicPart("core-topic-0")},
		{"a client reading only internal topics is governed as that client", "x",
			kt.Fetch(12, 0, -1, []kt.TP{{Topic: "__consumer_offsets", Partitions: []int32{0, 1}}}, nil), entity.Fetch, client("x")},
		{"a user topic that starts with __ is an ordinary topic", "x",
			kt.Produce(9, kt.TP{Topic: "__mine", Partitions: []int32{0}}), entity.Produce, topicPart("__mine-0")},
		// Replication is exempt by its peer only: what a request claims
		// changes nothing (exempt peers are never sampled at all).
		{"a follower fetch from a governed peer is governed", "replica",
			fetchAsReplica(12, 3), entity.Fetch, client("replica")},
		{"a follower fetch v15+ (ReplicaState) from a governed peer is governed", "replica",
			fetchAsReplica(16, 3), entity.Fetch, client("replica")},
		{"a broker fetcher client-id from a governed peer is governed", "broker-3-fetcher-0",
			apiVersions(), entity.Fetch, client("broker-3-fetcher-0")},
		{"ApiVersions names the client for both directions", "core-group",
			apiVersions(), entity.Produce, client("core-group")},
		{"a null client-id is one entity", "",
			apiVersions(), entity.Fetch, client("")},
	}
	for i, c := range cases {
		l := New[int](policy, topics)
		got, _ := learn(t, l, i, c.req, c.clientID).Target(c.dir)
		if got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
		claimsReplication := strings.Contains(c.name, "follower fetch") || c.clientID == "broker-3-fetcher-0"
		if claims := l.Stats.ReplicationClaims; (claims == 1) != claimsReplication {
			t.Errorf("%s: %d replication claims counted", c.name, claims)
		}
	}
}

func fetchAsReplica(version int16, replica int32) kmsg.Request {
	r := kt.Fetch(version, 0, -1, []kt.TP{{Topic: "orders", ID: ordersID, Partitions: []int32{0}}}, nil)
	r.ReplicaID = replica
	r.ReplicaState.ID, r.ReplicaState.Epoch = replica, 1
	return r
}

// TestPrecedenceParams: the three parameters come from the one entity, then
// its type's default template, then the global defaults; reservation is
// clamped to the limit; producer_* and consumer_* keys per direction.
func TestPrecedenceParams(t *testing.T) {
	p := mustPolicy(t, precedenceConfig)
	inf := math.Inf(1)
	mib := float64(1 << 20)
	key := func(kind entity.Kind, name string) entity.Key { return entity.Key{Kind: kind, Name: name} }
	cases := []struct {
		name string
		key  entity.Key
		dir  entity.Direction
		want entity.Params
	}{
		{"configured client, fetch: own reservation and limit, weight from template",
			key(entity.KindClient, "core-group"), entity.Fetch, entity.Params{Reservation: 100 * mib, Weight: 0.1, Limit: 300 * mib}},
		{"configured client, produce: producer keys only",
			key(entity.KindClient, "core-group"), entity.Produce, entity.Params{Reservation: 0, Weight: 0.1, Limit: 5 * mib}},
		{"own weight beats the template's, limit from the template",
			key(entity.KindClient, "weighted"), entity.Fetch, entity.Params{Reservation: 0, Weight: 4, Limit: 500 * mib}},
		{"reservation above the template's limit is clamped",
			key(entity.KindClient, "clamped"), entity.Fetch, entity.Params{Reservation: 500 * mib, Weight: 0.1, Limit: 500 * mib}},
		{"fallback client: all from the clients template, then global",
			key(entity.KindClient, "random-1"), entity.Fetch, entity.Params{Reservation: 0, Weight: 0.1, Limit: 500 * mib}},
		{"fallback client, produce: template has no producer limit → unlimited",
			key(entity.KindClient, "random-1"), entity.Produce, entity.Params{Reservation: 0, Weight: 0.1, Limit: inf}},
		{"topic-partition: own reservation, template weight and limit",
			key(entity.KindTopicPartition, "core-topic-0"), entity.Produce, entity.Params{Reservation: 40 * mib, Weight: 2, Limit: 40 * mib}},
		{"topic-partition, fetch: own consumer keys",
			key(entity.KindTopicPartition, "broadcast-topic-0"), entity.Fetch, entity.Params{Reservation: 50 * mib, Weight: 2, Limit: 200 * mib}},
		{"overflow takes the clients template",
			key(entity.KindOverflow, ""), entity.Fetch, entity.Params{Reservation: 0, Weight: 0.1, Limit: 500 * mib}},
		{"unknown takes the global defaults",
			key(entity.KindUnknown, ""), entity.Fetch, entity.Params{Reservation: 0, Weight: 1, Limit: inf}},
	}
	for _, c := range cases {
		if got := p.Params(c.key, c.dir); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	// With no templates at all, the global defaults apply.
	bare := mustPolicy(t, "entities: {clients: {a: {producer_byte_reservation: 1MB}}}")
	if got := bare.Params(entity.Key{Kind: entity.KindClient, Name: "a"}, entity.Produce); got != (entity.Params{Reservation: 1e6, Weight: 1, Limit: inf}) {
		t.Errorf("global defaults: %+v", got)
	}
}

// TestSessionIncrementalFetch follows a KIP-227 session: a full request,
// incremental requests that add, list nothing, forget, and a reset.
func TestSessionIncrementalFetch(t *testing.T) {
	policy := mustPolicy(t, precedenceConfig)
	l := New[int](policy, nil)
	const c = 1
	step := func(epoch int32, topics, forgotten []kt.TP) Target {
		d := learn(t, l, c, kt.Fetch(12, 77, epoch, topics, forgotten), "consumer-a")
		return d.Fetch
	}
	if got := step(0, []kt.TP{{Topic: "plain", Partitions: []int32{0, 1}}}, nil); got != client("consumer-a") {
		t.Fatalf("full: %+v", got)
	}
	// Add a configured partition incrementally.
	if got := step(1, []kt.TP{{Topic: "broadcast-topic", Partitions: []int32{1}}}, nil); got != topicPart("broadcast-topic-1") {
		t.Fatalf("add: %+v", got)
	}
	// An incremental request that lists nothing keeps the session's set.
	if got := step(2, nil, nil); got != topicPart("broadcast-topic-1") {
		t.Fatalf("empty incremental: %+v", got)
	}
	// A configured partition added later does not displace the earlier one.
	if got := step(3, []kt.TP{{Topic: "broadcast-topic", Partitions: []int32{0}}}, nil); got != topicPart("broadcast-topic-1") {
		t.Fatalf("second add: %+v", got)
	}
	// Forget the first: the second configured partition takes over.
	if got := step(4, nil, []kt.TP{{Topic: "broadcast-topic", Partitions: []int32{1}}}); got != topicPart("broadcast-topic-0") {
		t.Fatalf("forget: %+v", got)
	}
	// Forget the rest of the configured ones: back to the client.
	if got := step(5, nil, []kt.TP{{Topic: "broadcast-topic", Partitions: []int32{0}}}); got != client("consumer-a") {
		t.Fatalf("forget all configured: %+v", got)
	}
	// Reset (epoch 0): a full request replaces the set.
	if got := step(0, []kt.TP{{Topic: "core-topic", Partitions: []int32{0}}}, nil); got.Key.Name != "consumer-a" && got.Key.Name != "core-topic-0" {
		t.Fatalf("reset: %+v", got)
	}
	if got := step(1, nil, nil); got != topicPart("core-topic-0") {
		t.Fatalf("after reset, incremental: %+v", got)
	}
	// Sessionless (epoch -1): only the request's own partitions count.
	if got := step(-1, []kt.TP{{Topic: "plain", Partitions: []int32{2}}}, nil); got != client("consumer-a") {
		t.Fatalf("sessionless: %+v", got)
	}
	if got := step(-1, nil, nil); got != client("consumer-a") {
		t.Fatalf("sessionless, empty: %+v", got)
	}
}

// TestLearnKeepsLastDecisionOnBadInput: a request that cannot be parsed
// never changes a connection's entity, and is counted.
func TestLearnKeepsLastDecisionOnBadInput(t *testing.T) {
	l := New[int](mustPolicy(t, precedenceConfig), nil)
	before := learn(t, l, 1, kt.Produce(9, kt.TP{Topic: "core-topic", Partitions: []int32{0}}), "p")
	for _, bad := range [][]byte{
		{0, 0, 0, 2, 0, 0},
		{0, 0, 0, 10, 0x7f, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0},
		kt.Frame(kt.Produce(9), 1, nil)[:6],
	} {
		d, changed, err := l.Learn(1, 1, bad)
		if changed || d != before {
			t.Errorf("bad sample %x changed the decision to %+v", bad, d)
		}
		if len(bad) >= 8 && err == nil && !errors.Is(err, kafka.ErrMalformed) {
			t.Logf("sample %x: %v", bad, err)
		}
	}
	if l.Stats.Failed < 2 {
		t.Errorf("failures counted %d, want ≥ 2", l.Stats.Failed)
	}
}

func TestLearnReportsChanges(t *testing.T) {
	l := New[int](mustPolicy(t, precedenceConfig), nil)
	sample := kt.Frame(apiVersions(), 0, kt.Str("core-group"))
	if _, changed, _ := l.Learn(5, 1, sample); !changed {
		t.Error("first request did not change the decision")
	}
	if _, changed, _ := l.Learn(5, 1, sample); changed {
		t.Error("the same request changed the decision again")
	}
	l.Retain(func(int) bool { return false })
	if _, ok := l.Decision(5); ok || l.Connections() != 0 {
		t.Error("Retain kept state of a connection it was told to drop")
	}
}

// TestLearnRecordedClients feeds the requests recorded from franz-go,
// sarama and kafka-go through the learner: each connection ends up with the
// client's entity (orders partitions are configured for one of them).
func TestLearnRecordedClients(t *testing.T) {
	policy := mustPolicy(t, `
entities:
  clients:
    sarama-orders: {consumer_byte_reservation: 1MiB}
  topic-partitions:
    orders-2: {producer_byte_rate: 1MiB}
`)
	for client, want := range map[string]struct{ produce, fetch Target }{
		// franz-go names topics by ID; with no metadata an ID might be any
		// topic's, so its producer is held to the strictest configured
		// partition. Its last fetch closes the session and names nothing.
		"franz-go": {topicPart("orders-2"), client("franz-orders")},
		"sarama":   {client("sarama-orders"), client("sarama-orders")},
		// kafka-go's writer hashes key "k" to some partition; its reader reads partition 2.
		"kafka-go": {Target{}, topicPart("orders-2")},
	} {
		data, err := os.ReadFile(filepath.Join("..", "kafka", "testdata", "clients", client+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		l := New[int](policy, nil)
		var last Decision
		for off := 0; off < len(data); {
			size := int(binary.BigEndian.Uint32(data[off:]))
			d, _, err := l.Learn(0, 1, data[off:off+4+size])
			if err != nil {
				t.Fatalf("%s: %v", client, err)
			}
			last = d
			off += 4 + size
		}
		if last.Fetch != want.fetch {
			t.Errorf("%s: fetch %+v, want %+v", client, last.Fetch, want.fetch)
		}
		if want.produce != (Target{}) && last.Produce != want.produce {
			t.Errorf("%s: produce %+v, want %+v", client, last.Produce, want.produce)
		}
		if last.Produce == (Target{}) {
			t.Errorf("%s: produce not decided", client)
		}
	}
}

// A new connection on a reused 4-tuple (a new born) inherits nothing from
// the last one: not its client-id, not its decisions, not its fetch
// session.
func TestLearnNewConnectionOnReusedFourTuple(t *testing.T) {
	l := New[int](mustPolicy(t, precedenceConfig), nil)
	if _, _, err := l.Learn(7, 100, kt.Frame(kt.Produce(9, kt.TP{Topic: "core-topic", Partitions: []int32{0}}), 1, kt.Str("old-client"))); err != nil {
		t.Fatal(err)
	}
	d, changed, err := l.Learn(7, 200, kt.Frame(apiVersions(), 0, kt.Str("new-client")))
	if err != nil {
		t.Fatal(err)
	}
	if !changed || d.Produce != client("new-client") || d.Fetch != client("new-client") {
		t.Errorf("after reuse: %+v (changed %v), want the new client both ways", d, changed)
	}
	if l.Stats.NewConnections != 1 {
		t.Errorf("new connections counted %d, want 1", l.Stats.NewConnections)
	}
}

func TestLearnRetainFreesGoneConnections(t *testing.T) {
	l := New[int](mustPolicy(t, precedenceConfig), nil)
	for c := range 100 {
		learn(t, l, c, apiVersions(), fmt.Sprint("c", c))
	}
	if freed := l.Retain(func(c int) bool { return c%10 == 0 }); freed != 90 || l.Connections() != 10 {
		t.Errorf("freed %d, kept %d; want 90 and 10", freed, l.Connections())
	}
}

// A share session's later requests name only what changed: one that names
// no topic keeps the decision the session's first request made.
func TestLearnShareSessionKeepsItsDecision(t *testing.T) {
	l := New[int](mustPolicy(t, precedenceConfig), names{broadcastID: "broadcast-topic"})
	first := learn(t, l, 1, kt.ShareFetch(1, 0, kt.TP{ID: broadcastID, Partitions: []int32{1}}), "share-consumer")
	if got, _ := first.Target(entity.Fetch); got != topicPart("broadcast-topic-1") {
		t.Fatalf("first share fetch: %v", got)
	}
	later := learn(t, l, 1, kt.ShareFetch(1, 1), "share-consumer")
	if got, _ := later.Target(entity.Fetch); got != topicPart("broadcast-topic-1") {
		t.Errorf("a later share fetch naming no topic moved the connection to %v", got)
	}
	// A connection whose first share fetch names nothing is its client's.
	fresh := learn(t, l, 2, kt.ShareFetch(1, 3), "share-consumer")
	if got, _ := fresh.Target(entity.Fetch); got != client("share-consumer") {
		t.Errorf("a share fetch naming nothing on a new connection: %v", got)
	}
}

// A learner that starts in the middle of a fetch session (the agent
// restarted) has not seen the session's set: an incremental request
// decides nothing, and an adopted decision stands until the client opens
// a session again; requests that are not Produce or Fetch never override
// it with the client entity.
func TestSessionUnknownDecidesNothing(t *testing.T) {
	l := New[int](mustPolicy(t, precedenceConfig), nil)
	if d, changed, _ := l.Learn(1, 1, kt.Frame(kt.Fetch(12, 77, 4, nil, nil), 1, kt.Str("consumer-a"))); changed || d.Decided[entity.Fetch] {
		t.Errorf("incremental fetch of an unseen session decided %+v", d)
	}
	l.Adopt(2, 1, Identity{}, Decision{Fetch: topicPart("broadcast-topic-1"), Decided: [2]bool{entity.Fetch: true}})
	for _, req := range []kmsg.Request{kt.Fetch(12, 77, 5, nil, nil), apiVersions(), kt.Fetch(12, 77, 6, []kt.TP{{Topic: "plain", Partitions: []int32{0}}}, nil)} {
		if d := learn(t, l, 2, req, "consumer-a"); d.Fetch != topicPart("broadcast-topic-1") {
			t.Errorf("adopted session moved by %T: %+v", req, d.Fetch)
		}
	}
	if d := learn(t, l, 2, kt.Fetch(12, 77, 0, []kt.TP{{Topic: "plain", Partitions: []int32{0}}}, nil), "consumer-a"); d.Fetch != client("consumer-a") {
		t.Errorf("a new session's full request: %+v, want the client", d.Fetch)
	}
	if l.Cause() != CauseRequest {
		t.Errorf("cause %v, want request", l.Cause())
	}
}

const cutConfig = `
entities:
  clients:
    free: {}
    slow: {producer_byte_rate: 1MiB, quota_weight: 0.5}
  users:
    alice: {producer_byte_rate: 9MiB}
    bob:
      clients:
        reports: {producer_byte_rate: 2MiB}
  topic-partitions:
    orders-3: {producer_byte_rate: 5MiB, consumer_byte_rate: 4MiB}
`

// cutSample is a sample whose client-id the data path cut: the request as
// the reader mends it, with the kept prefix as its client-id.
func cutSample(req kmsg.Request) Sample {
	return Sample{Data: kt.Frame(req, 1, kt.Str(strings.Repeat("c", 128))), Whole: true, ClientIDCut: true}
}

// No length hides a request's entity: a cut client-id still finds the
// request's topic-partition and the user's quota; where the client-id
// itself decides (no principal, or a user whose levels name clients) the
// request is unresolved, held to the most restrictive limits; and a whole
// sample that ends before its topics (a long transactional.id) moves even
// a decided connection there, so that it cannot escape a topic-partition's
// limit behind an earlier, unlimited decision.
func TestLearnLengthHidesNothing(t *testing.T) {
	policy := mustPolicy(t, cutConfig)
	l := New[int](policy, nil)
	l.SetSASLListeners(func(c int) bool { return c >= 10 })
	learnS := func(c int, s Sample) Decision {
		t.Helper()
		d, _, err := l.LearnSample(c, 1, s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	unresolved := Target{Key: entity.UnresolvedKey}
	if d := learnS(1, cutSample(kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{3}}))); d.Produce != topicPart("orders-3") {
		t.Errorf("cut client-id to a configured partition: %+v", d.Produce)
	}
	if d := learnS(2, cutSample(kt.Produce(9, kt.TP{Topic: "events", Partitions: []int32{0}}))); d.Produce != unresolved {
		t.Errorf("cut client-id, no principal, unconfigured topic: %+v, want unresolved", d.Produce)
	}
	login := func(c int, user string) Decision {
		learnS(c, cutSample(handshake("PLAIN")))
		return learnS(c, cutSample(authenticate("\x00"+user+"\x00pw")))
	}
	if d := login(10, "alice"); d.Produce != (Target{Key: entity.Key{Kind: entity.KindUser, Name: "alice"}}) {
		t.Errorf("alice with a cut client-id: %+v, want her user entity", d.Produce)
	}
	if d := login(11, "bob"); d.Produce != unresolved {
		t.Errorf("bob (levels per client) with a cut client-id: %+v, want unresolved", d.Produce)
	}
	// A decided connection, then a whole Produce sample cut before its
	// topics by a long transactional.id.
	if d := learn(t, l, 3, kt.Produce(9, kt.TP{Topic: "events", Partitions: []int32{0}}), "free"); d.Produce != client("free") {
		t.Fatalf("free: %+v", d.Produce)
	}
	hidden := kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{3}})
	txid := strings.Repeat("t", 400)
	hidden.TransactionID = &txid
	frame := kt.Frame(hidden, 2, kt.Str("free"))
	if d, _, _ := l.LearnSample(3, 1, Sample{Data: frame[:256], Whole: false}); d.Produce != client("free") {
		t.Errorf("a sample that lost fragments moved the connection: %+v", d.Produce)
	}
	if d, _, _ := l.LearnSample(3, 1, Sample{Data: frame[:256], Whole: true}); d.Produce != unresolved {
		t.Errorf("topics hidden behind a transactional.id: %+v, want unresolved", d.Produce)
	}
	if l.Stats.Unresolved == 0 {
		t.Error("unresolved requests were not counted")
	}
	// The unresolved entity is held to the most restrictive limits and
	// weight configured, and is promised nothing.
	p := policy.Params(entity.UnresolvedKey, entity.Produce)
	if p.Limit != 1<<20 || p.Weight != 0.5 || p.Reservation != 0 {
		t.Errorf("unresolved produce params %+v, want limit 1MiB (slow), weight 0.5, no reservation", p)
	}
	if f := policy.Params(entity.UnresolvedKey, entity.Fetch); f.Limit != 4<<20 {
		t.Errorf("unresolved fetch limit %v, want 4MiB (orders-3)", f.Limit)
	}
}
