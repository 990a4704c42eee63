package agent

import (
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/kafkaquotas"
	"github.com/sluice-dev/sluice/agent/learner"
)

// Metadata is what the agent reads from the local broker: topic IDs and,
// with kafka_quotas: import, the cluster's client quotas.
type Metadata struct {
	Topics learner.TopicNames
	// Quotas is nil unless kafka_quotas is import.
	Quotas kafkaquotas.Source
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

// pullKafkaQuotas applies the source's newest import, if it is new and
// differs from the set the policy holds. The cycle calls it, so an altered
// quota reaches the data path in the cycle after the import that read it.
func (a *Agent) pullKafkaQuotas() {
	quotas, stats, changed := a.metadata.kafka.Pull()
	if !changed {
		return
	}
	a.cluster.KafkaLimits(quotas)
	a.rebuildPolicy()
	a.log.Info("kafka client quotas imported", "clients", len(quotas.Clients), "client_default", quotas.ClientDefault != (config.Quota{}),
		"skipped", stats.Skipped, "left_out_for_room", a.metadata.kafka.Held().Trimmed)
}

// rebuildPolicy compiles the configuration's entities with the imported
// quotas and pins the configured entities.
func (a *Agent) rebuildPolicy() {
	a.installPolicy(kafkaquotas.Compile(a.cfg, a.metadata.kafka.Quotas()))
}

// installPolicy makes p the policy and pins its configured entities; it
// returns the ids pinning gave to entities that had none.
func (a *Agent) installPolicy(p kafkaquotas.Compiled) []entity.ID {
	if a.metadata.kafka.Installed(p.Held) {
		a.log.Warn("kafka quotas left out: no room for more configured entities (max_entities less max_unconfigured_entities)",
			"left_out", p.Held.Trimmed, "room", p.Room)
	}
	a.limits.SetPolicy(p.Policy)
	a.identity.learner.SetPolicy(p.Policy)
	return a.pinConfigured()
}
