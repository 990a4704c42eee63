package entity

import (
	"maps"
	"math"
	"path"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/agent/config"
)

// Policy answers, from the configuration, which entity a request's bytes
// belong to and with which parameters. It is immutable: a configuration
// reload builds a new one.
type Policy struct {
	clients map[string]config.Quota
	// patterns are the glob client entities (config.IsClientPattern),
	// longest first: every client-id a pattern matches shares its entity,
	// exact names win over patterns and the longest pattern wins.
	patterns       []clientPattern
	clientTemplate config.Quota
	topicParts     map[topicPartition]configuredTP
	tpTemplate     config.Quota
}

type clientPattern struct {
	glob  string
	quota config.Quota
}

type topicPartition struct {
	topic     string
	partition int32
}

type configuredTP struct {
	name  string // "<topic>-<partition>", as configured
	quota config.Quota
}

// NewPolicy compiles the entities section of a validated configuration.
func NewPolicy(e config.Entities) *Policy {
	p := &Policy{
		clients:        map[string]config.Quota{},
		clientTemplate: e.Clients[config.DefaultKey],
		topicParts:     map[topicPartition]configuredTP{},
		tpTemplate:     e.TopicPartitions[config.DefaultKey],
	}
	for name, q := range e.Clients {
		switch {
		case name == config.DefaultKey:
		case config.IsClientPattern(name):
			p.patterns = append(p.patterns, clientPattern{glob: name, quota: q})
		default:
			p.clients[SafeName(name)] = q // matched against SafeName(client-id)
		}
	}
	// Longest pattern first; equal lengths in a fixed order.
	slices.SortFunc(p.patterns, func(a, b clientPattern) int {
		if len(a.glob) != len(b.glob) {
			return len(b.glob) - len(a.glob)
		}
		return strings.Compare(a.glob, b.glob)
	})
	for name, q := range e.TopicPartitions {
		if name == config.DefaultKey {
			continue
		}
		topic, part, err := config.SplitTopicPartition(name)
		if err != nil {
			continue // validated by the config loader; unreachable
		}
		p.topicParts[topicPartition{topic, part}] = configuredTP{name: name, quota: q}
	}
	return p
}

// TopicPartition returns the entity of a configured topic-partition.
func (p *Policy) TopicPartition(topic string, partition int32) (Key, bool) {
	tp, ok := p.topicParts[topicPartition{topic, partition}]
	if !ok {
		return Key{}, false
	}
	return Key{Kind: KindTopicPartition, Name: tp.name}, true
}

// HasTopicPartitions reports whether any topic-partition is configured, so
// the learner can skip topic resolution entirely when none is.
func (p *Policy) HasTopicPartitions() bool { return len(p.topicParts) > 0 }

// Client returns the client entity of a client-id: the configured client,
// else the longest configured pattern matching it (all its client-ids
// share that one entity), else a fallback entity of its own (never a
// shared bucket). The client-id is the client's choice, so its name is
// SafeName's, and patterns match that name. Pattern entities are a kind of
// their own, so a client-id spelled like a pattern is matched like any
// other and can never name the pattern's entity.
func (p *Policy) Client(clientID string) Key {
	name := SafeName(clientID)
	if _, ok := p.clients[name]; !ok {
		for _, pt := range p.patterns {
			if ok, _ := path.Match(pt.glob, name); ok {
				return Key{Kind: KindClientPattern, Name: pt.glob}
			}
		}
	}
	return Key{Kind: KindClient, Name: name}
}

// ConfiguredKeys lists every configured entity (templates excluded), in
// a stable order: the registry pins them.
func (p *Policy) ConfiguredKeys() []Key {
	keys := make([]Key, 0, len(p.clients)+len(p.patterns)+len(p.topicParts))
	for _, name := range slices.Sorted(maps.Keys(p.clients)) {
		keys = append(keys, Key{Kind: KindClient, Name: name})
	}
	for _, pt := range p.patterns {
		keys = append(keys, Key{Kind: KindClientPattern, Name: pt.glob})
	}
	tps := make([]string, 0, len(p.topicParts))
	for _, tp := range p.topicParts {
		tps = append(tps, tp.name)
	}
	slices.Sort(tps)
	for _, name := range tps {
		keys = append(keys, Key{Kind: KindTopicPartition, Name: name})
	}
	return keys
}

// Params resolves an entity's three parameters for a direction atomically
// from one place: the entity's own configuration, then its type's default
// template, then the global defaults; finally reservation = min(res, limit).
// Overflow entities take the clients template (they stand for unconfigured
// clients); unknown entities take the global defaults (the agent holds them
// to the headroom H).
func (p *Policy) Params(k Key, d Direction) Params {
	var own, template config.Quota
	switch k.Kind {
	case KindClient:
		own, template = p.clients[k.Name], p.clientTemplate
	case KindClientPattern:
		template = p.clientTemplate
		for _, pt := range p.patterns {
			if pt.glob == k.Name {
				own = pt.quota
			}
		}
	case KindTopicPartition:
		if tp, ok := p.lookupTP(k.Name); ok {
			own = tp.quota
		}
		template = p.tpTemplate
	case KindOverflow:
		template = p.clientTemplate
	}
	res, limit := own.ProducerByteReservation, own.ProducerByteRate
	tres, tlimit := template.ProducerByteReservation, template.ProducerByteRate
	if d == Fetch {
		res, limit = own.ConsumerByteReservation, own.ConsumerByteRate
		tres, tlimit = template.ConsumerByteReservation, template.ConsumerByteRate
	}
	out := Params{
		Reservation: first(res, tres, globalDefaults.Reservation),
		Weight:      first(own.QuotaWeight, template.QuotaWeight, globalDefaults.Weight),
		Limit:       first(limit, tlimit, globalDefaults.Limit),
	}
	out.Reservation = math.Min(out.Reservation, out.Limit)
	return out
}

func (p *Policy) lookupTP(name string) (configuredTP, bool) {
	topic, part, err := config.SplitTopicPartition(name)
	if err != nil {
		return configuredTP{}, false
	}
	tp, ok := p.topicParts[topicPartition{topic, part}]
	return tp, ok
}

func first(own, template *float64, global float64) float64 {
	if own != nil {
		return *own
	}
	if template != nil {
		return *template
	}
	return global
}
