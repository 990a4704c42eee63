package sim

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/cluster"
)

// host is one broker host: its agent (nil while crashed), the data path that
// outlives the agent, the state file, and where it has read the log to.
type host struct {
	agent    *cluster.Agent
	applied  []float64 // what the data path enforces
	disk     *cluster.Disk
	cursor   int
	boot     uint64
	downTill int // crashed until this tick; -1 when running
	cutTill  int // partitioned until this tick
	lastMode cluster.Mode
	// processed is the latest round any life of the host's agent adopted:
	// the data path's share is bounded by that round's target.
	processed uint64
	// streak is the first round of the agent's gap-free run of adopted
	// rounds, kept across a crash until the next life adopts one.
	streak uint64
	local  []cluster.Local
	// learned: the host has read the scenario's budget change; every life
	// of its agent is told (the agent reads the quota store as it starts).
	learned bool
}

// world is one seed's run.
type world struct {
	seed  uint64
	rng   *rand.Rand
	sc    *scenario
	net   network
	log   []entry
	hosts []host
	truth *cluster.View // reads the log as it lands: the reference View
	check checker
	now   int
	land  []*cluster.Report
	// trace, when set, is told every landing and every change of a share.
	trace func(format string, args ...any)
}

func newWorld(seed uint64) *world {
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	sc := newScenario(rng)
	w := &world{seed: seed, rng: rng, sc: sc}
	w.net = network{rng: rng, sc: sc}
	w.truth, _ = cluster.NewView(sc.cfg)
	w.hosts = make([]host, len(sc.cfg.Brokers))
	for i := range w.hosts {
		w.hosts[i] = host{boot: rng.Uint64(), downTill: sc.startAt[i], local: make([]cluster.Local, len(sc.cfg.Entities))}
	}
	w.check.init(w)
	return w
}

// localTime is host i's monotonic clock at tick t.
func (w *world) localTime(i, t int) time.Duration {
	return w.sc.phase[i] + time.Duration(float64(t)*float64(tick)*w.sc.rate[i])
}

func (w *world) run() Result {
	for w.now = 0; w.now < w.sc.ticks; w.now++ {
		w.applyEvents()
		w.land = w.net.landing(w.now, w.land[:0])
		for _, r := range w.land {
			w.appendLog(entry{report: r, genuine: true})
			if w.trace != nil {
				w.trace("t%d land broker %d epoch %d seq %d round %d processed %d ack %v: %+v", w.now, r.Broker, r.Epoch, r.Seq, r.Round, r.Processed, r.Ack, r.Entities)
			}
		}
		if w.rng.Float64() < w.sc.junkProb {
			w.appendLog(entry{report: w.junk()})
		}
		for _, i := range w.rng.Perm(len(w.hosts)) {
			w.stepHost(i)
		}
		w.check.afterTick(w)
	}
	return w.check.result(w)
}

func (w *world) appendLog(e entry) {
	w.log = append(w.log, e)
	w.check.beforeLand(w)
	w.truth.Ingest(e.report)
	w.check.afterLand(w, e)
}

func (w *world) applyEvents() {
	for _, ev := range w.sc.events {
		if ev.at != w.now {
			continue
		}
		switch ev.kind {
		case crash:
			h := &w.hosts[ev.broker]
			if h.agent != nil {
				h.agent = nil
				h.downTill = w.now + ev.dur
				if ev.wipeDisk {
					h.disk = nil
				}
			}
		case partition:
			w.hosts[ev.broker].cutTill = w.now + ev.dur
		case outage:
			for i := range w.hosts {
				w.hosts[i].cutTill = w.now + ev.dur
			}
		case demandShift:
			w.sc.offered = drawDemand(w.rng, len(w.hosts), w.sc.cfg.Entities)
		case leaderMove:
			w.sc.led = drawLeadership(w.rng, len(w.hosts), len(w.sc.cfg.Entities))
		}
	}
}

func (w *world) stepHost(i int) {
	h := &w.hosts[i]
	local := w.localTime(i, w.now)
	if h.agent == nil {
		if h.downTill < 0 || w.now < h.downTill {
			return
		}
		a, err := cluster.NewAgent(w.sc.cfg, cluster.Start{
			Broker: w.sc.cfg.Brokers[i], Instance: w.rng.Uint64(), Boot: h.boot, Disk: h.disk, Applied: h.applied,
		}, local)
		if err != nil {
			panic(err)
		}
		h.agent, h.downTill, h.cursor = a, -1, 0
		if h.learned {
			a.SetBudget(w.sc.change.entity, w.sc.change.to)
		}
		w.check.started(w, i)
	}
	if ch := w.sc.change; ch != nil && !h.learned && w.now >= ch.learnAt[i] {
		h.learned = true
		h.agent.SetBudget(ch.entity, ch.to)
		if w.trace != nil {
			w.trace("t%d host %d learns entity %d's budget %+v", w.now, i, ch.entity, ch.to)
		}
		w.check.learned(w, i)
	}
	cut := w.now < h.cutTill
	if !cut && w.rng.Float64() < w.sc.readProb {
		for ; h.cursor < len(w.log); h.cursor++ {
			before := h.agent.View().Targets().Round
			h.agent.Observe(w.log[h.cursor].report)
			if t := h.agent.View().Targets(); t.Round > before {
				w.check.computed(w, i, t)
			}
		}
		h.agent.CaughtUp(local)
	}
	for e := range h.local {
		offered, applied := w.sc.offered[i][e], 0.0
		if h.applied != nil {
			applied = h.applied[e]
		}
		h.local[e] = cluster.Local{Usage: min(offered, applied), HeldBack: offered > applied, Led: w.sc.led[i][e]}
	}
	r := h.agent.Step(local, h.local)
	if w.trace != nil && !slices.Equal(h.applied, h.agent.Applied()) {
		p, _ := h.agent.Pending()
		w.trace("t%d host %d: %v -> %v (%v, processed %d, pending round %d live %v shares %v)", w.now, i, h.applied, h.agent.Applied(), h.agent.Mode(), h.agent.Processed(), p.Round, p.Live, p.Shares)
	}
	h.applied = append(h.applied[:0], h.agent.Applied()...)
	d := h.agent.Persist()
	h.disk = &d
	if p := h.agent.Processed(); p > 0 {
		h.processed, h.streak = p, h.agent.Streak()
	}
	w.check.stepped(w, i)
	if r != nil && !cut {
		w.net.send(w.now, r)
	}
}

// junk makes a report no agent may apply: foreign, malformed, from an
// unknown broker, a round far ahead, or a replay of a landed report under
// an older epoch, an older sequence number or another process's instance.
func (w *world) junk() *cluster.Report {
	var base cluster.Report
	for k := len(w.log) - 1; k >= 0; k-- {
		if w.log[k].genuine {
			base = *w.log[k].report
			break
		}
	}
	if base.Epoch == 0 {
		base = cluster.Report{Cluster: "sim", Broker: 1, Epoch: 1, Seq: 1, Round: 1}
	}
	r := base
	r.Entities = append([]cluster.EntityReport(nil), base.Entities...)
	switch w.rng.IntN(7) {
	case 0:
		r.Cluster = "another-cluster"
	case 1:
		if len(r.Entities) > 0 {
			r.Entities[0].Usage = -1
		} else {
			r.Epoch = 0
		}
	case 2:
		r.Broker = 99
	case 3:
		r.Round += 1_000_000
	case 4:
		r.Epoch-- // a previous life; 0 is malformed
	case 5:
		r.Seq-- // a reordered or replayed report
	default:
		r.Instance++ // another process claiming the broker's epoch
	}
	for e := range r.Entities {
		r.Entities[e].Applied = 0 // would let others raise, were it accepted
	}
	return &r
}
