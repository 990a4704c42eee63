package entity

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/agent/config"
)

// Two client-ids of one length that differ in any one word of their cut
// bytes never share a hash (each step of the hash is a bijection), and
// lengths are told apart: ids 129 to 400 bytes long, every byte flipped.
func TestLongClientHashTellsApart(t *testing.T) {
	seen := map[uint64]string{}
	base := strings.Repeat("t", 400)
	for n := 1; n <= len(base); n++ {
		tail := []byte(base[:n])
		if other, dup := seen[LongClientHash(tail)]; dup {
			t.Fatalf("tails of %d and %d bytes share a hash", len(other), n)
		}
		seen[LongClientHash(tail)] = string(tail)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		tail := make([]byte, 1+rng.IntN(300))
		for i := range tail {
			tail[i] = byte(rng.Uint32())
		}
		h := LongClientHash(tail)
		i := rng.IntN(len(tail))
		tail[i] ^= byte(1 + rng.IntN(255))
		if LongClientHash(tail) == h {
			t.Fatalf("a tail of %d bytes with byte %d changed kept its hash", len(tail), i)
		}
	}
}

// LongClientID names are safe to show, bounded, and distinct per hash.
func TestLongClientIDNames(t *testing.T) {
	for _, prefix := range []string{strings.Repeat("L", LongClientKept), strings.Repeat("é", LongClientKept/2), strings.Repeat("\xff", LongClientKept),
		strings.Repeat("a", LongClientKept-1) + "\xc3"} { // a cut inside a character
		a, b := SafeName(LongClientID(prefix, 1)), SafeName(LongClientID(prefix, 2))
		if a == b || !utf8.ValidString(a) || len(a) > MaxNameBytes {
			t.Errorf("prefix %q: names %q and %q", prefix[:8], a, b)
		}
	}
	if got := LongClientID(strings.Repeat("L", LongClientKept), 0xabc); len(got) != LongClientKept+len("…")+16 || SafeName(got) != got {
		t.Errorf("a printable prefix: %q is rewritten or not %d bytes", got, LongClientKept+len("…")+16)
	}
}

func longPolicy(t *testing.T, clients map[string]config.Quota, users map[string]config.UserQuota) *Policy {
	t.Helper()
	return NewPolicy(config.Entities{Clients: clients, Users: users})
}

// A long client-id goes by its kept bytes and hash wherever no configured
// client-id or pattern can hang on the bytes cut: each gets its own
// client (or <user, client-id>) entity, with the <default> template's
// parameters; a configured client-id that is it is found by its hash; one
// that may be it (SafeName rewrote its name) or a pattern the kept bytes
// do not rule out leaves it unresolved (ok false).
func TestEntityOfLongClient(t *testing.T) {
	prefix := strings.Repeat("L", LongClientKept)
	idA, idB := prefix+strings.Repeat("a", 100), prefix+strings.Repeat("b", 100)
	hash := func(id string) uint64 { return LongClientHash([]byte(id[LongClientKept:])) }
	limit := 1e6
	q := config.Quota{ProducerByteRate: &limit}

	p := longPolicy(t, map[string]config.Quota{"<default>": {}, "other-*": q}, nil)
	a, okA := p.EntityOfLongClient("", prefix, hash(idA))
	b, okB := p.EntityOfLongClient("", prefix, hash(idB))
	if !okA || !okB || a == b || a.Kind != KindClient || b.Kind != KindClient {
		t.Fatalf("two long client-ids sharing their kept bytes: %v (%v), %v (%v); want two client entities", a, okA, b, okB)
	}
	if again, _ := p.EntityOfLongClient("", prefix, hash(idA)); again != a {
		t.Errorf("the same client-id named %v, then %v", a, again)
	}

	// A configured client-id of 150 printable bytes: the long one that is
	// it takes its entity, the others keep theirs.
	configured := prefix + strings.Repeat("c", 22)
	p = longPolicy(t, map[string]config.Quota{configured: q}, nil)
	if k, ok := p.EntityOfLongClient("", prefix, hash(configured)); !ok || k != (Key{Kind: KindClient, Name: configured}) {
		t.Errorf("the configured long client-id: %v (%v)", k, ok)
	}
	if k, ok := p.EntityOfLongClient("", prefix, hash(idA)); !ok || k == (Key{Kind: KindClient, Name: configured}) {
		t.Errorf("another long client-id: %v (%v), want its own", k, ok)
	}

	// A configured client-id SafeName rewrote (over 200 bytes): it may be
	// this one when its start agrees, never when it does not.
	p = longPolicy(t, map[string]config.Quota{prefix + strings.Repeat("z", 300): q}, nil)
	if k, ok := p.EntityOfLongClient("", prefix, hash(idA)); ok {
		t.Errorf("a rewritten configured client-id that may be it: %v, want unresolved", k)
	}
	if _, ok := p.EntityOfLongClient("", strings.Repeat("M", LongClientKept), hash(idA)); !ok {
		t.Error("a rewritten configured client-id with another start held the long one")
	}

	// Patterns: one whose literal start agrees may match on the bytes cut.
	for glob, may := range map[string]bool{"L*": true, "LLL?": true, "*x": true, "other-*": false, "M[a-z]*": false} {
		p = longPolicy(t, map[string]config.Quota{glob: q}, nil)
		if _, ok := p.EntityOfLongClient("", prefix, hash(idA)); ok == may {
			t.Errorf("pattern %q: ok %v, want %v", glob, ok, !may)
		}
	}

	// Users: alice's own level holds every client of hers; bob's clients
	// <default> gives each long client-id its own <user, client-id>; carol
	// names a long client-id, found by its hash.
	users := map[string]config.UserQuota{
		"alice": {Quota: q},
		"bob":   {Clients: map[string]config.Quota{"<default>": q}},
		"carol": {Clients: map[string]config.Quota{configured: q}},
	}
	p = longPolicy(t, nil, users)
	if k, ok := p.EntityOfLongClient("alice", prefix, hash(idA)); !ok || k != (Key{Kind: KindUser, Name: "alice"}) {
		t.Errorf("alice: %v (%v)", k, ok)
	}
	ba, _ := p.EntityOfLongClient("bob", prefix, hash(idA))
	bb, _ := p.EntityOfLongClient("bob", prefix, hash(idB))
	if ba.Kind != KindUserClient || bb.Kind != KindUserClient || ba == bb {
		t.Errorf("bob's two long client-ids: %v and %v, want two <user, client-id> entities", ba, bb)
	}
	if k, ok := p.EntityOfLongClient("carol", prefix, hash(configured)); !ok || k != (Key{Kind: KindUserClient, Name: UserClientName("carol", configured)}) {
		t.Errorf("carol's configured long client-id: %v (%v)", k, ok)
	}
	// users <default> naming a long client-id: any user's is found.
	users["<default>"] = config.UserQuota{Clients: map[string]config.Quota{configured: q}}
	p = longPolicy(t, nil, users)
	if k, ok := p.EntityOfLongClient("dave", prefix, hash(configured)); !ok || k != (Key{Kind: KindUserClient, Name: UserClientName("dave", configured)}) {
		t.Errorf("dave's long client-id that users <default> names: %v (%v)", k, ok)
	}
}

// FuzzEntityOfLongClient: whatever the kept bytes, hash and user, the
// entity of a long client-id is a client, pattern-free and safe to show,
// or a user's; never a panic.
func FuzzEntityOfLongClient(f *testing.F) {
	limit := 1e6
	q := config.Quota{ProducerByteRate: &limit}
	prefix := strings.Repeat("L", LongClientKept)
	p := NewPolicy(config.Entities{
		Clients: map[string]config.Quota{"<default>": {}, "L*x": q, "other-*": q, prefix + strings.Repeat("c", 22): q, strings.Repeat("\xff", 300): q},
		Users:   map[string]config.UserQuota{"alice": {Quota: q}, "bob": {Clients: map[string]config.Quota{"<default>": q}}},
	})
	f.Add(prefix, uint64(1), "")
	f.Add(strings.Repeat("\xff", LongClientKept), uint64(2), "bob")
	f.Add(strings.Repeat("é", 64), uint64(3), "alice")
	f.Fuzz(func(t *testing.T, prefix string, hash uint64, user string) {
		k, ok := p.EntityOfLongClient(user, prefix, hash)
		if !ok {
			return
		}
		switch k.Kind {
		case KindClient, KindUser, KindUserClient:
		default:
			t.Fatalf("%v", k)
		}
		if !utf8.ValidString(k.Name) || len(k.Name) > MaxNameBytes {
			t.Fatalf("name %q", k.Name)
		}
	})
}

// A long client-id costs the same however many client-ids are configured
// (Kafka's imported quotas may name thousands): LongClients keeps only the
// configured names that may be long.
func BenchmarkLongClientEntity(b *testing.B) {
	for _, n := range []int{0, 4096} {
		b.Run(fmt.Sprintf("configured=%d", n), func(b *testing.B) {
			limit := 1e6
			clients := map[string]config.Quota{"<default>": {}}
			for i := range n {
				clients[fmt.Sprintf("client-%d", i)] = config.Quota{ProducerByteRate: &limit}
			}
			lc := NewPolicy(config.Entities{Clients: clients}).LongClients()
			prefix := strings.Repeat("L", LongClientKept)
			for i := 0; b.Loop(); i++ {
				if _, ok := lc.Entity("", prefix, uint64(i)); !ok {
					b.Fatal("unresolved")
				}
			}
		})
	}
}
