// Package clusterbudget is the agent's side of cluster budgets
// (docs/cluster-budgets.md): it plugs the control cycle as a source of
// limits (an entity's cluster share replaces its local limit and
// reservation), takes the usage the cycle measured, runs the protocol's
// core (cluster.Agent) on each tick of the coordination topic, lowering
// shares through the caller's writer, and publishes the status view. It
// has no access to the agent: the agent calls it.
package clusterbudget

// Cluster budgets (docs/cluster-budgets.md): the cluster package's protocol
// core, wired to the control loop. Each cycle the agent reads the
// coordination topic every ClusterTickInterval and lets the core decide this
// host's share of each cluster budget; the control cycle enforces the share
// as the entity's local limit (its reserved part as the local reservation)
// and measures the entity for the next report. A lowered share is written
// before the report that says so is sent: a report never claims a share
// the data path does not hold.

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/limits"
	"github.com/sluice-dev/sluice/cluster"
)

// budgetRef names the local entity and direction a cluster budget governs.
type budgetRef struct {
	key entity.Key
	dir entity.Direction
}

// Budgets is the agent's side of cluster budgets: a source of limits for
// the resolve stage (Share, Governs), the usage the cycle measures
// (Measure), the coordination topic's tick (Tick) and a publisher (View).
type Budgets struct {
	cfg     config.Cluster
	budgets []config.ClusterBudget
	index   map[budgetRef]int
	core    *cluster.Agent
	link    Link
	boot    uint64
	// locals: each budget's measurement in the newest cycle (usage over the
	// last few intervals, held back or not); led is refreshed each cycle.
	locals []cluster.Local
	// heldFor[i]: cycles budget i still reports held back (measure).
	heldFor []uint8
	scratch []float64
	// refs[i] is budget i's entity and direction.
	refs     []budgetRef
	verdicts cluster.Counters
	// ignoredLogged[v]: when a report of verdict v was last logged;
	// ignoredCount[v]: the count then.
	ignoredLogged map[cluster.Verdict]time.Duration
	ignoredCount  cluster.Counters
	lastErr       error
	log           *slog.Logger
	// state writes the state file; lastDisk: what it holds.
	state       stateWriter
	lastDisk    cluster.Disk
	diskWritten bool
	// anchorSlack: how far the lease anchor may run ahead of the file's
	// before a report rewrites it for the anchor alone (mustPersist).
	anchorSlack     time.Duration
	persistFailures uint64
	loggedFailures  uint64 // persistFailures when Tick last looked
	// withheld counts reports not sent because a lowered share could not
	// be written or the state file failed.
	withheld  uint64
	published uint64
	lastMode  cluster.Mode
	// heldSince[i][b]: since when broker b has held budget i's raise up
	// without a break (HoldingRaise); lastTick: the newest tick's time.
	// Status and the metrics name each broker with its own wait, so one
	// that is merely a tick late acknowledging each round is not taken for
	// the one that never does.
	heldSince []map[cluster.BrokerID]time.Duration
	lastTick  time.Duration
}

// UsageIntervals is how many refresh intervals a budget's reported
// usage covers: short, so that a demand shift reaches the other brokers in
// a round or two, and more than one, so that Kafka's bursty responses do
// not make it jump.
const UsageIntervals = 2

// New starts the cluster budgets' core from the state file and the data
// path's current shares (adopted: the data path's pins were adopted, so
// the shares it holds are the previous agent's).
func New(cfg config.Config, link Link, now time.Duration, adopted bool, log *slog.Logger) (*Budgets, error) {
	cb := &Budgets{cfg: cfg.Cluster, budgets: cfg.Cluster.Budgets(), index: map[budgetRef]int{}, link: link, boot: bootID(),
		ignoredLogged: map[cluster.Verdict]time.Duration{}, log: log, anchorSlack: cfg.RefreshInterval,
		state: stateWriter{path: cfg.Cluster.StateFile}}
	ccfg := coreConfig(cfg, cb.budgets)
	for i, b := range cb.budgets {
		kind := entity.KindClient
		if b.Kind == config.ClusterKindUser {
			kind = entity.KindUser
		}
		dir := entity.Fetch
		if b.Produce {
			dir = entity.Produce
		}
		ref := budgetRef{entity.Key{Kind: kind, Name: b.Name}, dir}
		cb.index[ref] = i
		cb.refs = append(cb.refs, ref)
	}
	cb.locals = make([]cluster.Local, len(cb.budgets))
	cb.heldFor = make([]uint8, len(cb.budgets))
	cb.heldSince = make([]map[cluster.BrokerID]time.Duration, len(cb.budgets))
	for i := range cb.heldSince {
		cb.heldSince[i] = map[cluster.BrokerID]time.Duration{}
	}
	// The wall clock makes a later process of this broker id outrank an
	// earlier one even when neither the state file nor the retained topic
	// remembers it (a host replaced after retention, issue #49).
	st := cluster.Start{Broker: cluster.BrokerID(cfg.Cluster.BrokerID), Instance: randomUint64(), Boot: cb.boot,
		WallEpoch: uint64(max(0, time.Now().UnixMilli()))}
	saved, err := readClusterState(cfg.Cluster.StateFile)
	if err != nil {
		return nil, err
	}
	if saved != nil {
		st.Disk = &saved.Disk
		// The data path's shares outlive the agent only when its pins
		// were adopted on this boot; a fresh data path starts at the
		// fallback share.
		if adopted && saved.Disk.Boot == cb.boot && len(saved.Applied) == len(cb.budgets) {
			st.Applied = saved.Applied
		}
		cb.lastDisk, cb.diskWritten = saved.Disk, true
	}
	core, err := cluster.NewAgent(ccfg, st, now)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	cb.core = core
	return cb, nil
}

// coreConfig is the cluster package's Config for this file.
func coreConfig(cfg config.Config, budgets []config.ClusterBudget) cluster.Config {
	// Sorted: the file's order must not change any agent's arithmetic.
	brokers := make([]cluster.BrokerID, len(cfg.Cluster.Brokers))
	for i, b := range slices.Sorted(slices.Values(cfg.Cluster.Brokers)) {
		brokers[i] = cluster.BrokerID(b)
	}
	entities := make([]cluster.Entity, len(budgets))
	for i, b := range budgets {
		entities[i] = cluster.Entity{ID: b.ID, Limit: b.Limit, Reservation: b.Reservation}
	}
	c := cluster.DefaultConfig(cfg.Cluster.Name, brokers, entities)
	c.Period = cfg.RefreshInterval
	c.Lease = cfg.Cluster.Lease
	c.MaxDelivery = cfg.Cluster.MaxDelivery
	c.MaxDowntime = cfg.StaleAfter
	switch cfg.Cluster.Fallback {
	case config.FallbackFloor:
		c.Fallback = cluster.FallbackFloor
	case config.FallbackFullLimit:
		c.Fallback = cluster.FallbackFullLimit
	}
	return c
}

// Share is the resolve stage's source of cluster shares
// (limits.Shares): the share that replaces an entity's local limit and
// reservation in a direction, when a cluster budget governs it and the
// cluster section enforces.
func (cb *Budgets) Share(key entity.Key, dir entity.Direction) (limits.Share, bool) {
	if !cb.Enforcing() {
		return limits.Share{}, false
	}
	return cb.share(key, dir)
}

// Governs says whether a budget governs an entity in a direction
// (limits.Shares; the budgets are fixed for the agent's life).
func (cb *Budgets) Governs(key entity.Key, dir entity.Direction) bool {
	_, ok := cb.BudgetOf(key, dir)
	return ok
}

// budgetOf returns the budget governing an entity in a direction.
func (cb *Budgets) BudgetOf(key entity.Key, dir entity.Direction) (int, bool) {
	if cb == nil {
		return 0, false
	}
	i, ok := cb.index[budgetRef{key, dir}]
	return i, ok
}

// share returns the share governing an entity in a direction, if a cluster
// budget does and the cluster section enforces.
func (cb *Budgets) share(key entity.Key, dir entity.Direction) (limits.Share, bool) {
	i, ok := cb.BudgetOf(key, dir)
	if !ok {
		return limits.Share{}, false
	}
	s := limits.Share{Limit: cb.core.Applied()[i]}
	if t, ok := cb.core.Pending(); ok && cb.core.Mode() == cluster.ModeNormal {
		s.Reservation = min(t.Share(cb.myIndex(), i).Reserved, s.Limit)
	}
	return s, true
}

func (cb *Budgets) myIndex() int {
	i, _ := cb.core.View().BrokerIndex(cluster.BrokerID(cb.cfg.BrokerID))
	return i
}

func (cb *Budgets) Enforcing() bool { return cb != nil && cb.cfg.Mode == config.ModeEnforce }

// heldCycles: a budget reports held back while its entity was held
// back in any of this many recent cycles and still ran at half its share or
// more in the last one. A client held at its share does not run exactly at
// it every second (bursts, TCP backing off), and one cycle reported as not
// held makes the round water-fill by its usage: the brokers that were not
// held take headroom they do not use, and the sum falls under the limit.
// A client that stopped is let go at once: its share is what others wait
// for.
const heldCycles = 3

// Measure records a governed entity's usage, its rate over the last
// interval, and whether the shaper held it back this cycle.
//
// A rate that fell below half the usage, not held back, is reported as
// the usage: the client went away (it stopped, or its partition's leader
// moved), and the share it leaves is what the other brokers wait for. The
// average would keep most of it for another round.
func (cb *Budgets) Measure(i int, usage, lastRate float64, heldBack bool) {
	switch {
	case heldBack:
		cb.heldFor[i] = heldCycles
	case cb.heldFor[i] > 0 && lastRate >= 0.5*cb.core.Applied()[i]:
		cb.heldFor[i]--
	default:
		cb.heldFor[i] = 0
	}
	if !heldBack && lastRate < 0.5*usage {
		usage = lastRate
	}
	cb.locals[i].Usage, cb.locals[i].HeldBack = usage, cb.heldFor[i] > 0
}

// Ref is budget i's configuration, and the local entity and direction it
// governs.
func (cb *Budgets) Ref(i int) (config.ClusterBudget, entity.Key, entity.Direction) {
	return cb.budgets[i], cb.refs[i].key, cb.refs[i].dir
}

// Local is what the newest cycle measured of budget i.
func (cb *Budgets) Local(i int) cluster.Local { return cb.locals[i] }

// Core is the protocol's agent (for tests and diagnostics).
func (cb *Budgets) Core() *cluster.Agent { return cb.core }

// KafkaLimits gives the budgets whose limit is Kafka's quota (a rate of
// "kafka") the quota store's last good read: the entity's exact client-id
// or user entry, +Inf when it holds none or nothing was read yet. The next
// report carries it; rounds split the smallest limit the live brokers
// report, so a host that has not read a change yet holds no one above the
// smaller of the old and the new.
//
// pullKafkaQuotas calls it when an import brings a new set, not every tick.
func (cb *Budgets) KafkaLimits(q entity.KafkaQuotas) {
	if cb == nil {
		return
	}
	for i, b := range cb.budgets {
		if !b.LimitFromKafka {
			continue
		}
		var quota config.Quota
		switch b.Kind {
		case config.ClusterKindClient:
			quota = q.Clients[b.Name]
		case config.ClusterKindUser:
			quota = q.Users[b.Name].Quota
		}
		rate := quota.ConsumerByteRate
		if b.Produce {
			rate = quota.ProducerByteRate
		}
		want := cluster.Budget{Limit: math.Inf(1), Reservation: b.Reservation}
		if rate != nil {
			want.Limit = *rate
		}
		if cb.core.Budget(i) != want {
			cb.core.SetBudget(i, want)
			if cb.log != nil {
				cb.log.Info("cluster budget limit read from Kafka's quota store", "budget", b.ID, "limit", want.Limit)
			}
		}
	}
}
