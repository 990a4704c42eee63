package config

import (
	"strings"
	"testing"
	"time"
)

// Each rule that joins keys is broken alone and named by the key to
// change; a configuration that keeps them all passes.
func TestValidateNamesEachCrossKeyRule(t *testing.T) {
	good := Default()
	good.Interfaces, good.Listeners = []string{"eth0"}, []uint16{9092}
	good.Produce.Capacity, good.Fetch.Capacity = 100e6, 100e6
	if p := good.Validate(); len(p) != 0 {
		t.Fatalf("a valid configuration: %v", p)
	}
	for _, c := range []struct {
		key  string
		edit func(*Config)
	}{
		{"interfaces", func(c *Config) { c.Interfaces = nil }},
		{"listeners", func(c *Config) { c.Listeners = nil }},
		{"produce.capacity", func(c *Config) { c.Produce.Capacity, c.Fetch.Capacity = Disabled, Disabled }},
		{"fetch.min_limit", func(c *Config) { c.Fetch.Capacity = 1000 }},
		{"stale_after", func(c *Config) { c.StaleAfter = c.RefreshInterval - time.Millisecond }},
		{"produce_shaper", func(c *Config) { c.Shaper, c.ProduceShaper = "edt", ProduceShaperPolice }},
		{"sasl.username", func(c *Config) { c.SASL.Mechanism = "PLAIN" }},
		{"tls.cert_file", func(c *Config) { c.TLS.CertFile = "/etc/sluice/client.pem" }},
		{"entities", func(c *Config) {
			c.MaxEntities, c.MaxUnconfiguredEntities = 10, 9
			c.Entities.Clients = map[string]Quota{"a": {}, "b": {}}
		}},
		{"entities.clients.core.produce_latency_objective", func(c *Config) {
			p99 := 50 * time.Millisecond
			c.Entities.Clients = map[string]Quota{"core": {ProduceLatencyObjective: &p99, ConsumerByteReservation: ptr(10e6)}}
		}},
		{"entities.users.alice.fetch_latency_objective", func(c *Config) {
			p99 := 100 * time.Millisecond
			c.Entities.Users = map[string]UserQuota{"alice": {Quota: Quota{FetchLatencyObjective: &p99, ConsumerByteReservation: ptr(0)}}}
		}},
	} {
		cfg := good
		cfg.Entities.Clients = nil
		c.edit(&cfg)
		p := cfg.Validate()
		if len(p) != 1 || p[0].Key != c.key {
			t.Errorf("breaking %s: %v, want one problem keyed %s", c.key, p, c.key)
		} else if strings.TrimSpace(p[0].Message) == "" {
			t.Errorf("%s: an empty message", c.key)
		}
	}
}

func ptr(v float64) *float64 { return &v }

// An objective entity with a reservation in its objective's direction, its
// own or its type's template's, passes.
func TestValidateObjectiveWithReservation(t *testing.T) {
	cfg := Default()
	cfg.Interfaces, cfg.Listeners = []string{"eth0"}, []uint16{9092}
	cfg.Produce.Capacity, cfg.Fetch.Capacity = 100e6, 100e6
	p99 := 50 * time.Millisecond
	cfg.Entities.Clients = map[string]Quota{
		"core":       {ProduceLatencyObjective: &p99, ProducerByteReservation: ptr(10e6)},
		DefaultKey:   {ConsumerByteReservation: ptr(1e6)},
		"dashboards": {FetchLatencyObjective: &p99},
	}
	if p := cfg.Validate(); len(p) != 0 {
		t.Errorf("objectives with reservations refused: %v", p)
	}
}
