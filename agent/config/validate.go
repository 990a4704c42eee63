package config

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Validate checks the rules that join keys of several sections (each key's
// own range and form are checked where it is read): something to govern,
// floors the capacity can carry, a heartbeat that outlives a cycle, a
// complete SASL login and TLS key pair, and room for every configured
// entity. It returns every broken rule, keyed by the key to change.
func (c Config) Validate() Problems {
	var out Problems
	fail := func(key, format string, args ...any) {
		out = append(out, Problem{Key: key, Message: fmt.Sprintf(format, args...)})
	}
	if len(c.Interfaces) == 0 {
		fail("interfaces", "at least one interface is required")
	}
	if len(c.Listeners) == 0 {
		fail("listeners", "at least one broker listener port is required")
	}
	if !c.Produce.Enabled() && !c.Fetch.Enabled() {
		fail("produce.capacity", "both directions are disabled (capacity -1): set produce.capacity or fetch.capacity")
	}
	for _, d := range []struct {
		name string
		dir  Direction
	}{{"produce", c.Produce}, {"fetch", c.Fetch}} {
		if d.dir.Enabled() && d.dir.MinLimit > d.dir.Distributable() {
			fail(d.name+".min_limit", "%s exceeds what the direction distributes (capacity × safety_ratio = %s): one entity's floor would take it all",
				FormatRate(d.dir.MinLimit), FormatRate(d.dir.Distributable()))
		}
	}
	if c.ProduceShaper == ProduceShaperPolice && c.Shaper == "edt" {
		fail("produce_shaper", "police goes with shaper htb or auto (fetch through htb, produce policed); edt shapes both directions itself")
	}
	if c.StaleAfter <= c.RefreshInterval {
		fail("stale_after", "%v must exceed refresh_interval %v, or a healthy agent would look dead", c.StaleAfter, c.RefreshInterval)
	}
	if c.SASL.Mechanism != "" && c.SASL.Username == "" {
		fail("sasl.username", "required with sasl.mechanism %s", c.SASL.Mechanism)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		fail("tls.cert_file", "tls.cert_file and tls.key_file go together")
	}
	if n, room := c.Entities.Configured(), c.MaxEntities-c.MaxUnconfiguredEntities; n > room {
		fail("entities", "%d configured entities, but max_entities %d less max_unconfigured_entities %d leaves room for %d",
			n, c.MaxEntities, c.MaxUnconfiguredEntities, room)
	}
	c.validateObjectives(fail)
	c.validateCluster(fail)
	return out
}

// validateObjectives requires a reservation in the objective's direction
// on every entity with a latency objective (its own, or its type's
// <default> template's): the breaker defends the tenant's latency by
// holding best-effort traffic back, which does nothing for a tenant whose
// own bandwidth is not guaranteed (best-effort itself, it would compete
// for the spare it frees, and two such tenants once trimmed each other).
func (c Config) validateObjectives(fail func(key, format string, args ...any)) {
	check := func(kind, name string, q, template Quota) {
		for _, o := range []struct {
			objective   *time.Duration
			key, resKey string
			res, tmpl   *float64
		}{
			{q.ProduceLatencyObjective, "produce_latency_objective", "producer_byte_reservation", q.ProducerByteReservation, template.ProducerByteReservation},
			{q.FetchLatencyObjective, "fetch_latency_objective", "consumer_byte_reservation", q.ConsumerByteReservation, template.ConsumerByteReservation},
		} {
			if o.objective == nil {
				continue
			}
			res := o.res
			if res == nil {
				res = o.tmpl
			}
			if res == nil || *res <= 0 {
				fail(fmt.Sprintf("entities.%s.%s.%s", kind, name, o.key),
					"needs %s on the same entity: an objective holds best-effort traffic back, which guarantees nothing to a tenant without a reservation of its own", o.resKey)
			}
		}
	}
	each := func(kind string, m map[string]Quota) {
		template := m[DefaultKey]
		for _, name := range slices.Sorted(maps.Keys(m)) {
			if name != DefaultKey {
				check(kind, name, m[name], template)
			}
		}
	}
	each("clients", c.Entities.Clients)
	each("topic_partitions", c.Entities.TopicPartitions)
	each("peers", c.Entities.Peers)
	users := map[string]Quota{}
	for name, u := range c.Entities.Users {
		users[name] = u.Quota
	}
	each("users", users)
}
