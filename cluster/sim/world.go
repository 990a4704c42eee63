package sim

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/cluster"
)

// host is one broker host: its agent (nil while crashed), the data path that
// outlives the agent, the state file, and where it has read the log to.
// Most brokers have one host; a replace or twin event adds another host for
// the same broker.
type host struct {
	b        int // the broker's index in the configuration
	agent    *cluster.Agent
	instance uint64    // the agent process's
	applied  []float64 // what the data path enforces; nil: fresh (or gone)
	disk     *cluster.Disk
	cursor   int
	boot     uint64
	downTill int // crashed (or not yet started) until this tick; -1 when running
	cutTill  int // partitioned until this tick
	deafTill int // reads nothing until this tick (its reports still land)
	// gone: retired (replaced, or a twin's first host): never runs again.
	gone bool
	// crashAtLease: cut and crashed for the downtime bound once its lease
	// is about to run out (cutCrash).
	crashAtLease bool
	// truncated: the current agent process read a log whose start was
	// gone (retention, an emptied log). Its View lacks what fell out, so
	// it may count brokers differently from the reference (a broker it
	// never saw is outside, §3a; silence measured from later marks): its
	// rounds are checked for conservation, not compared bit for bit.
	truncated bool
	lastMode  cluster.Mode
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

// running says whether the host takes part: started, not retired.
func (h *host) running() bool { return h.agent != nil && !h.gone }

// entry is a report in the log, the tick it landed, and whether the
// simulation sent it (junk that it injected is not genuine).
type entry struct {
	report  *cluster.Report
	genuine bool
	at      int
	// base is the index of the genuine report a junk replay copies.
	base int
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
	// logStart is the first entry a reader starting now may read: the log
	// was emptied (logEmptied) before it.
	logStart int
	// starts[instance] is the tick an agent process started: of two
	// processes of one broker the later one is the newest life.
	starts map[uint64]int
	// trace, when set, is told every landing and every change of a share.
	trace func(format string, args ...any)
}

func newWorld(seed uint64) *world {
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	sc := newScenario(rng)
	w := &world{seed: seed, rng: rng, sc: sc, starts: map[uint64]int{}}
	w.net = network{rng: rng, sc: sc}
	w.truth, _ = cluster.NewView(sc.cfg)
	n := len(sc.cfg.Brokers)
	w.hosts = make([]host, n, len(sc.rate))
	for i := range w.hosts {
		w.hosts[i] = host{b: i, boot: rng.Uint64(), downTill: sc.startAt[i]}
	}
	for _, ev := range sc.events {
		if ev.kind == replace || ev.kind == twin {
			start := ev.at
			if ev.kind == replace {
				start = ev.at + ev.dur
			}
			w.hosts = append(w.hosts, host{b: ev.broker, boot: rng.Uint64(), downTill: start})
		}
	}
	for i := range w.hosts {
		w.hosts[i].local = make([]cluster.Local, len(sc.cfg.Entities))
	}
	w.check.init(w)
	return w
}

// wallMillis is host i's wall clock now in milliseconds: NTP keeps every
// host within 100 ms of real time (wallOffset).
func (w *world) wallMillis(i int) uint64 {
	return uint64(1_700_000_000_000 + int64(w.now)*int64(tick/time.Millisecond) + w.sc.wallOffset[i])
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
			v := w.appendLog(entry{report: r, genuine: true, at: w.now})
			if w.trace != nil {
				w.trace("t%d land broker %d epoch %d instance %x seq %d round %d processed %d ack %v echo %d (%v; live %v): %+v", w.now, r.Broker, r.Epoch, r.Instance, r.Seq, r.Round, r.Processed, r.Ack, r.Echo, v, w.truth.Targets().Live, r.Entities)
			}
		}
		if w.rng.Float64() < w.sc.junkProb {
			r, base := w.junk()
			w.appendLog(entry{report: r, at: w.now, base: base})
		}
		for _, i := range w.rng.Perm(len(w.hosts)) {
			w.stepHost(i)
		}
		w.check.afterTick(w)
	}
	return w.check.result(w)
}

func (w *world) appendLog(e entry) cluster.Verdict {
	w.log = append(w.log, e)
	w.check.beforeLand(w)
	v := w.truth.Ingest(e.report)
	w.check.afterLand(w, e)
	return v
}

// crash stops host i's agent until tick till; its data path keeps the
// share unless fresh (a reboot).
func (w *world) crash(i, till int, wipeDisk, fresh bool) {
	h := &w.hosts[i]
	if h.agent == nil || h.gone {
		return
	}
	h.agent = nil
	h.downTill = till
	if wipeDisk {
		h.disk = nil
	}
	if fresh {
		h.boot = w.rng.Uint64()
		h.applied = nil
	}
}

// retire takes host i away for good: no agent, no data path.
func (w *world) retire(i int) {
	h := &w.hosts[i]
	h.agent, h.applied, h.gone = nil, nil, true
}

func (w *world) applyEvents() {
	down := int(w.sc.cfg.MaxDowntime / tick)
	for _, ev := range w.sc.events {
		switch {
		case ev.at == w.now:
		case ev.kind == twin && ev.at+ev.dur == w.now:
			w.retire(ev.broker) // the first host leaves; the second carries on
			continue
		case ev.kind == logEmptied && ev.at+ev.dur-1 == w.now:
			w.logStart = len(w.log) // retention has dropped everything
			continue
		default:
			continue
		}
		switch ev.kind {
		case crash:
			w.crash(ev.broker, w.now+ev.dur, ev.wipeDisk, false)
		case reboot:
			w.crash(ev.broker, w.now+ev.dur, ev.wipeDisk, true)
		case partition:
			w.hosts[ev.broker].cutTill = w.now + ev.dur
		case outage:
			for i := range w.hosts {
				w.hosts[i].cutTill = w.now + ev.dur
			}
		case demandShift:
			w.sc.offered = drawDemand(w.rng, len(w.sc.cfg.Brokers), w.sc.cfg.Entities)
		case leaderMove:
			w.sc.led = drawLeadership(w.rng, len(w.sc.cfg.Brokers), len(w.sc.cfg.Entities))
		case cutCrash:
			w.hosts[ev.broker].cutTill = w.now + ev.dur
			w.hosts[ev.broker].crashAtLease = true
		case deaf:
			w.hosts[ev.broker].deafTill = w.now + ev.dur
		case replace:
			w.retire(ev.broker)
		case logEmptied:
			for i := range w.hosts {
				w.hosts[i].cutTill = w.now + ev.dur
			}
			// One host reboots during the outage and comes back before it
			// ends, with its state file: it writes first into the empty log.
			w.crash(ev.broker, w.now+min(ev.dur-5, 5+w.rng.IntN(down-4)), false, true)
		}
	}
	for i := range w.hosts {
		h := &w.hosts[i]
		if !h.crashAtLease || h.agent == nil || h.agent.Mode() != cluster.ModeNormal {
			continue
		}
		// Crash the tick before the lease would run out: no lease check
		// happens while it is down, so its share stands for the downtime
		// bound past the lease.
		if d := h.agent.Persist(); d.Anchored && w.localTime(i, w.now+1)-d.Anchor >= w.sc.cfg.Lease {
			h.crashAtLease = false
			w.crash(i, w.now+down, false, false)
		}
	}
}

func (w *world) stepHost(i int) {
	h := &w.hosts[i]
	if h.gone {
		return
	}
	local := w.localTime(i, w.now)
	if h.agent == nil {
		if h.downTill < 0 || w.now < h.downTill {
			return
		}
		instance := w.rng.Uint64()
		a, err := cluster.NewAgent(w.sc.cfg, cluster.Start{
			Broker: w.sc.cfg.Brokers[h.b], Instance: instance, Boot: h.boot, Disk: h.disk, Applied: h.applied,
			WallEpoch: w.wallMillis(i),
		}, local)
		if err != nil {
			panic(err)
		}
		w.starts[instance] = w.now
		h.instance = instance
		// A new process reads the log from its start as retention keeps
		// it: everything since the log was emptied, and for a host that
		// replaces another, only the retention window.
		from := w.logStart
		if i >= len(w.sc.cfg.Brokers) {
			for from < len(w.log) && w.log[from].at < w.now-w.sc.retentionTicks() {
				from++
			}
			// Retention drops whole segments: the cut never falls between
			// a replay and the report it copies.
			for k := from; k < len(w.log); k++ {
				if !w.log[k].genuine && w.log[k].base >= w.logStart {
					from = min(from, w.log[k].base)
				}
			}
		}
		h.agent, h.downTill, h.cursor = a, -1, from
		h.truncated = from > 0
		if h.learned {
			a.SetBudget(w.sc.change.entity, w.sc.change.to)
		}
		w.check.started(w, i)
	}
	if ch := w.sc.change; ch != nil && !h.learned && w.now >= ch.learnAt[h.b] {
		h.learned = true
		h.agent.SetBudget(ch.entity, ch.to)
		if w.trace != nil {
			w.trace("t%d host %d learns entity %d's budget %+v", w.now, i, ch.entity, ch.to)
		}
		w.check.learned(w, i)
	}
	cut := w.now < h.cutTill
	if !cut && w.now >= h.deafTill && w.rng.Float64() < w.sc.readProb {
		for ; h.cursor < len(w.log); h.cursor++ {
			before := h.agent.View().Targets().Round
			h.agent.Observe(w.log[h.cursor].report)
			if t := h.agent.View().Targets(); t.Round > before && !h.truncated {
				w.check.computed(w, i, t)
			}
		}
		h.agent.CaughtUp(local)
	}
	for e := range h.local {
		offered, applied := w.sc.offered[h.b][e], 0.0
		if h.applied != nil {
			applied = h.applied[e]
		}
		h.local[e] = cluster.Local{Usage: min(offered, applied), HeldBack: offered > applied, Led: w.sc.led[h.b][e]}
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
//
// It copies a report still in the log: one landed since the log was last
// emptied. A View tells a replay by the report it copies (§3), and one that
// began on the emptied log never read a report from before; a copy of one,
// with its round a million ahead, was to it the first report of a life,
// which may carry any round (§3a (c)), so it followed that round and every
// other View ignored its reports as round_jump for good (seed 811373). No
// producer lands a copy of a report after retention dropped the report
// (a duplicate lands within MaxDelivery of its send, retention keeps more
// than that); as for retention (stepHost), a replay and the report it
// copies are in the log together or not at all.
func (w *world) junk() (*cluster.Report, int) {
	var base cluster.Report
	at := len(w.log)
	for k := len(w.log) - 1; k >= w.logStart; k-- {
		if w.log[k].genuine {
			base, at = *w.log[k].report, k
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
	return &r, at
}
