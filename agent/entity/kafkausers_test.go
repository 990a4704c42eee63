package entity

import (
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/agent/config"
)

// User quotas read from Kafka take part in KIP-55's order like the file's:
// at each level the file first (it alone sets reservations and weights),
// then Kafka; a level exists when either store has it.
func TestPolicyKafkaUsers(t *testing.T) {
	rate := func(v float64) *float64 { return &v }
	p := NewPolicyWithKafka(config.Entities{Users: map[string]config.UserQuota{
		"alice": {Quota: config.Quota{ConsumerByteReservation: rate(1e6)}},
	}}, KafkaQuotas{Users: map[string]config.UserQuota{
		"alice":           {Quota: config.Quota{ConsumerByteRate: rate(8e6)}},
		"bob":             {Clients: map[string]config.Quota{"etl": {ConsumerByteRate: rate(2e6)}}},
		config.DefaultKey: {Quota: config.Quota{ConsumerByteRate: rate(5e6)}},
	}})
	for _, c := range []struct {
		user, client string
		want         Key
		limit        float64
		source       Source
	}{
		{"alice", "x", Key{KindUser, "alice"}, 8e6, SourceKafka},
		{"bob", "etl", Key{KindUserClient, UserClientName("bob", "etl")}, 2e6, SourceKafka},
		{"bob", "other", Key{KindUser, "bob"}, 5e6, SourceKafkaDefault}, // /users/<default> in Kafka
		{"carol", "x", Key{KindUser, "carol"}, 5e6, SourceKafkaDefault},
	} {
		k := p.Entity(c.user, c.client)
		params, from := p.Explain(k, Fetch)
		if k != c.want || params.Limit != c.limit || from.Limit != c.source {
			t.Errorf("<%s, %s>: %v limit %v from %v, want %v limit %v from %v", c.user, c.client, k, params.Limit, from.Limit, c.want, c.limit, c.source)
		}
	}
	if params, from := p.Explain(Key{KindUser, "alice"}, Fetch); params.Reservation != 1e6 || from.Reservation != SourceFile {
		t.Errorf("alice's reservation %v from %v, want 1e6 from the file", params.Reservation, from.Reservation)
	}
	if got := fmt.Sprint(p.ConfiguredKeys()); got != "[user-client:bob/etl user:alice]" {
		t.Errorf("configured keys %s: want alice once and <bob, etl>", got)
	}
	if k := p.Entity("", "x"); k != (Key{KindClient, "x"}) {
		t.Errorf("no user: %v", k)
	}
}
