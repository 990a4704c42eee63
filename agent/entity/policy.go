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
	// kafka: the cluster's client quotas (kafka_quotas: import), limits
	// only, keyed by SafeName(client-id); kafkaDefault is its client-id
	// <default>. YAML wins wherever it sets a limit (Params).
	kafka        map[string]config.Quota
	kafkaDefault config.Quota
	// users by SafeName(principal); userTemplate is users <default>.
	users        map[string]*userEntry
	userTemplate *userEntry
	// kafkaUsers and kafkaUserTemplate: the same read from the cluster's
	// quota store (limits only).
	kafkaUsers        map[string]*userEntry
	kafkaUserTemplate *userEntry
	userKeyList       []Key
	// peers: entities.peers, longest prefix first; listeners: the TLS
	// listeners' entities by port (every TLS listener is listed).
	peers            []configuredPeer
	peerTemplate     config.Quota
	listeners        map[string]config.Quota
	listenerTemplate config.Quota
	// unresolved: the most restrictive limits and weight of every quota a
	// sampled request can be attributed by (clients, patterns, users,
	// topic-partitions, their templates, Kafka's quotas): the unresolved
	// entity's parameters.
	unresolved config.Quota
	strictest  strictestTPs
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
func NewPolicy(e config.Entities) *Policy { return NewPolicyWithKafka(e, KafkaQuotas{}) }

// NewPolicyWithKafka compiles the entities section together with the
// client quotas imported from the cluster. A client with a Kafka quota is
// a configured client (pinned, an exact name that wins over patterns), as
// far as room allows (KafkaQuotas.Clients is already bounded by the caller).
func NewPolicyWithKafka(e config.Entities, k KafkaQuotas) *Policy {
	p := &Policy{
		kafka:            map[string]config.Quota{},
		kafkaDefault:     k.ClientDefault,
		clients:          map[string]config.Quota{},
		clientTemplate:   e.Clients[config.DefaultKey],
		topicParts:       map[topicPartition]configuredTP{},
		tpTemplate:       e.TopicPartitions[config.DefaultKey],
		peers:            compilePeers(e.Peers),
		peerTemplate:     e.Peers[config.DefaultKey],
		listeners:        map[string]config.Quota{},
		listenerTemplate: e.Listeners[config.DefaultKey],
	}
	for port, q := range e.Listeners {
		if port != config.DefaultKey {
			p.listeners[port] = q
		}
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
	for name, q := range k.Clients {
		p.kafka[SafeName(name)] = q
	}
	p.users, p.userTemplate = compileUsers(e.Users, false)
	p.kafkaUsers, p.kafkaUserTemplate = compileUsers(k.Users, true)
	p.userKeyList = p.userKeys(e.Users, k.Users)
	slices.SortFunc(p.userKeyList, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
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
	p.unresolved = mostRestrictive(e, k)
	p.compileStrictest()
	return p
}

// mostRestrictive folds every quota that can attribute a sampled request
// into one: the lowest limit each direction has anywhere, and the lowest
// weight; no reservation (nobody is promised anything for bytes nobody can
// name). Unset stays unset (the global defaults).
func mostRestrictive(e config.Entities, k KafkaQuotas) config.Quota {
	var out config.Quota
	lower := func(dst **float64, v *float64) {
		if v != nil && (*dst == nil || *v < **dst) {
			x := *v
			*dst = &x
		}
	}
	add := func(q config.Quota) {
		lower(&out.ProducerByteRate, q.ProducerByteRate)
		lower(&out.ConsumerByteRate, q.ConsumerByteRate)
		lower(&out.QuotaWeight, q.QuotaWeight)
	}
	users := func(us map[string]config.UserQuota) {
		for _, u := range us {
			add(u.Quota)
			for _, q := range u.Clients {
				add(q)
			}
		}
	}
	for _, q := range e.Clients {
		add(q)
	}
	for _, q := range e.TopicPartitions {
		add(q)
	}
	users(e.Users)
	for _, q := range k.Clients {
		add(q)
	}
	add(k.ClientDefault)
	users(k.Users)
	return out
}

// EntityOfCutClient is Entity for a client-id the data path cut (longer
// than a sample keeps; prefix is what it kept): only a user level that no
// such client-id can change decides it. ok is false when the entity hangs
// on the client-id's unseen bytes: no principal, a level with a clients
// <default> (one entity per client-id), or a configured client-id at
// least as long as the prefix (it might be this one).
func (p *Policy) EntityOfCutClient(user, prefix string) (Key, bool) {
	if user == "" {
		return Key{}, false
	}
	u := SafeName(user)
	for _, level := range []userStores{p.user(u), p.userDefaults()} {
		if level.mayNameLongClient(len(prefix)) {
			return Key{}, false
		}
		if level.ownLevel() {
			return Key{Kind: KindUser, Name: u}, true
		}
	}
	return Key{}, false
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
	if !p.exactClient(name) {
		for _, pt := range p.patterns {
			if ok, _ := path.Match(pt.glob, name); ok {
				return Key{Kind: KindClientPattern, Name: pt.glob}
			}
		}
	}
	return Key{Kind: KindClient, Name: name}
}

func (p *Policy) exactClient(name string) bool {
	if _, ok := p.clients[name]; ok {
		return true
	}
	_, ok := p.kafka[name]
	return ok
}

// ConfiguredKeys lists every configured entity (templates excluded), in
// a stable order: the registry pins them. Clients with a Kafka quota are
// configured too (only the cluster's administrators can set one).
func (p *Policy) ConfiguredKeys() []Key {
	keys := make([]Key, 0, len(p.clients)+len(p.kafka)+len(p.patterns)+len(p.topicParts))
	names := slices.Collect(maps.Keys(p.clients))
	for name := range p.kafka {
		if _, ok := p.clients[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
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
	keys = append(keys, p.userKeyList...)
	for _, peer := range p.peers {
		keys = append(keys, Key{Kind: KindPeer, Name: peer.name})
	}
	for _, port := range slices.Sorted(maps.Keys(p.listeners)) {
		keys = append(keys, Key{Kind: KindListener, Name: port})
	}
	return keys
}

// Params resolves an entity's three parameters for a direction atomically
// from one place (Explain says where each came from).
func (p *Policy) Params(k Key, d Direction) Params {
	params, _ := p.Explain(k, d)
	return params
}

// Source says where a resolved parameter came from.
type Source uint8

const (
	// SourceGlobal: the global default (docs/design.md §1).
	SourceGlobal Source = iota
	// SourceFile: the entity's own entry in the configuration file.
	SourceFile
	// SourceKafka: the entity's own client quota in the cluster.
	SourceKafka
	// SourceTemplate: the file's <default> template for the entity's type.
	SourceTemplate
	// SourceKafkaDefault: the cluster's client-id <default> quota.
	SourceKafkaDefault
	// SourceCluster: this host's share of a cluster budget (the agent sets
	// it over what the policy resolved).
	SourceCluster
)

func (s Source) String() string {
	return [...]string{"global default", "file", "kafka", "file <default>", "kafka <default>", "cluster share"}[s]
}

// Sources says where each of an entity's parameters came from.
type Sources struct{ Reservation, Weight, Limit Source }

// Explain resolves an entity's parameters for a direction, from the most
// specific level down (users and <user, client-id> entities: the levels of
// KIP-55 that name them, then the global defaults): the entity's own entry in the file, its own quota
// in Kafka (limits only), its type's template in the file, Kafka's client
// <default> (limits only), the global defaults. Exact entities come before
// defaults, as in Kafka, and the file wins at each level because it is the
// only place that sets reservations and weights. Finally reservation =
// min(res, limit). Overflow entities take the client templates (they stand
// for unconfigured clients); unknown entities take the global defaults
// (the agent holds them to the strictest limit in force).
func (p *Policy) Explain(k Key, d Direction) (Params, Sources) {
	var own, kafkaOwn, template, kafkaTemplate config.Quota
	switch k.Kind {
	case KindClient:
		own, kafkaOwn, template, kafkaTemplate = p.clients[k.Name], p.kafka[k.Name], p.clientTemplate, p.kafkaDefault
	case KindClientPattern:
		template, kafkaTemplate = p.clientTemplate, p.kafkaDefault
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
		template, kafkaTemplate = p.clientTemplate, p.kafkaDefault
	case KindPeer:
		template = p.peerTemplate
		for _, peer := range p.peers {
			if peer.name == k.Name {
				own = peer.quota
			}
		}
	case KindListener:
		own, template = p.listeners[k.Name], p.listenerTemplate
	case KindUnresolved:
		own = p.unresolved
	}
	levels := []level{{own, SourceFile}, {kafkaOwn, SourceKafka}, {template, SourceTemplate}, {kafkaTemplate, SourceKafkaDefault}}
	if k.Kind == KindUser || k.Kind == KindUserClient {
		levels = p.userLevels(k)
	}
	resolve := func(field func(config.Quota) *float64, global float64) (float64, Source) {
		for _, l := range levels {
			if v := field(l.q); v != nil {
				return *v, l.src
			}
		}
		return global, SourceGlobal
	}
	res, limit := producerReservation, producerRate
	if d == Fetch {
		res, limit = consumerReservation, consumerRate
	}
	var out Params
	var from Sources
	out.Reservation, from.Reservation = resolve(res, globalDefaults.Reservation)
	out.Weight, from.Weight = resolve(weight, globalDefaults.Weight)
	out.Limit, from.Limit = resolve(limit, globalDefaults.Limit)
	out.Reservation = math.Min(out.Reservation, out.Limit)
	return out, from
}

// level is one place parameters may come from, and which source it is.
type level struct {
	q   config.Quota
	src Source
}

func producerReservation(q config.Quota) *float64 { return q.ProducerByteReservation }
func consumerReservation(q config.Quota) *float64 { return q.ConsumerByteReservation }
func producerRate(q config.Quota) *float64        { return q.ProducerByteRate }
func consumerRate(q config.Quota) *float64        { return q.ConsumerByteRate }
func weight(q config.Quota) *float64              { return q.QuotaWeight }

func (p *Policy) lookupTP(name string) (configuredTP, bool) {
	topic, part, err := config.SplitTopicPartition(name)
	if err != nil {
		return configuredTP{}, false
	}
	tp, ok := p.topicParts[topicPartition{topic, part}]
	return tp, ok
}
