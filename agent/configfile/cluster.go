package configfile

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
)

var clusterKeys = []string{"name", "broker_id", "brokers", "mode", "topic", "replication_factor", "retention", "lease", "fallback",
	"max_delivery", "state_file", "entities"}

var clusterQuotaKeys = []string{"producer_byte_rate", "consumer_byte_rate", "producer_byte_reservation", "consumer_byte_reservation",
	"quota_weight", "topics"}

// cluster reads the cluster section: its scalars through Viper (so that
// SLUICE_CLUSTER_BROKER_ID lets every host share one file), its entities
// from the raw YAML (client-ids and users are case-sensitive and dotted).
func (l *loader) cluster(v any) {
	if v == nil {
		return
	}
	m, ok := v.(map[string]any)
	if !ok {
		l.fail("cluster", "must be a mapping of %s", strings.Join(clusterKeys, ", "))
		return
	}
	c := &l.cfg.Cluster
	c.Enabled = true
	if s, ok := l.str("cluster.name"); ok {
		c.Name = strings.TrimSpace(s)
	}
	if c.Name == "" {
		l.fail("cluster.name", "required: the Kafka cluster's name, the same on every broker")
	}
	if !l.has("cluster.broker_id") {
		l.fail("cluster.broker_id", "required: this host's broker.id (SLUICE_CLUSTER_BROKER_ID lets every host share one file)")
	} else {
		id := -1
		l.integer("cluster.broker_id", &id, 0, math.MaxInt32)
		c.BrokerID = int32(id)
	}
	if items, ok := l.list("cluster.brokers"); ok {
		seen := map[int32]bool{}
		for i, it := range items {
			key := fmt.Sprintf("cluster.brokers[%d]", i)
			f, err := toFloat(it)
			if err != nil || f != math.Trunc(f) || f < 0 || f > math.MaxInt32 {
				l.fail(key, "%v is not a broker.id (a whole number in [0, %d])", it, math.MaxInt32)
				continue
			}
			if seen[int32(f)] {
				l.fail(key, "broker %d is listed twice", int32(f))
				continue
			}
			seen[int32(f)] = true
			c.Brokers = append(c.Brokers, int32(f))
		}
	}
	if len(c.Brokers) == 0 {
		l.fail("cluster.brokers", "required: every broker.id of the cluster, the same list on every broker")
	}
	if s, ok := l.str("cluster.mode"); ok {
		switch config.Mode(s) {
		case config.ModeEnforce, config.ModeShadow:
			c.Mode = config.Mode(s)
		default:
			l.fail("cluster.mode", "%q is not a mode (enforce or shadow)%s", s, suggest(s, []string{"enforce", "shadow"}))
		}
	}
	l.stringTo("cluster.topic", &c.Topic)
	if c.Topic == "" || len(c.Topic) > 249 || strings.ContainsFunc(c.Topic, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) || c.Topic == "." || c.Topic == ".." {
		l.fail("cluster.topic", "%q is not a Kafka topic name (1-249 of a-z A-Z 0-9 . _ -)", c.Topic)
	}
	l.integer("cluster.replication_factor", &c.ReplicationFactor, -1, 32767)
	if c.ReplicationFactor == 0 {
		l.fail("cluster.replication_factor", "0 is not a replication factor (-1 for three, or every broker of a smaller cluster; or 1 and more)")
	}
	l.duration("cluster.lease", &c.Lease, time.Second)
	l.duration("cluster.max_delivery", &c.MaxDelivery, 100*time.Millisecond)
	l.duration("cluster.retention", &c.Retention, time.Minute)
	if s, ok := l.str("cluster.fallback"); ok {
		if contains(config.Fallbacks, s) {
			c.Fallback = s
		} else {
			l.fail("cluster.fallback", "%q is not a fallback (%s)%s", s, strings.Join(config.Fallbacks, ", "), suggest(s, config.Fallbacks))
		}
	}
	l.stringTo("cluster.state_file", &c.StateFile)
	if c.StateFile == "" {
		l.fail("cluster.state_file", "must name a file (the agent's epoch and lease outlive its process there)")
	}
	l.clusterEntities(m["entities"])
}

// clusterEntities decodes cluster.entities: clients and users to their
// cluster-wide quotas.
func (l *loader) clusterEntities(v any) {
	if v == nil {
		return // validate says none is configured
	}
	m, ok := v.(map[string]any)
	if !ok {
		l.fail("cluster.entities", "must be a mapping with clients and users")
		return
	}
	for _, section := range []string{"clients", "users"} {
		sub, present := m[section]
		if !present || sub == nil {
			continue
		}
		entries, ok := sub.(map[string]any)
		if !ok {
			l.fail("cluster.entities."+section, "must be a mapping of names to cluster quotas")
			continue
		}
		dst := l.cfg.Cluster.Entities.Clients
		if section == "users" {
			dst = l.cfg.Cluster.Entities.Users
		}
		for _, name := range slices.Sorted(maps.Keys(entries)) {
			path := "cluster.entities." + section + "." + name
			if name == config.DefaultKey || (section == "clients" && config.IsClientPattern(name)) {
				l.fail(path, "a cluster entity is one tenant: templates and client-id patterns are not (every matching client would share one cluster budget under names no report can carry)")
				continue
			}
			if q, ok := l.clusterQuota(path, entries[name]); ok {
				dst[name] = q
			}
		}
	}
}

func (l *loader) clusterQuota(path string, v any) (config.ClusterQuota, bool) {
	var q config.ClusterQuota
	m, ok := v.(map[string]any)
	if !ok {
		l.fail(path, "must be a mapping of %s", strings.Join(clusterQuotaKeys, ", "))
		return q, false
	}
	good := true
	for _, k := range slices.Sorted(maps.Keys(m)) {
		var dst **float64
		switch k {
		case "producer_byte_rate":
			dst = &q.ProducerByteRate
		case "consumer_byte_rate":
			dst = &q.ConsumerByteRate
		case "producer_byte_reservation":
			dst = &q.ProducerByteReservation
		case "consumer_byte_reservation":
			dst = &q.ConsumerByteReservation
		case "quota_weight":
			w, ok := l.positiveWeight(path+".quota_weight", m[k])
			good = good && ok
			q.QuotaWeight = w
			continue
		case "topics":
			list, ok := m[k].([]any)
			if !ok {
				l.fail(path+".topics", "must be a list of the topics the tenant uses")
				good = false
				continue
			}
			for i, t := range list {
				s, isString := t.(string)
				if !isString || strings.TrimSpace(s) == "" {
					l.fail(fmt.Sprintf("%s.topics[%d]", path, i), "%v is not a topic name", t)
					good = false
					continue
				}
				q.Topics = append(q.Topics, strings.TrimSpace(s))
			}
			slices.Sort(q.Topics)
			q.Topics = slices.Compact(q.Topics)
			continue
		default:
			l.fail(path+"."+k, "unknown key%s", suggest(k, clusterQuotaKeys))
			good = false
			continue
		}
		if s, isString := m[k].(string); isString && strings.TrimSpace(s) == config.ClusterLimitFromKafka {
			switch k {
			case "producer_byte_rate":
				q.ProducerRateFromKafka = true
				continue
			case "consumer_byte_rate":
				q.ConsumerRateFromKafka = true
				continue
			}
		}
		r, ok := l.rateValue(path+"."+k, m[k])
		good = good && ok
		*dst = r
	}
	good = l.reservationsWithinRates(path, q.ProducerByteReservation, q.ProducerByteRate, q.ConsumerByteReservation, q.ConsumerByteRate) && good
	return q, good
}

// clusterLocalEntities makes every cluster entity a configured entity of
// this host (pinned, never reclaimed or overflowed), carrying the cluster
// entity's weight. A weight set in both places is refused by name.
func (l *loader) clusterLocalEntities() {
	c := &l.cfg
	for _, name := range slices.Sorted(maps.Keys(c.Cluster.Entities.Clients)) {
		cq := c.Cluster.Entities.Clients[name]
		q := c.Entities.Clients[name]
		if !l.mergeWeight("clients", name, &q, cq) {
			continue
		}
		c.Entities.Clients[name] = q
	}
	for _, name := range slices.Sorted(maps.Keys(c.Cluster.Entities.Users)) {
		cq := c.Cluster.Entities.Users[name]
		u := c.Entities.Users[name]
		if u.Clients == nil {
			u.Clients = map[string]config.Quota{}
		}
		if !l.mergeWeight("users", name, &u.Quota, cq) {
			continue
		}
		c.Entities.Users[name] = u
	}
}

func (l *loader) mergeWeight(section, name string, q *config.Quota, cq config.ClusterQuota) bool {
	if cq.QuotaWeight == nil {
		return true
	}
	if q.QuotaWeight != nil && *q.QuotaWeight != *cq.QuotaWeight {
		l.fail("cluster.entities."+section+"."+name+".quota_weight", "entities.%s.%s sets quota_weight %v too: set it in one place", section, name, *q.QuotaWeight)
		return false
	}
	q.QuotaWeight = cq.QuotaWeight
	return true
}
