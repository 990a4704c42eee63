// Package sim is a deterministic simulation of cluster budgets: N agents of
// package cluster, the log they share, a network that loses, delays,
// reorders and duplicates reports, agents that crash and restart, partitions,
// skewed clocks, demand shifts and leadership moves, and the routine
// operations of issue #49 (a host replaced after retention, a log emptied by
// a long outage, a deaf agent, reboots, two processes on one broker id, a
// crash that uses the whole downtime bound) — all drawn from one seeded PRNG,
// so a seed replays exactly. Each step it checks the bounds stated in
// docs/cluster-budgets.md with allowances computed from the spec, and each
// seed with a mild network must converge within a stated time (liveness).
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
	cfg   cluster.Config
	ticks int
	rate  []float64       // each agent's clock rate (1 ± skew)
	phase []time.Duration // each agent's clock at real time 0
	// wallOffset is each host's wall clock error in ms (NTP: ±100).
	wallOffset []int64
	startAt    []int // tick each agent first starts
	loss, dup  float64
	slowFrac   float64 // fraction of reports delayed up to MaxDelivery
	readProb   float64 // chance per tick an agent reads the log
	junkProb   float64 // chance per tick of a bad report in the log
	offered    [][]float64
	led        [][]uint32
	events     []event
	quietFrom  int // tick after which nothing is disturbed
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
	// The routine operations of issue #49, and worse timing:
	cutCrash   // partitioned, then crashed for MaxDowntime just before its lease runs out
	deaf       // its reports land, it reads nothing
	reboot     // a crash with a new boot and a fresh data path
	replace    // the host dies; a new one (no state file, fresh data path) takes its id after retention dropped its reports
	logEmptied // an outage longer than retention empties the log; one host reboots meanwhile
	twin       // a second process takes the id from another host; the first host is retired at the end
)

var eventNames = [...]string{"crash", "partition", "outage", "demand-shift", "leader-move", "cut-crash", "deaf", "reboot", "replace", "log-emptied", "twin"}

func (k eventKind) String() string { return eventNames[k] }

type event struct {
	kind     eventKind
	at, dur  int // ticks
	broker   int
	wipeDisk bool
	// host is the extra host a replace or twin event starts.
	host int
}

// retentionTicks is how far back a reader that starts after a log
// truncation reads: the topic keeps K periods of reports and a few more
// (docs/cluster-budgets.md §7: retention of at least K periods).
func (s *scenario) retentionTicks() int {
	return int((time.Duration(s.cfg.ReclaimReports()+3) * s.cfg.Period) / tick)
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
	// Seeds without a crash hold the bound with no downtime: K is then the
	// tightest the lease allows, so an agent holding its share past it is
	// caught. With crashes, the bound is 2–6 s and some crashes last it
	// all (cutCrash).
	cfg.MaxDowntime = 0
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
	kinds := make([]eventKind, rng.IntN(5))
	for k := range kinds {
		kinds[k] = eventKind(rng.IntN(5))
	}
	// A third of the seeds also have one of the routine operations or the
	// timing corner.
	if rng.IntN(3) == 0 {
		kinds = append(kinds, cutCrash+eventKind(rng.IntN(int(twin-cutCrash)+1)))
	}
	for _, k := range kinds {
		if k == crash || k == cutCrash || k == reboot || k == logEmptied {
			s.cfg.MaxDowntime = time.Duration(2+rng.IntN(5)) * time.Second
			break
		}
	}
	down := int(s.cfg.MaxDowntime / tick)
	k := int(s.cfg.ReclaimReports())
	period := int(s.cfg.Period / tick)
	extra := n
	for _, kind := range kinds {
		ev := event{kind: kind, at: rng.IntN(disturbUntil), broker: rng.IntN(n)}
		end := 0
		switch ev.kind {
		case crash, reboot:
			ev.dur = 5 + rng.IntN(down-4) // 0.5 s up to the downtime bound
			ev.wipeDisk = rng.IntN(2) == 0
		case partition, outage:
			ev.dur = 10 + rng.IntN(131) // 1–14 s: some outlast the lease and the reclaim
		case cutCrash:
			// Cut for longer than the reclaim; crashed for the whole
			// downtime bound from just before its lease would run out, so
			// it keeps its share the longest the bound allows.
			ev.dur = (k+4)*period + rng.IntN(20)
		case deaf:
			ev.dur = (k+3)*period + rng.IntN(100) // past the reclaim, some long after
		case replace:
			// The new host comes after the old one's reports left the log.
			ev.dur = s.retentionTicks() + period + rng.IntN(50)
			ev.host, extra = extra, extra+1
		case logEmptied:
			ev.dur = s.retentionTicks() + period + rng.IntN(30)
		case twin:
			ev.dur = 20 + rng.IntN(100)
			ev.host, extra = extra, extra+1
		}
		end = ev.at + ev.dur
		s.events = append(s.events, ev)
		s.quietFrom = max(s.quietFrom, end)
	}
	// Hosts started by events have clocks of their own.
	for len(s.rate) < extra {
		s.rate = append(s.rate, 1+(2*rng.Float64()-1)*cfg.MaxClockSkew)
		s.phase = append(s.phase, time.Duration(rng.Int64N(int64(time.Hour))))
	}
	for range extra {
		s.wallOffset = append(s.wallOffset, rng.Int64N(201)-100)
	}
	// Every seed ends with at least 30 s undisturbed, so the liveness
	// gate applies to the seeds with a mild network.
	s.ticks = max(s.ticks, s.quietFrom+300)
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
