package entity

import (
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
