package entity

import "github.com/sluice-dev/sluice/agent/config"

// KafkaQuotas are the client quotas read from the cluster's quota store
// (DescribeClientQuotas; what kafka-configs.sh --alter --entity-type
// clients writes), reduced to what sluice applies: producer_byte_rate and
// consumer_byte_rate as limits. Reservations and weights stay in the file.
type KafkaQuotas struct {
	// Clients by client-id as Kafka stores it.
	Clients map[string]config.Quota
	// ClientDefault is Kafka's client-id <default> quota.
	ClientDefault config.Quota
	// Users by principal as Kafka stores it (--entity-type users), each
	// with its <user, client-id> quotas; the <default> keys are Kafka's
	// --entity-default entries, as in the file's entities.users.
	Users map[string]config.UserQuota
}

// Len counts the quota entries (the defaults included).
func (k KafkaQuotas) Len() int {
	n := len(k.Clients)
	if k.ClientDefault != (config.Quota{}) {
		n++
	}
	for _, u := range k.Users {
		if u.Quota != (config.Quota{}) {
			n++
		}
		n += len(u.Clients)
	}
	return n
}
