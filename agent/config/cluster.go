package config

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// Cluster configures cluster-wide budgets (docs/cluster-budgets.md): the
// entities whose byte rates and reservations hold across every broker of
// the Kafka cluster, split into one share per broker through a
// coordination topic. Every broker's agent must be given the same section
// (broker_id aside): the split is computed by every agent from the same
// inputs.
type Cluster struct {
	// Enabled is set when the file has a cluster section.
	Enabled bool
	// Name names the Kafka cluster; reports naming another are foreign.
	Name string
	// BrokerID is this host's broker.id; Brokers lists every broker's.
	BrokerID int32
	Brokers  []int32
	// Mode: enforce applies each share as the entity's local limit; shadow
	// computes, reports and shows shares and applies none (for rollout).
	Mode Mode
	// Topic is the coordination topic (one partition: its order is the
	// protocol), created when missing with ReplicationFactor (-1: three
	// replicas, or every broker of a smaller cluster) and Retention, and
	// refused when it cannot keep an acknowledged report (cluster/kafkalog
	// settings.go).
	Topic             string
	ReplicationFactor int
	Retention         time.Duration
	// Lease: how long an agent cut from the topic keeps its last share.
	Lease time.Duration
	// Fallback is the share after the lease: even-split, floor or
	// full-limit.
	Fallback string
	// MaxDelivery bounds a report's time from send to landing (the
	// producer's delivery timeout); reclaiming a silent broker waits for it.
	MaxDelivery time.Duration
	// StateFile keeps the agent's epoch and lease anchor across restarts.
	StateFile string
	// Entities are the cluster entities.
	Entities ClusterEntities
}

// Cluster fallback modes (the cluster package's FallbackMode names).
const (
	FallbackEvenSplit = "even-split"
	FallbackFloor     = "floor"
	FallbackFullLimit = "full-limit"
)

// Fallbacks lists them.
var Fallbacks = []string{FallbackEvenSplit, FallbackFloor, FallbackFullLimit}

// ClusterEntities are the tenants with cluster-wide budgets: client-ids and
// users, the entities that follow a tenant from broker to broker (a
// topic-partition has one leader; a peer network is a host's view).
type ClusterEntities struct {
	Clients map[string]ClusterQuota
	Users   map[string]ClusterQuota
}

// ClusterQuota is a cluster entity's budget in Kafka's vocabulary: the
// byte rates and reservations are for the whole cluster; the weight ranks
// the entity against the others on each host. Topics are the topics the
// tenant uses: the reservation is spread over brokers by how many of their
// partitions each leads, before any demand is seen.
type ClusterQuota struct {
	ProducerByteRate *float64
	ConsumerByteRate *float64
	// ProducerRateFromKafka, ConsumerRateFromKafka: the rate is "kafka":
	// the cluster-wide limit is Kafka's own quota for this exact client-id
	// or user, read from the quota store (kafka_quotas: import), and
	// follows it when it is altered.
	ProducerRateFromKafka, ConsumerRateFromKafka bool
	ProducerByteReservation                      *float64
	ConsumerByteReservation                      *float64
	QuotaWeight                                  *float64
	Topics                                       []string
}

// Cluster entity kinds, as budget ids spell them.
const (
	ClusterKindClient = "client"
	ClusterKindUser   = "user"
)

// ClusterBudget is one cluster entity in one direction: one budget the
// cluster splits.
type ClusterBudget struct {
	// ID is "<kind>:<direction>:<name>", the id reports carry.
	ID string
	// Kind is ClusterKindClient or ClusterKindUser; Name the client-id or
	// user; Produce the direction (false: fetch).
	Kind, Name string
	Produce    bool
	// Limit (+Inf for none) and Reservation are cluster-wide bytes/s.
	Limit, Reservation float64
	// LimitFromKafka: the limit is Kafka's quota for the entity, as the
	// quota store holds it (+Inf until read, and when it holds none).
	LimitFromKafka bool
	Topics         []string
}

// ClusterLimitFromKafka is the rate value that takes a cluster entity's
// limit from Kafka's quota store.
const ClusterLimitFromKafka = "kafka"

// MaxClusterBudgetID is the longest budget id a report carries.
const MaxClusterBudgetID = 255

// Budgets lists the cluster entities' budgets, one per entity and direction
// with a byte rate or reservation, sorted by id: every agent derives the
// same list from the same section.
func (c Cluster) Budgets() []ClusterBudget {
	var out []ClusterBudget
	add := func(kind string, quotas map[string]ClusterQuota) {
		for name, q := range quotas {
			for _, d := range []struct {
				produce    bool
				dir        string
				rate, resv *float64
				fromKafka  bool
			}{{true, "produce", q.ProducerByteRate, q.ProducerByteReservation, q.ProducerRateFromKafka},
				{false, "fetch", q.ConsumerByteRate, q.ConsumerByteReservation, q.ConsumerRateFromKafka}} {
				if d.rate == nil && d.resv == nil && !d.fromKafka {
					continue
				}
				b := ClusterBudget{ID: kind + ":" + d.dir + ":" + name, Kind: kind, Name: name, Produce: d.produce,
					Limit: math.Inf(1), LimitFromKafka: d.fromKafka, Topics: q.Topics}
				if d.rate != nil {
					b.Limit = *d.rate
				}
				if d.resv != nil {
					b.Reservation = min(*d.resv, b.Limit)
				}
				out = append(out, b)
			}
		}
	}
	add(ClusterKindClient, c.Entities.Clients)
	add(ClusterKindUser, c.Entities.Users)
	slices.SortFunc(out, func(a, b ClusterBudget) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// validateCluster checks the cluster section's joins with the rest.
func (c Config) validateCluster(fail func(key, format string, args ...any)) {
	cl := c.Cluster
	if !cl.Enabled {
		return
	}
	if !slices.Contains(cl.Brokers, cl.BrokerID) {
		fail("cluster.broker_id", "%d is not in cluster.brokers %v", cl.BrokerID, cl.Brokers)
	}
	if len(cl.Budgets()) == 0 {
		fail("cluster.entities", "no cluster entity has a byte rate or reservation: list clients or users with producer_byte_rate, consumer_byte_rate or their reservations")
	}
	if cl.Lease < c.RefreshInterval {
		fail("cluster.lease", "%v is shorter than refresh_interval %v: an agent would lose its lease between two reports", cl.Lease, c.RefreshInterval)
	}
	for _, b := range cl.Budgets() {
		key := "cluster.entities." + map[string]string{ClusterKindClient: "clients", ClusterKindUser: "users"}[b.Kind] + "." + b.Name
		if len(b.ID) > MaxClusterBudgetID {
			fail(key, "the name is too long for a report (%d bytes with its kind and direction; at most %d)", len(b.ID), MaxClusterBudgetID)
		}
		if b.LimitFromKafka && c.KafkaQuotas != KafkaQuotasImport {
			fail(key+"."+map[bool]string{true: "producer", false: "consumer"}[b.Produce]+"_byte_rate",
				"%q reads the limit from Kafka's quota store, but kafka_quotas is %q: set kafka_quotas: import", ClusterLimitFromKafka, c.KafkaQuotas)
		}
		dir := c.Fetch
		if b.Produce {
			dir = c.Produce
		}
		if !dir.Enabled() {
			fail(key, "has a %s budget, but %s.capacity is -1 (the direction is not governed)", map[bool]string{true: "produce", false: "fetch"}[b.Produce],
				map[bool]string{true: "produce", false: "fetch"}[b.Produce])
		}
		// The entity's local quota must not set what the cluster splits.
		var local Quota
		switch b.Kind {
		case ClusterKindClient:
			local = c.Entities.Clients[b.Name]
		case ClusterKindUser:
			local = c.Entities.Users[b.Name].Quota
		}
		rate, resv := local.ConsumerByteRate, local.ConsumerByteReservation
		if b.Produce {
			rate, resv = local.ProducerByteRate, local.ProducerByteReservation
		}
		if rate != nil || resv != nil {
			fail(key, "also has a %s rate or reservation under entities: the cluster budget's share is this host's limit; set it in one place",
				map[bool]string{true: "producer", false: "consumer"}[b.Produce])
		}
	}
}

// String is the budget as operators read it: "client backfill (fetch)".
func (b ClusterBudget) String() string {
	dir := "fetch"
	if b.Produce {
		dir = "produce"
	}
	return fmt.Sprintf("%s %s (%s)", b.Kind, b.Name, dir)
}
