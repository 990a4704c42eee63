package cluster

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// The four routine operations of issue #49 ("Why"), each driving real
// Agents over one log. Each failed on the code before the fix; the numbers
// it measured then are in docs/cluster-budgets.md §5a.

// host is one broker host in a fleet: its agent, where it has read the log
// to, and what it measures.
type fleetHost struct {
	a      *Agent
	cfg    Config
	id     BrokerID
	boot   uint64
	cursor int
	// deaf: its reports land but it reads nothing.
	deaf  bool
	down  bool
	local []Local
	disk  Disk
	// applied survives the agent (the data path's pinned maps).
	applied []float64
}

// fleet runs hosts over one log, every tick, in a fixed order: each reads
// everything new (unless deaf), steps, and appends its report.
type fleet struct {
	t     *testing.T
	log   []*Report
	hosts []*fleetHost
	now   time.Duration
	// cut: no report reaches the log and nobody reads (a write outage).
	cut      bool
	instance uint64
}

func newFleet(t *testing.T, cfg Config) *fleet {
	f := &fleet{t: t}
	for _, id := range cfg.Brokers {
		f.start(cfg, id, nil, []float64{cfg.Entities[0].Limit / float64(len(cfg.Brokers))})
	}
	return f
}

// start runs a new agent process for broker id (disk nil: no state file;
// applied nil: a fresh data path) reading from the start of the log.
func (f *fleet) start(cfg Config, id BrokerID, disk *Disk, applied []float64) *fleetHost {
	f.t.Helper()
	f.instance++
	var h *fleetHost
	for _, o := range f.hosts {
		if o.id == id {
			h = o
		}
	}
	if h == nil {
		h = &fleetHost{id: id, boot: uint64(id)}
		f.hosts = append(f.hosts, h)
	}
	a, err := NewAgent(cfg, Start{Broker: id, Instance: 1000*uint64(id) + f.instance, Boot: h.boot, Disk: disk, Applied: applied}, f.now)
	if err != nil {
		f.t.Fatal(err)
	}
	h.a, h.cfg, h.cursor, h.down, h.deaf = a, cfg, 0, false, false
	h.local = []Local{{Usage: 1, HeldBack: true, Led: 1}}
	h.applied = append(h.applied[:0], a.Applied()...)
	return h
}

func (f *fleet) host(id BrokerID) *fleetHost {
	for _, h := range f.hosts {
		if h.id == id {
			return h
		}
	}
	f.t.Fatalf("no host %d", id)
	return nil
}

// run steps every running host every tick for d and returns the largest
// Σ applied of entity 0 over the last `last` of it.
func (f *fleet) run(d, last time.Duration) float64 {
	peak := 0.0
	for end := f.now + d; f.now < end; f.now += tick {
		for _, h := range f.hosts {
			if h.down {
				continue
			}
			if !h.deaf && !f.cut {
				for ; h.cursor < len(f.log); h.cursor++ {
					h.a.Observe(f.log[h.cursor])
				}
				h.a.CaughtUp(f.now)
			}
			for e := range h.local {
				// Demand follows the share: a held-back client uses all of it.
				if h.local[e].HeldBack {
					h.local[e].Usage = h.a.Applied()[e]
				}
			}
			r := h.a.Step(f.now, h.local)
			h.applied = append(h.applied[:0], h.a.Applied()...)
			h.disk = h.a.Persist()
			if r != nil && !f.cut {
				f.log = append(f.log, r)
			}
		}
		if f.now >= end-last {
			peak = max(peak, f.sum())
		}
	}
	return peak
}

// sum is Σ applied of entity 0 over the hosts whose data path is up.
func (f *fleet) sum() float64 {
	s := 0.0
	for _, h := range f.hosts {
		if !h.down && h.applied != nil {
			s += h.applied[0]
		}
	}
	return s
}

func (f *fleet) shares() string {
	s := ""
	for _, h := range f.hosts {
		if !h.down {
			s += fmt.Sprintf(" %d:%.2f(%v)", h.id, h.applied[0]/mb, h.a.Mode())
		}
	}
	return s
}

// whyConfig is production's timing (K = 48) with a 30 MB/s limit.
func whyConfig(brokers ...BrokerID) Config {
	return DefaultConfig("prod", brokers, []Entity{{ID: "tenant", Limit: 30 * mb}})
}

// TestWhyReplacedAfterRetention: broker 3's host dies; 15 minutes later a
// new host takes broker id 3 with no state file and a fresh data path, and
// the log's retention has dropped every report of the old one. Before: the
// others remembered epoch 2 and ignored the new host's epoch 1 as fenced,
// forever, while it took its own share: Σ = 40 MB/s against L = 30.
func TestWhyReplacedAfterRetention(t *testing.T) {
	cfg := whyConfig(1, 2, 3)
	f := newFleet(t, cfg)
	f.run(30*time.Second, 0)
	// Broker 3's previous life already restarted once: epoch 2.
	h3 := f.host(3)
	d := h3.disk
	f.start(cfg, 3, &d, h3.applied)
	f.run(30*time.Second, 0)
	if e := h3.a.Epoch(); e != 2 {
		t.Fatalf("broker 3's second life has epoch %d, want 2", e)
	}
	h3.down = true
	f.run(15*time.Minute, 0)
	// Retention (10 min) dropped everything before the last 10 minutes.
	retained := 0
	for i, r := range f.log {
		if r.Broker == 3 {
			retained = i + 1
		}
	}
	nh := f.start(cfg, 3, nil, nil)
	nh.cursor = retained
	peak := f.run(2*time.Minute, 30*time.Second)
	t.Logf("Σ applied over the last 30 s: peak %.2f MB/s (L = 30); shares%s; verdicts at broker 1: %v", peak/mb, f.shares(), f.host(1).a.View().Counters())
	if peak > 30*mb {
		t.Errorf("Σ applied %.2f MB/s > L = 30 MB/s two minutes after the replacement", peak/mb)
	}
	if tg := f.host(1).a.View().Targets(); !tg.Live[2] {
		t.Errorf("broker 1 does not count the new broker 3 (live %v)", tg.Live)
	}
}

// TestWhyRollingBrokersChange: `brokers:` goes from [1 2 3] to [1 2 3 4],
// one host at a time, broker 4 first. Before: the old agents ignored broker
// 4 as unknown and split L between themselves while it took its own share:
// Σ = 40 MB/s for the whole roll.
func TestWhyRollingBrokersChange(t *testing.T) {
	old, next := whyConfig(1, 2, 3), whyConfig(1, 2, 3, 4)
	f := newFleet(t, old)
	f.run(30*time.Second, 0)
	f.start(next, 4, nil, nil)
	worst := 0.0
	stage := func(name string) {
		peak := f.run(60*time.Second, 20*time.Second)
		t.Logf("%s: Σ applied peak over the last 20 s %.2f MB/s; shares%s", name, peak/mb, f.shares())
		worst = max(worst, peak)
	}
	stage("broker 4 joins with the new list")
	for _, id := range []BrokerID{1, 2, 3} {
		h := f.host(id)
		d := h.disk
		f.start(next, id, &d, h.applied)
		stage(fmt.Sprintf("broker %d restarted with the new list", id))
	}
	if worst > 30*mb {
		t.Errorf("Σ applied reached %.2f MB/s > L = 30 MB/s during the roll", worst/mb)
	}
	if tg := f.host(1).a.View().Targets(); tg.LiveCount != 4 {
		t.Errorf("after the roll broker 1 counts %d live brokers, want 4", tg.LiveCount)
	}
}

// TestWhyLogEmptiedThenSplitBrain: a write outage longer than retention
// empties the log; host 1 reboots (fresh data path, state file kept) and
// writes first, with round 1; the others are more than MaxRoundJump rounds
// ahead. Before: every later report of theirs was ignored by host 1 as a
// round jump; it alone took L and the others never raised again: Σ = 50.
func TestWhyLogEmptiedThenSplitBrain(t *testing.T) {
	cfg := whyConfig(1, 2, 3)
	cfg.MaxRoundJump = 100 // the production 1000, scaled so the test is short
	f := newFleet(t, cfg)
	f.run(150*time.Second, 0)
	if r := f.host(2).a.View().MaxRound(); r <= cfg.MaxRoundJump {
		t.Fatalf("round %d, want > %d before the outage", r, cfg.MaxRoundJump)
	}
	f.cut = true
	f.run(60*time.Second, 0)
	f.log = nil // retention emptied the log
	for _, h := range f.hosts {
		h.cursor = 0
	}
	h1 := f.host(1)
	h1.boot = 99 // a reboot: new boot, the data path's maps are gone
	d := h1.disk
	f.start(cfg, 1, &d, nil)
	f.cut = false
	// Host 1 writes first: it steps before the others every tick. Its state
	// file promises the rounds it processed before the outage, so before
	// the fix it raised only once its own count passed them: 5 minutes.
	peak := f.run(5*time.Minute, 30*time.Second)
	t.Logf("Σ applied over the last 30 s: peak %.2f MB/s (L = 30); shares%s; host 1's verdicts %v", peak/mb, f.shares(), h1.a.View().Counters())
	if peak > 30*mb {
		t.Errorf("Σ applied %.2f MB/s > L = 30 MB/s five minutes after the outage", peak/mb)
	}
	for _, h := range f.hosts {
		if tg := h.a.View().Targets(); tg.LiveCount != 3 {
			t.Errorf("host %d counts %d live brokers, want 3", h.id, tg.LiveCount)
		}
	}
}

// TestWhyDeafAgent: broker 3's reports land but it reads nothing (its
// consumer is stuck). Broker 2's client leaves, so broker 1's target rises;
// before, broker 1 waited forever for broker 3 to acknowledge the round and
// stayed at its old share. The deaf broker must be reclaimed within a
// bounded time: K periods after its last report that shows it reading
// (docs/cluster-budgets.md §4), plus a few periods for the round trip.
func TestWhyDeafAgent(t *testing.T) {
	cfg := whyConfig(1, 2, 3)
	f := newFleet(t, cfg)
	f.run(30*time.Second, 0)
	f.host(3).deaf = true
	f.host(2).local[0] = Local{Led: 1} // its client left
	k := time.Duration(cfg.ReclaimReports()) * cfg.Period
	bound := k + 5*cfg.Period
	var reached time.Duration = -1
	start := f.now
	limit := float64(cfg.Entities[0].Limit)
	for f.now-start < bound+time.Minute {
		f.run(tick, 0)
		h1 := f.host(1)
		tg := h1.a.View().Targets()
		want := tg.Share(0, 0).Target
		if reached < 0 && h1.applied[0] >= 0.9*want && want > 20*mb {
			reached = f.now - start
		}
		// Conservation: the deaf host is outside once it falls back; it
		// never holds more than its fallback share L ÷ 3 then.
		if s := f.sum(); s > limit+math.Floor(limit/3) {
			t.Fatalf("at %v: Σ applied %.2f MB/s > L + L/3", f.now, s/mb)
		}
	}
	h1 := f.host(1)
	t.Logf("broker 1 at %.2f MB/s of its target %.2f; reached 90%% after %v (bound %v); shares%s", h1.applied[0]/mb, h1.a.View().Targets().Share(0, 0).Target/mb, reached, bound, f.shares())
	if reached < 0 || reached > bound {
		t.Errorf("broker 1 reached 90%% of its raised target after %v, want within %v", reached, bound)
	}
}

// TestSecondProcessTakesNoTargetUntilCounted: a second process for broker
// 1, started without a state file while the first still reports, learns its
// epoch from the topic and outranks the first; the View counts the new
// life only from its first landed report. Until then the round's target
// for broker 1 is the first process's, so the second must not take it
// (the simulation found both holding it), and after, the first is fenced.
func TestSecondProcessTakesNoTargetUntilCounted(t *testing.T) {
	cfg := whyConfig(1, 2, 3)
	f := newFleet(t, cfg)
	f.run(20*time.Second, 0)
	first := f.host(1)
	second := &fleetHost{id: 1, boot: 77}
	a, err := NewAgent(cfg, Start{Broker: 1, Instance: 4242, Boot: 77, Applied: []float64{0}}, f.now)
	if err != nil {
		t.Fatal(err)
	}
	second.a, second.cfg, second.local = a, cfg, []Local{{Usage: 1, HeldBack: true, Led: 1}}
	second.applied = append(second.applied, a.Applied()...)
	f.hosts = append(f.hosts, second)
	for range 100 {
		f.run(tick, 0)
		if _, ok := a.Pending(); ok && !a.counted() {
			t.Fatalf("at %v the second process adopted round %d while the View counts the first", f.now, a.Processed())
		}
		if s := f.sum(); s > 30*mb+math.Floor(30*mb/3) {
			t.Fatalf("at %v: Σ %.2f MB/s over L + the newcomer's fallback share (%s)", f.now, s/mb, f.shares())
		}
	}
	if first.a.Mode() != ModeFenced || !a.counted() {
		t.Fatalf("first %v, second counted %v: want the first fenced and the second counted", first.a.Mode(), a.counted())
	}
	f.run(10*time.Second, 0)
	if s := f.sum(); s > 30*mb+math.Floor(30*mb/3) {
		t.Errorf("Σ %.2f MB/s with the first fenced (%s)", s/mb, f.shares())
	}
}
