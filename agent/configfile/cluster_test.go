package configfile

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
)

const clusterFile = minimal + `
cluster:
  name: prod-east
  broker_id: 2
  brokers: [3, 1, 2]
  mode: shadow
  lease: 20s
  fallback: floor
  entities:
    clients:
      Backfill.v2: {consumer_byte_rate: 30MB, consumer_byte_reservation: 6MB, quota_weight: 2, topics: [history, history, events]}
    users:
      alice: {producer_byte_rate: 10MB}
`

func TestClusterSectionReads(t *testing.T) {
	cfg, err := Parse([]byte(strings.Replace(clusterFile, "fetch: {capacity: -1}", "fetch: {capacity: 1GB}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Cluster
	if !c.Enabled || c.Name != "prod-east" || c.BrokerID != 2 || len(c.Brokers) != 3 || c.Mode != config.ModeShadow ||
		c.Lease != 20*time.Second || c.Fallback != config.FallbackFloor || c.Topic != "__sluice_cluster_budgets" || c.MaxDelivery != 5*time.Second {
		t.Fatalf("%+v", c)
	}
	budgets := c.Budgets()
	if len(budgets) != 2 || budgets[0].ID != "client:fetch:Backfill.v2" || budgets[0].Limit != 30e6 || budgets[0].Reservation != 6e6 ||
		strings.Join(budgets[0].Topics, ",") != "events,history" || budgets[1].ID != "user:produce:alice" || budgets[1].Limit != 10e6 || budgets[1].Reservation != 0 {
		t.Fatalf("budgets %+v", budgets)
	}
	// Each cluster entity is a configured entity of the host, with the
	// cluster entity's weight and no local rate.
	local := cfg.Entities.Clients["Backfill.v2"]
	if local.QuotaWeight == nil || *local.QuotaWeight != 2 || local.ConsumerByteRate != nil {
		t.Fatalf("local entity %+v", local)
	}
	if _, ok := cfg.Entities.Users["alice"]; !ok {
		t.Fatal("alice is not a configured user")
	}
	if cfg.Cluster.Enabled == (config.Default().Cluster.Enabled) {
		t.Fatal("the section is on by default")
	}
}

func TestClusterSectionEnvironmentBrokerID(t *testing.T) {
	t.Setenv("SLUICE_CLUSTER_BROKER_ID", "3")
	cfg, err := Parse([]byte(strings.Replace(clusterFile, "fetch: {capacity: -1}", "fetch: {capacity: 1GB}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster.BrokerID != 3 {
		t.Fatalf("broker id %d", cfg.Cluster.BrokerID)
	}
}

func TestClusterSectionRefusals(t *testing.T) {
	base := minimal + "fetch: {capacity: 1GB}\n"
	base = strings.Replace(base, "fetch: {capacity: -1}\n", "", 1)
	for _, tc := range []struct{ name, section, key, says string }{
		{"no name", "  broker_id: 1\n  brokers: [1]\n  entities: {clients: {a: {consumer_byte_rate: 1MB}}}\n", "cluster.name", "required"},
		{"no broker id", "  name: x\n  brokers: [1]\n  entities: {clients: {a: {consumer_byte_rate: 1MB}}}\n", "cluster.broker_id", "required"},
		{"broker not listed", "  name: x\n  broker_id: 4\n  brokers: [1, 2]\n  entities: {clients: {a: {consumer_byte_rate: 1MB}}}\n", "cluster.broker_id", "not in cluster.brokers"},
		{"broker twice", "  name: x\n  broker_id: 1\n  brokers: [1, 1]\n  entities: {clients: {a: {consumer_byte_rate: 1MB}}}\n", "cluster.brokers[1]", "listed twice"},
		{"bad broker", "  name: x\n  broker_id: 1\n  brokers: [1, -2]\n  entities: {clients: {a: {consumer_byte_rate: 1MB}}}\n", "cluster.brokers[1]", "not a broker.id"},
		{"no entities", "  name: x\n  broker_id: 1\n  brokers: [1]\n", "cluster.entities", "no cluster entity"},
		{"bad fallback", "  name: x\n  broker_id: 1\n  brokers: [1]\n  fallback: evensplit\n  entities: {clients: {a: {consumer_byte_rate: 1MB}}}\n", "cluster.fallback", "even-split"},
		{"bad mode", "  name: x\n  broker_id: 1\n  brokers: [1]\n  mode: enforcing\n  entities: {clients: {a: {consumer_byte_rate: 1MB}}}\n", "cluster.mode", "enforce or shadow"},
		{"bad topic", "  name: x\n  broker_id: 1\n  brokers: [1]\n  topic: a/b\n  entities: {clients: {a: {consumer_byte_rate: 1MB}}}\n", "cluster.topic", "not a Kafka topic name"},
		{"lease too short", "  name: x\n  broker_id: 1\n  brokers: [1]\n  lease: 500ms\n  entities: {clients: {a: {consumer_byte_rate: 1MB}}}\n", "cluster.lease", "below the minimum"},
		{"unknown key", "  name: x\n  broker_id: 1\n  brokers: [1]\n  leese: 5s\n  entities: {clients: {a: {consumer_byte_rate: 1MB}}}\n", "cluster.leese", "lease"},
		{"unknown quota key", "  name: x\n  broker_id: 1\n  brokers: [1]\n  entities: {clients: {a: {consumer_byte_rat: 1MB}}}\n", "cluster.entities.clients.a.consumer_byte_rat", "consumer_byte_rate"},
		{"reservation over rate", "  name: x\n  broker_id: 1\n  brokers: [1]\n  entities: {clients: {a: {consumer_byte_rate: 1MB, consumer_byte_reservation: 2MB}}}\n", "cluster.entities.clients.a", "exceeds"},
		{"pattern", "  name: x\n  broker_id: 1\n  brokers: [1]\n  entities: {clients: {'consumer-*': {consumer_byte_rate: 1MB}}}\n", "cluster.entities.clients.consumer-*", "one tenant"},
		{"template", "  name: x\n  broker_id: 1\n  brokers: [1]\n  entities: {users: {'<default>': {consumer_byte_rate: 1MB}}}\n", "cluster.entities.users.<default>", "one tenant"},
		{"direction off", "  name: x\n  broker_id: 1\n  brokers: [1]\n  entities: {clients: {a: {producer_byte_rate: 1MB}}}\n", "cluster.entities.clients.a", "produce.capacity is -1"},
		{"topics not a list", "  name: x\n  broker_id: 1\n  brokers: [1]\n  entities: {clients: {a: {consumer_byte_rate: 1MB, topics: history}}}\n", "cluster.entities.clients.a.topics", "list"},
		{"kafka limit without import", "  name: x\n  broker_id: 1\n  brokers: [1]\n  entities: {clients: {a: {consumer_byte_rate: kafka}}}\n", "cluster.entities.clients.a.consumer_byte_rate", "set kafka_quotas: import"},
		{"kafka reservation", "  name: x\n  broker_id: 1\n  brokers: [1]\n  entities: {clients: {a: {consumer_byte_rate: 1MB, consumer_byte_reservation: kafka}}}\n", "cluster.entities.clients.a.consumer_byte_reservation", "kafka"},
		{"long name", "  name: x\n  broker_id: 1\n  brokers: [1]\n  entities: {clients: {" + strings.Repeat("n", 250) + ": {consumer_byte_rate: 1MB}}}\n", "cluster.entities.clients." + strings.Repeat("n", 250), "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := strings.Replace(base, "produce: {capacity: 100MiB}", "produce: {capacity: -1}", 1)
			_, err := Parse([]byte(file + "cluster:\n" + tc.section))
			if err == nil {
				t.Fatal("accepted")
			}
			var found bool
			for _, line := range strings.Split(err.Error(), "\n") {
				found = found || strings.Contains(line, tc.key+": ") && strings.Contains(line, tc.says)
			}
			if !found {
				t.Fatalf("want %s: …%s…, got %v", tc.key, tc.says, err)
			}
		})
	}
}

func TestClusterBudgetAndLocalRateConflict(t *testing.T) {
	file := strings.Replace(clusterFile, "fetch: {capacity: -1}", "fetch: {capacity: 1GB}", 1) + `
entities:
  clients:
    Backfill.v2: {consumer_byte_rate: 5MB, quota_weight: 3}
`
	_, err := Parse([]byte(file))
	if err == nil || !strings.Contains(err.Error(), "cluster.entities.clients.Backfill.v2: also has a consumer rate") ||
		!strings.Contains(err.Error(), "cluster.entities.clients.Backfill.v2.quota_weight: entities.clients.Backfill.v2 sets quota_weight 3 too") {
		t.Fatalf("%v", err)
	}
}

// A rate of "kafka" takes the cluster-wide limit from Kafka's quota store:
// the budget exists (with its reservation) and its limit is unknown until
// read.
func TestClusterLimitFromKafka(t *testing.T) {
	file := strings.Replace(clusterFile, "fetch: {capacity: -1}", "fetch: {capacity: 1GB}", 1)
	file = strings.Replace(file, "alice: {producer_byte_rate: 10MB}", "alice: {producer_byte_rate: kafka, producer_byte_reservation: 2MB}", 1)
	cfg, err := Parse([]byte(file + "kafka_quotas: import\nbootstrap: [127.0.0.1:9092]\n"))
	if err != nil {
		t.Fatal(err)
	}
	budgets := cfg.Cluster.Budgets()
	if len(budgets) != 2 || budgets[1].ID != "user:produce:alice" || !budgets[1].LimitFromKafka || !math.IsInf(budgets[1].Limit, 1) ||
		budgets[1].Reservation != 2e6 || budgets[0].LimitFromKafka {
		t.Fatalf("budgets %+v", budgets)
	}
}
