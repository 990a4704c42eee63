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
	BudgetChanged     bool // a budget was altered and the seed ended quiet: the rounds must split the new one
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
	// limits[e] is the limit Σ applied is held to: the entity's, or while a
	// budget change spreads, the larger of the old and the new.
	limits []float64
	// changeRound is the first reference round that split the changed
	// budget after every host learned it; once every host has lowered to
	// it or later, the new limit alone holds.
	changeRound uint64
	learnedAll  bool
	// reported[i*ne+e]: broker i's latest counted budget for entity e in
	// the reference View before the landing being checked.
	reported []cluster.Budget
}

// beforeLand notes what each broker's latest counted report says of each
// budget: a round computed on the next landing must split the smallest
// among its live brokers.
func (c *checker) beforeLand(w *world) {
	ne := len(w.sc.cfg.Entities)
	if c.reported == nil {
		c.reported = make([]cluster.Budget, len(w.hosts)*ne)
	}
	for i := range w.hosts {
		r, ok := w.truth.Latest(i)
		for e := range ne {
			c.reported[i*ne+e] = cluster.Budget{}
			if ok {
				c.reported[i*ne+e] = cluster.Budget{Limit: r.Entities[e].Limit, Reservation: r.Entities[e].Reservation}
			}
		}
	}
}

// splitsSmallest checks a new reference round: each entity's budget is the
// smallest limit and reservation its live brokers reported.
func (c *checker) splitsSmallest(w *world, t *cluster.Targets) {
	ne := len(w.sc.cfg.Entities)
	for e := range ne {
		want := cluster.Budget{Limit: math.Inf(1), Reservation: math.Inf(1)}
		for i, live := range t.Live {
			if live {
				want.Limit = min(want.Limit, c.reported[i*ne+e].Limit)
				want.Reservation = min(want.Reservation, c.reported[i*ne+e].Reservation)
			}
		}
		if t.LiveCount > 0 && t.Budgets[e] != want {
			c.fail(w, "round %d splits %+v for entity %d; its live brokers' smallest is %+v", t.Round, t.Budgets[e], e, want)
		}
	}
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
	for _, ent := range w.sc.cfg.Entities {
		c.limits = append(c.limits, ent.Limit)
	}
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
		c.splitsSmallest(w, t)
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

// learned follows the budget change: from the first host's learning it,
// the larger of the old and the new limit holds until it has spread.
func (c *checker) learned(w *world, i int) {
	ch := w.sc.change
	e := ch.entity
	c.limits[e] = max(c.limits[e], ch.to.Limit)
	all := true
	for j := range w.hosts {
		all = all && w.hosts[j].learned
	}
	c.learnedAll = all
}

// spread ends the change's transition: a reference round split the new
// budget after every host learned it, and every host has lowered to one
// common round at or after it and after the start of every host's run of
// rounds (as a fallback episode ends: a host back from a crash may hold a
// share of a round of the old budget, and until all have lowered to one
// round, hosts on different rounds may hold more than any one round's
// targets).
func (c *checker) spread(w *world, common, latest uint64) {
	ch := w.sc.change
	if ch == nil || !c.learnedAll || c.limits[ch.entity] == ch.to.Limit {
		return
	}
	if t := w.truth.Targets(); c.changeRound == 0 && t.Round > 0 && t.Budgets[ch.entity].Limit == ch.to.Limit {
		c.changeRound = t.Round
	}
	if c.changeRound != 0 && latest != 0 && common >= max(c.changeRound, latest) {
		c.limits[ch.entity] = ch.to.Limit
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
	c.spread(w, common, latest)
	for e, ent := range w.sc.cfg.Entities {
		limit := c.limits[e]
		sum, allow := 0.0, 0.0
		for i := range w.hosts {
			if w.hosts[i].applied != nil {
				sum += w.hosts[i].applied[e]
			}
			if c.episodes[i].active {
				allow += c.episodes[i].allowance[e]
			}
		}
		over := sum - limit
		c.res.MaxOvershoot = max(c.res.MaxOvershoot, over/limit)
		if over > 0 && allow > 0 {
			c.res.MaxAllowanceUse = max(c.res.MaxAllowanceUse, over/allow)
		}
		if over > allow {
			c.res.Violations++
			c.fail(w, "entity %s: Σ applied %.0f > limit %.0f + allowance %.0f", ent.ID, sum, limit, allow)
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

// budgetSpread checks, at the end of a seed quiet for its last 5 s, that
// the rounds split the altered budget every host learned.
func (c *checker) budgetSpread(w *world) {
	ch := w.sc.change
	if ch == nil || w.sc.ticks-w.sc.quietFrom < 50 {
		return
	}
	c.res.BudgetChanged = true
	if t := w.truth.Targets(); t.Budgets[ch.entity] != ch.to {
		c.fail(w, "round %d splits %+v for entity %d, 5 s after every host learned %+v", t.Round, t.Budgets[ch.entity], ch.entity, ch.to)
	}
}

func (c *checker) result(w *world) Result {
	c.budgetSpread(w)
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
	trace("scenario: %d brokers, entities %+v, fallback %v, loss %.2f dup %.2f slow %.2f read %.2f, K %d, events %+v, budget change %+v, quiet from tick %d of %d",
		len(w.hosts), w.sc.cfg.Entities, w.sc.cfg.Fallback, w.sc.loss, w.sc.dup, w.sc.slowFrac, w.sc.readProb, w.sc.cfg.ReclaimReports(), w.sc.events, w.sc.change, w.sc.quietFrom, w.sc.ticks)
	return w.run()
}
