package entity

import (
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/agent/config"
)

// "<default>" is the template, as Kafka spells it; a client really named
// "default" is configured like any other, and a client that names itself
// "<default>" is an unconfigured client with the template's parameters,
// never a configured entity.
func TestPolicyTemplateSpelling(t *testing.T) {
	weight := func(v float64) *float64 { return &v }
	p := NewPolicy(config.Entities{Clients: map[string]config.Quota{
		config.DefaultKey: {QuotaWeight: weight(0.25)},
		"default":         {QuotaWeight: weight(7)},
	}})
	if got := p.Params(p.Client("default"), Fetch).Weight; got != 7 {
		t.Errorf("client default: weight %v, want its own 7", got)
	}
	if got := p.Params(p.Client("someone"), Fetch).Weight; got != 0.25 {
		t.Errorf("an unconfigured client: weight %v, want the template's 0.25", got)
	}
	if got := p.Params(p.Client("<default>"), Fetch).Weight; got != 0.25 {
		t.Errorf("a client named <default>: weight %v, want the template's 0.25", got)
	}
	keys := p.ConfiguredKeys()
	if len(keys) != 1 || keys[0] != (Key{Kind: KindClient, Name: "default"}) {
		t.Errorf("configured keys %v, want only the client default", keys)
	}
}

// A client-id glob gives every client-id it matches one shared entity:
// exact names win over patterns, the longest pattern wins, and a
// client-id spelled like a pattern never names the pattern's entity.
func TestClientPatterns(t *testing.T) {
	weight := func(v float64) *float64 { return &v }
	p := NewPolicy(config.Entities{Clients: map[string]config.Quota{
		config.DefaultKey:         {QuotaWeight: weight(1)},
		"consumer-orders-*":       {QuotaWeight: weight(2)},
		"consumer-orders-audit-*": {QuotaWeight: weight(3)},
		"consumer-orders-7":       {QuotaWeight: weight(4)},
		"orders-[12]":             {QuotaWeight: weight(5)},
	}})
	pattern := func(glob string) Key { return Key{Kind: KindClientPattern, Name: glob} }
	client := func(name string) Key { return Key{Kind: KindClient, Name: name} }
	for id, want := range map[string]Key{
		"consumer-orders-1":       pattern("consumer-orders-*"),
		"consumer-orders-2":       pattern("consumer-orders-*"),
		"consumer-orders-audit-1": pattern("consumer-orders-audit-*"), // the longer pattern
		"consumer-orders-7":       client("consumer-orders-7"),        // exact beats pattern
		"consumer-payments-1":     client("consumer-payments-1"),
		"orders-2":                pattern("orders-[12]"),
		"orders-[12]":             client("orders-[12]"), // spelled like the pattern: its own entity
		"consumer-orders-*":       pattern("consumer-orders-*"),
	} {
		if got := p.Client(id); got != want {
			t.Errorf("client-id %q: entity %v, want %v", id, got, want)
		}
	}
	for key, want := range map[Key]float64{
		pattern("consumer-orders-*"): 2, pattern("consumer-orders-audit-*"): 3, client("consumer-orders-7"): 4,
		client("orders-[12]"): 1, pattern("orders-[12]"): 5,
	} {
		if got := p.Params(key, Fetch).Weight; got != want {
			t.Errorf("%v: weight %v, want %v", key, got, want)
		}
	}
	configured := map[Key]bool{}
	for _, k := range p.ConfiguredKeys() {
		configured[k] = true
	}
	if !configured[pattern("consumer-orders-*")] || !configured[pattern("orders-[12]")] || configured[client("orders-[12]")] || len(configured) != 4 {
		t.Errorf("configured keys %v", p.ConfiguredKeys())
	}
}

// Imported Kafka quotas give limits where the file sets none, in Kafka's
// order (exact entities before defaults), the file first at each level;
// Explain names each parameter's source; a client with a Kafka quota is an
// exact, configured client that wins over patterns.
func TestPolicyKafkaQuotas(t *testing.T) {
	v := func(f float64) *float64 { return &f }
	file := config.Entities{Clients: map[string]config.Quota{
		config.DefaultKey:   {ConsumerByteRate: v(50), QuotaWeight: v(2)},
		"both":              {ConsumerByteRate: v(10), ConsumerByteReservation: v(4)},
		"reserved-only":     {ConsumerByteReservation: v(3)},
		"consumer-orders-*": {ConsumerByteRate: v(70)},
	}}
	kafka := KafkaQuotas{
		Clients: map[string]config.Quota{
			"both":              {ConsumerByteRate: v(20), ProducerByteRate: v(21)},
			"reserved-only":     {ConsumerByteRate: v(30)},
			"consumer-orders-9": {ConsumerByteRate: v(40)},
		},
		ClientDefault: config.Quota{ProducerByteRate: v(60), ConsumerByteRate: v(61)},
	}
	p := NewPolicyWithKafka(file, kafka)
	for _, c := range []struct {
		client   string
		dir      Direction
		want     Params
		from     Sources
		wantKind Kind
	}{
		// The file's own limit beats Kafka's; Kafka's own beats the file's template.
		{"both", Fetch, Params{4, 2, 10}, Sources{SourceFile, SourceTemplate, SourceFile}, KindClient},
		{"both", Produce, Params{0, 2, 21}, Sources{SourceGlobal, SourceTemplate, SourceKafka}, KindClient},
		{"reserved-only", Fetch, Params{3, 2, 30}, Sources{SourceFile, SourceTemplate, SourceKafka}, KindClient},
		// The file's template beats Kafka's default; Kafka's default beats the global default.
		{"stranger", Fetch, Params{0, 2, 50}, Sources{SourceGlobal, SourceTemplate, SourceTemplate}, KindClient},
		{"stranger", Produce, Params{0, 2, 60}, Sources{SourceGlobal, SourceTemplate, SourceKafkaDefault}, KindClient},
		// An exact Kafka client wins over a pattern it matches.
		{"consumer-orders-9", Fetch, Params{0, 2, 40}, Sources{SourceGlobal, SourceTemplate, SourceKafka}, KindClient},
	} {
		key := p.Client(c.client)
		params, from := p.Explain(key, c.dir)
		if key.Kind != c.wantKind || params != c.want || from != c.from {
			t.Errorf("%s %s: %v %+v from %+v, want %v %+v from %+v", c.client, c.dir, key.Kind, params, from, c.wantKind, c.want, c.from)
		}
	}
	if key := p.Client("consumer-orders-1"); key.Kind != KindClientPattern {
		t.Errorf("consumer-orders-1: %v, want the pattern", key)
	}
	pattern, from := p.Explain(Key{Kind: KindClientPattern, Name: "consumer-orders-*"}, Produce)
	if pattern.Limit != 60 || from.Limit != SourceKafkaDefault {
		t.Errorf("pattern's produce limit %v from %v, want Kafka's default 60", pattern.Limit, from.Limit)
	}
	var names []string
	for _, k := range p.ConfiguredKeys() {
		names = append(names, k.String())
	}
	want := "[client:both client:consumer-orders-9 client:reserved-only client-pattern:consumer-orders-*]"
	if got := fmt.Sprint(names); got != want {
		t.Errorf("configured keys %s, want %s", got, want)
	}
	if got := fmt.Sprint(SourceKafkaDefault, " ", SourceTemplate); got != "kafka <default> file <default>" {
		t.Errorf("source names %q", got)
	}
}

// Users resolve in KIP-55's order, topic-partitions and the client levels
// after them; each level names its entity (a user's clients share a user
// entity; a <user, client-id> level gives each pair its own), and no
// client-id can name another user's entity.
func TestPolicyUsersKIP55(t *testing.T) {
	v := func(f float64) *float64 { return &f }
	q := func(limit float64) config.Quota { return config.Quota{ConsumerByteRate: v(limit)} }
	p := NewPolicy(config.Entities{
		Clients: map[string]config.Quota{"app": q(70), config.DefaultKey: q(80)},
		Users: map[string]config.UserQuota{
			"alice":           {Quota: q(30), Clients: map[string]config.Quota{"reports": q(10), config.DefaultKey: q(20)}},
			"bob":             {Quota: q(31)},
			"carol":           {Clients: map[string]config.Quota{"etl": q(11)}},
			config.DefaultKey: {Quota: q(60), Clients: map[string]config.Quota{"audit": q(40)}},
		},
	})
	for _, c := range []struct {
		user, client string
		want         Key
		limit        float64
		from         Source
	}{
		{"alice", "reports", Key{KindUserClient, "alice/reports"}, 10, SourceFile},   // 1 /users/alice/clients/reports
		{"alice", "other", Key{KindUserClient, "alice/other"}, 20, SourceTemplate},   // 2 /users/alice/clients/<default>
		{"bob", "anything", Key{KindUser, "bob"}, 31, SourceFile},                    // 3 /users/bob
		{"carol", "etl", Key{KindUserClient, "carol/etl"}, 11, SourceFile},           // 1
		{"carol", "audit", Key{KindUserClient, "carol/audit"}, 40, SourceTemplate},   // 4 /users/<default>/clients/audit
		{"dave", "audit", Key{KindUserClient, "dave/audit"}, 40, SourceTemplate},     // 4
		{"dave", "app", Key{KindUser, "dave"}, 60, SourceTemplate},                   // 6 /users/<default>
		{"", "app", Key{KindClient, "app"}, 70, SourceFile},                          // 7 /clients/app
		{"", "x", Key{KindClient, "x"}, 80, SourceTemplate},                          // 8 /clients/<default>
		{"a/b", "c", Key{KindUser, "a/b"}, 60, SourceTemplate},                       // '/' in a user name
		{"alice", "../bob", Key{KindUserClient, "alice/../bob"}, 20, SourceTemplate}, // a hostile client-id stays alice's
	} {
		key := p.Entity(c.user, c.client)
		params, from := p.Explain(key, Fetch)
		if key != c.want || params.Limit != c.limit || from.Limit != c.from {
			t.Errorf("user %q client %q: %v limit %v from %v, want %v %v from %v", c.user, c.client, key, params.Limit, from.Limit, c.want, c.limit, c.from)
		}
	}
	if a, b := p.Entity("a/b", "c"), p.Entity("a", "b/c"); a == b {
		t.Errorf("user a/b and user a with client-id b/c share %v", a)
	}
	var names []string
	for _, k := range p.ConfiguredKeys() {
		names = append(names, k.String())
	}
	if got, want := fmt.Sprint(names), "[client:app user-client:alice/reports user-client:carol/etl user:alice user:bob]"; got != want {
		t.Errorf("configured keys %s, want %s", got, want)
	}
}
