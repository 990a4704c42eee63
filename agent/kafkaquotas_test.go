package agent

import (
	"math"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/learner"
)

// fakeQuotas is a ClusterQuotas whose reads the test sets.
type fakeQuotas struct {
	quotas entity.KafkaQuotas
	stats  learner.QuotaImportStats
}

func (f *fakeQuotas) Latest() (entity.KafkaQuotas, learner.QuotaImportStats) {
	return f.quotas, f.stats
}

func (f *fakeQuotas) imported(q entity.KafkaQuotas) {
	f.quotas = q
	f.stats.Generation++
	f.stats.Applied = q.Len()
}

func consumerLimits(rates map[string]float64) entity.KafkaQuotas {
	q := entity.KafkaQuotas{Clients: map[string]config.Quota{}}
	for name, r := range rates {
		q.Clients[name] = config.Quota{ConsumerByteRate: &r}
	}
	return q
}

// An imported client quota becomes a configured client's limit in the
// next cycle (and its shaper rate), a changed one replaces it, a failed
// read changes nothing, room bounds what is pinned, and turning import off
// on reload takes the Kafka limits away.
func TestAgentAppliesImportedKafkaQuotas(t *testing.T) {
	source := &fakeQuotas{}
	built := 0
	r := newRigWith(t, baseConfig+`
kafka_quotas: import
max_entities: 12
max_unconfigured_entities: 10
entities:
  clients:
    '<default>': {quota_weight: 1}
`, func(d *Deps) {
		d.NewMetadata = func(c config.Config) (Metadata, error) {
			built++
			if c.KafkaQuotas == config.KafkaQuotasImport {
				return Metadata{Quotas: source}, nil
			}
			return Metadata{}, nil
		}
	})
	source.imported(consumerLimits(map[string]float64{"orders": 300, "audit": 200, "zz-last": 100}))
	s := r.cycle()
	orders := entityView(s, entity.Fetch, "orders")
	if float64(orders.Limit) != 300 || orders.Sources.Limit != "kafka" || !orders.Configured {
		t.Fatalf("orders %+v: want limit 300 from kafka, configured", orders)
	}
	if got := r.sh.rates[entity.Fetch][orders.ID]; got > 300 {
		t.Errorf("orders' shaper rate %v exceeds its Kafka limit 300", got)
	}
	if b := r.learn(41000, "orders", apiVersions()); b.Fetch != orders.ID {
		t.Errorf("a connection from orders bound to %d, want the pinned entity %d", b.Fetch, orders.ID)
	}
	// Room: max_entities 12 less 10 unconfigured leaves 2; the first two by name.
	if e := entityView(s, entity.Fetch, "zz-last"); e.Configured {
		t.Errorf("zz-last was pinned beyond the room: %+v", e)
	}
	if k := s.KafkaQuotas; k == nil || k.Clients != 2 || k.LeftOut != 1 || k.Imports != 1 {
		t.Errorf("status %+v: want 2 clients, 1 left out, 1 import", s.KafkaQuotas)
	}
	if !strings.Contains(r.logs.String(), "kafka quotas left out") {
		t.Error("no warning names the quotas left out")
	}

	// kafka-configs.sh --alter: the next import lowers the limit.
	source.imported(consumerLimits(map[string]float64{"orders": 150}))
	s = r.cycle()
	if e := entityView(s, entity.Fetch, "orders"); float64(e.Limit) != 150 || r.sh.rates[entity.Fetch][e.ID] > 150 {
		t.Errorf("after the alter: orders limit %v, shaper rate %v, want 150", e.Limit, r.sh.rates[entity.Fetch][e.ID])
	}
	if e := entityView(s, entity.Fetch, "audit"); e.Configured || !math.IsInf(float64(e.Limit), 1) {
		t.Errorf("audit's quota was removed in Kafka but it keeps %+v", e)
	}

	// A failed read: the last good set stays, the failure is counted.
	source.stats.Failures++
	s = r.cycle()
	if e := entityView(s, entity.Fetch, "orders"); float64(e.Limit) != 150 || s.KafkaQuotas.Failures != 1 {
		t.Errorf("after a failed read: orders limit %v, failures %d; want 150 and 1", e.Limit, s.KafkaQuotas.Failures)
	}

	// Import turned off: the metadata client is rebuilt without quotas.
	next := r.a.Config()
	next.KafkaQuotas = config.KafkaQuotasOff
	if err := r.a.Reload(next); err != nil {
		t.Fatal(err)
	}
	s = r.cycle()
	if e := entityView(s, entity.Fetch, "orders"); !math.IsInf(float64(e.Limit), 1) || e.Sources.Limit != "global default" || s.KafkaQuotas != nil || built != 2 {
		t.Errorf("import off: orders %+v, status %+v, clients built %d; want the global limit, no kafka status, 2 builds", e, s.KafkaQuotas, built)
	}
}
