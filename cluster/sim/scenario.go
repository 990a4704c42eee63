// Package sim is a deterministic simulation of cluster budgets: N agents of
// package cluster, the log they share, a network that loses, delays,
// reorders and duplicates reports, agents that crash and restart, partitions,
// skewed clocks, demand shifts and leadership moves — all drawn from one
// seeded PRNG, so a seed replays exactly. Each step it checks the bounds
// stated in docs/cluster-budgets.md.
package sim

import (
	"math/rand/v2"
	"time"

	"github.com/sluice-dev/sluice/cluster"
)

// tick is the simulation's time step: agents act, and reports land, on ticks.
const tick = 100 * time.Millisecond

// scenario is everything a seed decides before the run starts.
type scenario struct {
	cfg       cluster.Config
	ticks     int
	rate      []float64       // each agent's clock rate (1 ± skew)
	phase     []time.Duration // each agent's clock at real time 0
	startAt   []int           // tick each agent first starts
	loss, dup float64
	slowFrac  float64 // fraction of reports delayed up to MaxDelivery
	readProb  float64 // chance per tick an agent reads the log
	junkProb  float64 // chance per tick of a bad report in the log
	offered   [][]float64
	led       [][]uint32
	events    []event
	quietFrom int // tick after which nothing is disturbed
	// change, when set, alters one entity's budget once (Kafka's quota
	// altered): each host learns it at its own tick, as each agent reads
	// the quota store on its own schedule.
	change *budgetChange
}

// budgetChange is one entity's budget altered at tick at; host i learns
// it at learnAt[i].
type budgetChange struct {
	entity  int
	at      int
	learnAt []int
	to      cluster.Budget
}

type eventKind uint8

const (
	crash eventKind = iota
	partition
	outage // every agent partitioned at once
	demandShift
	leaderMove
)

type event struct {
	kind     eventKind
	at, dur  int // ticks
	broker   int
	wipeDisk bool
}

// newScenario draws a scenario from rng. Time is scaled down from production
// (lease 4 s, delivery bound 1 s, downtime 3 s) so that a seed exercises leases and
// reclaims in well under a minute of simulated time; the bounds are stated
// in periods and hold at any scale.
func newScenario(rng *rand.Rand) *scenario {
	n := 2 + rng.IntN(5)
	ne := 1 + rng.IntN(2)
	brokers := make([]cluster.BrokerID, n)
	for i := range brokers {
		brokers[i] = cluster.BrokerID(i + 1)
	}
	ents := make([]cluster.Entity, ne)
	for e := range ents {
		limit := float64(10+rng.IntN(91)) * 1e6
		ents[e] = cluster.Entity{ID: string(rune('a' + e)), Limit: limit, Reservation: float64(rng.IntN(7)) / 10 * limit}
	}
	cfg := cluster.DefaultConfig("sim", brokers, ents)
	cfg.Lease = 4 * time.Second
	cfg.MaxDelivery = time.Second
	cfg.MaxDowntime = 3 * time.Second // crashes last 0.5–3 s
	cfg.Fallback = cluster.FallbackMode(rng.IntN(3))

	s := &scenario{cfg: cfg, ticks: 300 + rng.IntN(151)}
	for i := 0; i < n; i++ {
		s.rate = append(s.rate, 1+(2*rng.Float64()-1)*cfg.MaxClockSkew)
		s.phase = append(s.phase, time.Duration(rng.Int64N(int64(time.Hour))))
		s.startAt = append(s.startAt, rng.IntN(20))
	}
	// A quarter of the seeds have a clean network, half a lossy one (a
	// report the producer gave up on after its retries), a quarter a
	// hostile one (up to 30 % lost, a fifth delayed up to the bound).
	switch rng.IntN(4) {
	case 0:
	case 1, 2:
		s.loss = rng.Float64() * 0.05
		s.dup = rng.Float64() * 0.05
		s.slowFrac = rng.Float64() * 0.05
	default:
		s.loss = 0.05 + rng.Float64()*0.25
		s.dup = rng.Float64() * 0.1
		s.slowFrac = rng.Float64() * 0.2
	}
	s.readProb = 0.5 + rng.Float64()/2
	s.junkProb = rng.Float64() * 0.03
	s.offered = drawDemand(rng, n, ents)
	s.led = drawLeadership(rng, n, ne)

	disturbUntil := s.ticks * 6 / 10
	s.quietFrom = 20
	for range rng.IntN(5) {
		ev := event{kind: eventKind(rng.IntN(5)), at: rng.IntN(disturbUntil), broker: rng.IntN(n)}
		switch ev.kind {
		case crash:
			ev.dur = 5 + rng.IntN(26) // 0.5–3 s: restarts before its share is reclaimed
			ev.wipeDisk = rng.IntN(2) == 0
		case partition, outage:
			ev.dur = 10 + rng.IntN(131) // 1–14 s: some outlast the lease and the reclaim
		}
		s.events = append(s.events, ev)
		s.quietFrom = max(s.quietFrom, ev.at+ev.dur)
	}
	// A third of the seeds alter a budget: lowered or raised, each host
	// learning it up to 3 s after the others (metadata_refresh).
	if rng.IntN(3) == 0 {
		e := rng.IntN(ne)
		limit := float64(10+rng.IntN(91)) * 1e6
		ch := &budgetChange{entity: e, at: rng.IntN(disturbUntil),
			to: cluster.Budget{Limit: limit, Reservation: float64(rng.IntN(7)) / 10 * limit}}
		for range n {
			ch.learnAt = append(ch.learnAt, ch.at+rng.IntN(31))
			s.quietFrom = max(s.quietFrom, ch.learnAt[len(ch.learnAt)-1])
		}
		s.change = ch
	}
	return s
}

// drawDemand gives each broker an offered load per entity: idle, below its
// even share, or more than the whole limit.
func drawDemand(rng *rand.Rand, n int, ents []cluster.Entity) [][]float64 {
	d := make([][]float64, n)
	for i := range d {
		d[i] = make([]float64, len(ents))
		for e, ent := range ents {
			switch rng.IntN(3) {
			case 0:
			case 1:
				d[i][e] = float64(rng.IntN(1000)) / 1000 * ent.Limit / float64(n)
			default:
				d[i][e] = float64(rng.IntN(1000)) / 1000 * 2 * ent.Limit
			}
		}
	}
	return d
}

// drawLeadership gives each broker a count of each entity's partitions.
func drawLeadership(rng *rand.Rand, n, ne int) [][]uint32 {
	l := make([][]uint32, n)
	for i := range l {
		l[i] = make([]uint32, ne)
		for e := range l[i] {
			l[i][e] = uint32(rng.IntN(11))
		}
	}
	return l
}
