package agent

import (
	"maps"
	"reflect"
	"slices"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/learner"
	"github.com/sluice-dev/sluice/agent/status"
)

// Metadata is what the agent reads from the local broker: topic IDs and,
// with kafka_quotas: import, the cluster's client quotas.
type Metadata struct {
	Topics learner.TopicNames
	// Quotas is nil unless kafka_quotas is import.
	Quotas QuotaSource
	// Brokers lists the cluster's brokers (nil: not known).
	Brokers BrokerSource
	// Stop ends the client (nil: nothing to end).
	Stop func()
}

func (m Metadata) stop() func() {
	if m.Stop == nil {
		return func() {}
	}
	return m.Stop
}

// QuotaSource is the cluster's client quotas as last read
// (metadata.ClusterQuotas): the last good set, and the import counters.
type QuotaSource interface {
	Latest() (entity.KafkaQuotas, learner.QuotaImportStats)
}

// kafkaQuotaState is the agent's side of kafka_quotas: import.
type kafkaQuotaState struct {
	source QuotaSource
	// applied is the source's import generation the policy holds.
	applied uint64
	// quotas is the last good set, as read (fitKafkaQuotas trims it to the
	// registry's room when the policy is built).
	quotas entity.KafkaQuotas
	// stats are the source's counters at the last cycle; earlier adds the
	// counters of sources a reload replaced, so totals never go back.
	stats           learner.QuotaImportStats
	earlierImports  uint64
	earlierFailures uint64
	// trimmed: entities left out of the policy for lack of room; inUse:
	// what the policy holds.
	trimmed int
	inUse   entity.KafkaQuotas
}

// replaceSource swaps in a reload's metadata client. The last good set
// stays until the new client imports, unless import was turned off.
func (k *kafkaQuotaState) replaceSource(next QuotaSource) {
	k.earlierImports += k.stats.Generation
	k.earlierFailures += k.stats.Failures
	k.source, k.applied, k.stats = next, 0, learner.QuotaImportStats{LastImport: k.stats.LastImport}
	if next == nil {
		k.quotas = entity.KafkaQuotas{}
	}
}

// pullKafkaQuotas applies the source's newest import, if it is new and
// differs from the set the policy holds. The cycle calls it, so an altered
// quota reaches the data path in the cycle after the import that read it.
func (a *Agent) pullKafkaQuotas() {
	if a.kafka.source == nil {
		return
	}
	quotas, stats := a.kafka.source.Latest()
	a.kafka.stats = stats
	if stats.Generation == a.kafka.applied {
		return
	}
	a.kafka.applied = stats.Generation
	if reflect.DeepEqual(quotas, a.kafka.quotas) {
		return
	}
	a.kafka.quotas = quotas
	a.cluster.kafkaLimits(quotas)
	a.rebuildPolicy()
	a.log.Info("kafka client quotas imported", "clients", len(quotas.Clients), "client_default", quotas.ClientDefault != (config.Quota{}),
		"skipped", stats.Skipped, "left_out_for_room", a.kafka.trimmed)
}

// rebuildPolicy compiles the configuration's entities with the imported
// quotas and pins the configured entities.
func (a *Agent) rebuildPolicy() {
	a.installPolicy(policyFor(a.cfg, a.kafka.quotas))
}

// compiledPolicy is a configuration's entities compiled with the imported
// quotas that fit beside them.
type compiledPolicy struct {
	policy  *entity.Policy
	inUse   entity.KafkaQuotas
	trimmed int
	room    int
}

// policyFor compiles cfg's entities with quotas; it changes nothing.
func policyFor(cfg config.Config, quotas entity.KafkaQuotas) compiledPolicy {
	room := cfg.MaxEntities - cfg.MaxUnconfiguredEntities - cfg.Entities.Configured()
	inUse, trimmed := fitKafkaQuotas(quotas, cfg.Entities, room)
	return compiledPolicy{policy: entity.NewPolicyWithKafka(cfg.Entities, inUse), inUse: inUse, trimmed: trimmed, room: room}
}

// installPolicy makes p the policy and pins its configured entities; it
// returns the ids pinning gave to entities that had none.
func (a *Agent) installPolicy(p compiledPolicy) []entity.ID {
	if p.trimmed > 0 && p.trimmed != a.kafka.trimmed {
		a.log.Warn("kafka quotas left out: no room for more configured entities (max_entities less max_unconfigured_entities)",
			"left_out", p.trimmed, "room", p.room)
	}
	a.kafka.trimmed, a.kafka.inUse = p.trimmed, p.inUse
	a.limits.SetPolicy(p.policy)
	a.learner.SetPolicy(p.policy)
	return a.pinConfigured()
}

// fitKafkaQuotas keeps the imported entries that fit the room configured
// entities have left (entities the file names take none; <default>s
// none), clients first, then users, each by name, and returns how many
// entities it left out. Every configured entity is pinned, so the registry
// must keep them and the unconfigured budget within max_entities.
func fitKafkaQuotas(q entity.KafkaQuotas, file config.Entities, room int) (entity.KafkaQuotas, int) {
	out := entity.KafkaQuotas{Clients: make(map[string]config.Quota, len(q.Clients)), ClientDefault: q.ClientDefault,
		Users: make(map[string]config.UserQuota, len(q.Users))}
	left := 0
	take := func(n int) bool {
		if n > room {
			left += n
			return false
		}
		room -= n
		return true
	}
	for _, name := range slices.Sorted(maps.Keys(q.Clients)) {
		if _, inFile := file.Clients[name]; inFile || take(1) {
			out.Clients[name] = q.Clients[name]
		}
	}
	for _, name := range slices.Sorted(maps.Keys(q.Users)) {
		u := q.Users[name]
		if name == config.DefaultKey {
			out.Users[name] = u // templates are no entities
			continue
		}
		inFile, fileHas := file.Users[name]
		need := 0
		if u.Quota != (config.Quota{}) && !fileHas {
			need++ // the user's own entity
		}
		for client := range u.Clients {
			if _, both := inFile.Clients[client]; client != config.DefaultKey && !both {
				need++
			}
		}
		if take(need) {
			out.Users[name] = u
		}
	}
	return out, left
}

// view is status' and metrics' picture (nil when import is off).
func (k *kafkaQuotaState) view() *status.KafkaQuotasView {
	if k.source == nil {
		return nil
	}
	return &status.KafkaQuotasView{
		Imports: k.earlierImports + k.stats.Generation, Failures: k.earlierFailures + k.stats.Failures,
		Clients: len(k.inUse.Clients), Users: len(k.inUse.Users), ClientDefault: k.quotas.ClientDefault != (config.Quota{}),
		Skipped: k.stats.Skipped, LeftOut: k.trimmed, LastImport: k.stats.LastImport,
	}
}
