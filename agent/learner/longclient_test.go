package learner

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/agent/entity"
	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

// hashedSample is a sample of req from a client-id longer than the data
// path keeps, as the reader delivers it: the kept bytes as the client-id,
// and the hash of the rest.
func hashedSample(req kmsg.Request, id string) Sample {
	return Sample{Data: kt.Frame(req, 1, kt.Str(id[:entity.LongClientKept])), Whole: true, ClientIDCut: true,
		ClientIDHash: entity.LongClientHash([]byte(id[entity.LongClientKept:])), ClientIDHashed: true}
}

// Client-ids longer than a sample keeps, 129 bytes and more, sharing their
// first 128: each keeps a client entity of its own (the same one for each
// of its requests and connections), none is unresolved, bob's too (his
// levels name only reports: his other clients go by the client levels).
// Without the hash (the sample lost it) the request is unresolved, as
// before.
func TestLearnLongClientIDsStayDistinct(t *testing.T) {
	l := New[int](mustPolicy(t, cutConfig), nil)
	l.SetSASLListeners(func(c int) bool { return c >= 1000 })
	prefix := strings.Repeat("c", entity.LongClientKept)
	seen := map[entity.Key]int{}
	c := 0
	for _, n := range []int{137, 138, 200, 300, 1000, 32000} {
		for _, last := range "xyz" {
			id := prefix + strings.Repeat("w", n-entity.LongClientKept-1) + string(last)
			var key entity.Key
			for _, req := range []kmsg.Request{apiVersions(), kt.Produce(9, kt.TP{Topic: "events", Partitions: []int32{0}})} {
				c++
				d, _, err := l.LearnSample(c, 1, hashedSample(req, id))
				if err != nil {
					t.Fatal(err)
				}
				k := d.Produce.Key
				if k.Kind != entity.KindClient {
					t.Fatalf("client-id of %d bytes: %v, want a client entity", n, k)
				}
				if key != (entity.Key{}) && k != key {
					t.Fatalf("client-id of %d bytes: %v, then %v", n, key, k)
				}
				key = k
			}
			if other, dup := seen[key]; dup {
				t.Errorf("client-ids of %d and %d bytes share %v", other, n, key)
			}
			seen[key] = n
		}
	}
	// bob's levels name only reports: a long client-id of his goes by the
	// client levels, each its own.
	login := func(conn int, id string) Decision {
		l.LearnSample(conn, 1, hashedSample(handshake("PLAIN"), id))
		d, _, _ := l.LearnSample(conn, 1, hashedSample(authenticate("\x00bob\x00pw"), id))
		return d
	}
	a, b := login(1000, prefix+"a"+strings.Repeat("w", 50)), login(1001, prefix+"b"+strings.Repeat("w", 50))
	if a.Produce.Key.Kind != entity.KindClient || b.Produce.Key.Kind != entity.KindClient || a.Produce == b.Produce {
		t.Errorf("bob's long client-ids: %v and %v, want two client entities", a.Produce, b.Produce)
	}
	// The hash lost: the client-id could be any, and only the user decides.
	s := hashedSample(kt.Produce(9, kt.TP{Topic: "events", Partitions: []int32{0}}), prefix+strings.Repeat("w", 50))
	s.ClientIDHashed = false
	if d, _, _ := l.LearnSample(-1, 1, s); d.Produce != (Target{Key: entity.UnresolvedKey}) {
		t.Errorf("a long client-id whose hash was lost: %v, want unresolved", d.Produce)
	}
}

// Stats.Unresolved counts requests that leave their connection undecided
// (the agent then holds it to the unresolved entity), but not the SASL
// exchange before a login, which decides nothing by design.
func TestLearnCountsUndecidedRequests(t *testing.T) {
	l := New[int](mustPolicy(t, usersConfig), nil)
	l.SetSASLListeners(func(c int) bool { return c == 1 })
	learn(t, l, 1, apiVersions(), "app")
	learn(t, l, 1, handshake("PLAIN"), "app")
	if n := l.Stats.Unresolved; n != 0 {
		t.Fatalf("the SASL exchange before the login counted %d", n)
	}
	learn(t, l, 1, authenticate("garbage"), "app") // a login that names nobody
	if n := l.Stats.Unresolved; n != 1 {
		t.Fatalf("a login that named nobody: counted %d, want 1", n)
	}
	frame := kt.Frame(apiVersions(), 1, kt.Str(strings.Repeat("c", 300)))
	if d, _, _ := l.LearnSample(2, 1, Sample{Data: frame[:100]}); d.Decided != [2]bool{} {
		t.Fatalf("a sample cut in its header decided %+v", d)
	}
	if n := l.Stats.Unresolved; n != 2 {
		t.Fatalf("a header the sample could not hold: counted %d, want 2", n)
	}
	learn(t, l, 3, apiVersions(), "app") // decides both ways
	if n := l.Stats.Unresolved; n != 2 {
		t.Errorf("a deciding request was counted: %d", n)
	}
}
