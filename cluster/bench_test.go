package cluster

import (
	"fmt"
	"testing"
)

// BenchmarkRound100Brokers100Entities is one agent's work per round on a
// 100-broker cluster with 100 cluster entities: ingest 100 reports, then
// compute every broker's share of every entity (docs/cluster-budgets.md,
// "3 brokers and 100").
func BenchmarkRound100Brokers100Entities(b *testing.B) {
	const n, ne = 100, 100
	brokers := make([]BrokerID, n)
	for i := range brokers {
		brokers[i] = BrokerID(i + 1)
	}
	ents := make([]Entity, ne)
	for e := range ents {
		ents[e] = Entity{ID: fmt.Sprintf("tenant-%03d", e), Limit: 30 * mb, Reservation: 6 * mb}
	}
	v, err := NewView(DefaultConfig("prod", brokers, ents))
	if err != nil {
		b.Fatal(err)
	}
	reports := make([]Report, n)
	for i := range reports {
		r := &reports[i]
		*r = Report{Cluster: "prod", Broker: brokers[i], Epoch: 1, Instance: 1, Entities: make([]EntityReport, ne)}
		for e := range r.Entities {
			r.Entities[e] = EntityReport{Entity: ents[e].ID, Usage: float64((i*7+e*13)%50) * mb / 100, HeldBack: (i+e)%5 == 0, Led: uint32((i + e) % 4), Limit: 30 * mb, Reservation: 6 * mb}
		}
	}
	// A round's targets are computed when its first report arrives, from
	// the reports before it: one round ahead of the timed ones, so that
	// every timed round (even one, -benchtime 1x) sees all brokers live.
	ingest := func(round uint64) {
		for i := range reports {
			// Each echoes its previous report, as an agent that reads
			// does: otherwise every broker is deaf after K rounds.
			reports[i].Seq, reports[i].Round, reports[i].Echo = round, round, round-1
			v.Ingest(&reports[i])
		}
	}
	ingest(1)
	b.ReportAllocs()
	for round := uint64(2); b.Loop(); round++ {
		ingest(round)
	}
	if v.Targets().LiveCount != n {
		b.Fatalf("live %d, want %d", v.Targets().LiveCount, n)
	}
}
