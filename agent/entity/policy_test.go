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
