package sim

import (
	"fmt"
	"math"

	"github.com/sluice-dev/sluice/cluster"
)

// Result is what one seed measured.
type Result struct {
	Seed uint64
	// Violations counts steps where Σ applied exceeded limit + allowance;
	// First describes the first failure of any check.
	Violations int
	// DoubleCounts counts reports the reference View counted for a broker
	// other than its newest landed one (an older epoch's, a replay's).
	DoubleCounts int
	// Divergences counts rounds an agent computed differently from the
	// reference View: determinism broken.
	Divergences int
	First       string
	// MaxOvershoot is the largest Σ applied − limit seen, as a fraction of
	// the limit; MaxAllowanceUse is the largest (Σ applied − limit) ÷
	// allowance over steps with an allowance (≤ 1 when the bound holds).
	MaxOvershoot, MaxAllowanceUse float64
	// Converged says whether every agent came within 10 % of its target
	// after the last disturbance; ConvergenceRounds is how many rounds after
	// it they did.
	Converged         bool
	ConvergenceRounds int
	Disturbed         bool // the seed had a disturbance after start-up
	Hostile           bool // more than 5 % of reports lost
	Ticks, Reports    int
	Fallbacks         int
	Reclaims          int // rounds in which a running host was not live
	Ignored           cluster.Counters
}

// episode is a host's fallback episode as the checker sees it: from the
// moment it takes its fallback share until every host has lowered to one
// common round in which it is back. Meanwhile Σ applied may exceed the limit
// by its fallback share (docs/cluster-budgets.md, "Overshoot bounds").
type episode struct {
	active    bool
	allowance []float64
	exitSeen  bool   // the agent left fallback
	exitFrom  uint64 // its processed round when it left
	round     uint64 // the first round it adopted after leaving
}

// checker holds the per-seed checks.
type checker struct {
	res        Result
	episodes   []episode
	truthByRnd map[uint64]*cluster.Targets
	// newest[i] is the (epoch, seq) of host i's newest genuine report to
	// land, the one the reference View must count.
	newest     []struct{ epoch, seq uint64 }
	lastTruth  uint64
	disturbRnd uint64 // the reference round when the last disturbance ended
	sums       []float64
	allow      []float64
}

func (c *checker) init(w *world) {
	n, ne := len(w.hosts), len(w.sc.cfg.Entities)
	c.res.Seed = w.seed
	c.res.Ticks = w.sc.ticks
	c.episodes = make([]episode, n)
	for i := range c.episodes {
		c.episodes[i].allowance = make([]float64, ne)
	}
	c.truthByRnd = make(map[uint64]*cluster.Targets)
	c.newest = make([]struct{ epoch, seq uint64 }, n)
	c.sums = make([]float64, ne)
	c.allow = make([]float64, ne)
	c.res.Disturbed = len(w.sc.events) > 0
	c.res.Hostile = w.sc.loss > 0.05
}

func (c *checker) fail(w *world, format string, args ...any) {
	if c.res.First == "" {
		c.res.First = fmt.Sprintf("tick %d: ", w.now) + fmt.Sprintf(format, args...)
		if w.trace != nil {
			w.trace("FAIL %s", c.res.First)
			for i := range w.hosts {
				w.trace("host %d: applied %v processed %d streak %d episode %+v", i, w.hosts[i].applied, w.hosts[i].processed, w.hosts[i].streak, c.episodes[i])
			}
		}
	}
}

// afterLand cross-checks the reference View against the checker's own
// bookkeeping of which report of each broker is the newest.
func (c *checker) afterLand(w *world, e entry) {
	if t := w.truth.Targets(); t.Round > c.lastTruth {
		c.lastTruth = t.Round
		cp := &cluster.Targets{}
		cp.CopyFrom(t)
		c.truthByRnd[t.Round] = cp
		if t.LiveCount < w.runningHosts() {
			c.res.Reclaims++
		}
	}
	if !e.genuine {
		return
	}
	c.res.Reports++
	r := e.report
	i, _ := w.truth.BrokerIndex(r.Broker)
	nw := &c.newest[i]
	if r.Epoch > nw.epoch || (r.Epoch == nw.epoch && r.Seq > nw.seq) {
		nw.epoch, nw.seq = r.Epoch, r.Seq
	}
	if got, ok := w.truth.Latest(i); !ok || got.Epoch != nw.epoch || got.Seq != nw.seq {
		c.res.DoubleCounts++
		c.fail(w, "broker %d counted as epoch %d seq %d, newest landed is epoch %d seq %d", r.Broker, got.Epoch, got.Seq, nw.epoch, nw.seq)
	}
}

// computed checks that an agent computed a round exactly as the reference.
func (c *checker) computed(w *world, i int, t *cluster.Targets) {
	want, ok := c.truthByRnd[t.Round]
	if !ok || !want.Equal(t) {
		c.res.Divergences++
		c.fail(w, "host %d computed round %d unlike the reference", i, t.Round)
	}
}

// started follows a new life of host i's agent: taking a fallback share at
// start is a new fallback, whatever the previous life was doing.
func (c *checker) started(w *world, i int) {
	w.hosts[i].lastMode = cluster.ModeNormal
	c.stepped(w, i)
}

// stepped follows host i's fallback episodes.
func (c *checker) stepped(w *world, i int) {
	h := &w.hosts[i]
	ep := &c.episodes[i]
	mode := h.agent.Mode()
	if mode == cluster.ModeFallback && (!ep.active || h.lastMode != cluster.ModeFallback) {
		if !ep.active {
			clear(ep.allowance)
		}
		for e, f := range h.agent.FallbackShares() {
			ep.allowance[e] = max(ep.allowance[e], f)
		}
		ep.active, ep.exitSeen, ep.round = true, false, 0
		c.res.Fallbacks++
	}
	if ep.active && mode == cluster.ModeNormal && !ep.exitSeen {
		ep.exitSeen, ep.exitFrom = true, h.agent.Processed()
	}
	if ep.active && ep.exitSeen && ep.round == 0 && h.agent.Processed() > ep.exitFrom {
		ep.round = h.agent.Processed()
	}
	h.lastMode = mode
}

// afterTick checks conservation, ends episodes and measures convergence.
func (c *checker) afterTick(w *world) {
	// An episode ends once every host has lowered to one common round at
	// or after the host's return: before that, hosts that lowered to
	// different rounds may together hold more than any one round's targets.
	common, latest := uint64(math.MaxUint64), uint64(0)
	for j := range w.hosts {
		h := &w.hosts[j]
		common = min(common, h.processed)
		latest = max(latest, h.streak)
	}
	for i := range c.episodes {
		ep := &c.episodes[i]
		if ep.active && ep.round != 0 && latest != 0 && common >= max(ep.round, latest) {
			ep.active = false
		}
	}
	for e, ent := range w.sc.cfg.Entities {
		sum, allow := 0.0, 0.0
		for i := range w.hosts {
			if w.hosts[i].applied != nil {
				sum += w.hosts[i].applied[e]
			}
			if c.episodes[i].active {
				allow += c.episodes[i].allowance[e]
			}
		}
		over := sum - ent.Limit
		c.res.MaxOvershoot = max(c.res.MaxOvershoot, over/ent.Limit)
		if over > 0 && allow > 0 {
			c.res.MaxAllowanceUse = max(c.res.MaxAllowanceUse, over/allow)
		}
		if over > allow {
			c.res.Violations++
			c.fail(w, "entity %s: Σ applied %.0f > limit %.0f + allowance %.0f", ent.ID, sum, ent.Limit, allow)
		}
	}
	c.measureConvergence(w)
}

// measureConvergence records the rounds from the end of the last
// disturbance until every running host's share is within 10 % of its
// reference target.
func (c *checker) measureConvergence(w *world) {
	round := w.truth.MaxRound()
	if w.now < w.sc.quietFrom {
		c.disturbRnd = round
		return
	}
	if c.res.Converged || c.lastTruth <= c.disturbRnd {
		return
	}
	t := w.truth.Targets()
	for i := range w.hosts {
		h := &w.hosts[i]
		if h.agent == nil || !t.Live[i] {
			return
		}
		for e := range w.sc.cfg.Entities {
			want := t.Share(i, e).Target
			if math.Abs(h.applied[e]-want) > 0.1*want {
				return
			}
		}
	}
	c.res.Converged = true
	c.res.ConvergenceRounds = int(round - c.disturbRnd)
}

func (c *checker) result(w *world) Result {
	c.res.Ignored = w.truth.Counters()
	return c.res
}

func (w *world) runningHosts() int {
	n := 0
	for i := range w.hosts {
		if w.hosts[i].agent != nil && w.now >= w.hosts[i].cutTill {
			n++
		}
	}
	return n
}

// Run simulates one seed.
func Run(seed uint64) Result { return newWorld(seed).run() }

// Trace simulates one seed and tells trace what happens.
func Trace(seed uint64, trace func(format string, args ...any)) Result {
	w := newWorld(seed)
	w.trace = trace
	trace("scenario: %d brokers, entities %+v, fallback %v, loss %.2f dup %.2f slow %.2f read %.2f, K %d, events %+v, quiet from tick %d of %d",
		len(w.hosts), w.sc.cfg.Entities, w.sc.cfg.Fallback, w.sc.loss, w.sc.dup, w.sc.slowFrac, w.sc.readProb, w.sc.cfg.ReclaimReports(), w.sc.events, w.sc.quietFrom, w.sc.ticks)
	return w.run()
}
