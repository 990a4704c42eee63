package agent

// Cluster budgets (docs/cluster-budgets.md): the cluster package's protocol
// core, wired to the control loop. Each cycle the agent reads the
// coordination topic every ClusterTickInterval and lets the core decide this
// host's share of each cluster budget; the control cycle enforces the share
// as the entity's local limit (its reserved part as the local reservation)
// and measures the entity for the next report. A lowered share is written
// before the report that says so is sent: a report never claims a share
// the data path does not hold.

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/limits"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/cluster"
	"github.com/sluice-dev/sluice/maps"
)

// ClusterLog is the coordination topic (cluster/kafkalog.Log).
type ClusterLog interface {
	// Publish sends a report without blocking.
	Publish(r *cluster.Report)
	// Drain delivers, in log order, the reports received since the last
	// call, and the latest time on the monotonic clock as of which every
	// report in the log has been delivered (ok false: none known yet).
	Drain(fn func(r *cluster.Report)) (caughtUpAt time.Duration, ok bool)
	Stats() ClusterLogStats
	Close()
}

// ClusterLogStats are the transport's counters.
type ClusterLogStats struct {
	Published, PublishFailed, Delivered, Undecodable, TopicErrors uint64
	// LateAcks counts reports acknowledged after max_delivery: the
	// protocol's delivery bound was broken for them (kafkalog.Stats).
	LateAcks uint64
	// Lag is how many records in the log are not delivered yet.
	Lag       int64
	CaughtUp  bool
	LastError string
}

// LeaderSource counts the partitions of topics a broker leads, from the
// cluster's metadata (false: not known yet).
type LeaderSource interface {
	Led(broker int32, topics []string) (uint32, bool)
}

// ClusterLink is what Deps.NewCluster builds: the topic and the
// leadership metadata, and how to end both.
type ClusterLink struct {
	Log     ClusterLog
	Leaders LeaderSource // nil: leadership unknown (the reservation is spread evenly)
	Stop    func()
}

// budgetRef names the local entity and direction a cluster budget governs.
type budgetRef struct {
	key entity.Key
	dir entity.Direction
}

// clusterBudgets is the agent's side of cluster budgets.
type clusterBudgets struct {
	cfg     config.Cluster
	budgets []config.ClusterBudget
	index   map[budgetRef]int
	core    *cluster.Agent
	link    ClusterLink
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
	// lastDisk: what the state file holds.
	lastDisk        cluster.Disk
	diskWritten     bool
	persistFailures uint64
	loggedFailures  uint64 // persistFailures when ClusterTick last looked
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

// clusterUsageIntervals is how many refresh intervals a budget's reported
// usage covers: short, so that a demand shift reaches the other brokers in
// a round or two, and more than one, so that Kafka's bursty responses do
// not make it jump.
const clusterUsageIntervals = 2

// startClusterBudgets links the agent to the coordination topic and starts
// the core.
func startClusterBudgets(cfg config.Config, deps Deps) (*clusterBudgets, error) {
	if deps.NewCluster == nil {
		return nil, errors.New("cluster: this agent was built without a Kafka client for the coordination topic")
	}
	link, err := deps.NewCluster(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	adopted := false
	if d, ok := deps.DataPath.(interface{ Adopted() bool }); ok {
		adopted = d.Adopted()
	}
	cb, err := newClusterBudgets(cfg, link, deps.Clock.Monotonic(), adopted)
	if cb != nil {
		cb.log = deps.Log
	}
	if err != nil {
		if link.Stop != nil {
			link.Stop()
		}
		return nil, err
	}
	return cb, nil
}

// newClusterBudgets starts the core from the state file and the data
// path's current shares.
func newClusterBudgets(cfg config.Config, link ClusterLink, now time.Duration, adopted bool) (*clusterBudgets, error) {
	cb := &clusterBudgets{cfg: cfg.Cluster, budgets: cfg.Cluster.Budgets(), index: map[budgetRef]int{}, link: link, boot: bootID(),
		ignoredLogged: map[cluster.Verdict]time.Duration{}}
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
func (cb *clusterBudgets) Share(key entity.Key, dir entity.Direction) (limits.Share, bool) {
	if !cb.enforcing() {
		return limits.Share{}, false
	}
	return cb.share(key, dir)
}

// Governs says whether a budget governs an entity in a direction
// (limits.Shares; the budgets are fixed for the agent's life).
func (cb *clusterBudgets) Governs(key entity.Key, dir entity.Direction) bool {
	_, ok := cb.budgetOf(key, dir)
	return ok
}

// budgetOf returns the budget governing an entity in a direction.
func (cb *clusterBudgets) budgetOf(key entity.Key, dir entity.Direction) (int, bool) {
	if cb == nil {
		return 0, false
	}
	i, ok := cb.index[budgetRef{key, dir}]
	return i, ok
}

// share returns the share governing an entity in a direction, if a cluster
// budget does and the cluster section enforces.
func (cb *clusterBudgets) share(key entity.Key, dir entity.Direction) (limits.Share, bool) {
	i, ok := cb.budgetOf(key, dir)
	if !ok {
		return limits.Share{}, false
	}
	s := limits.Share{Limit: cb.core.Applied()[i]}
	if t, ok := cb.core.Pending(); ok && cb.core.Mode() == cluster.ModeNormal {
		s.Reservation = min(t.Share(cb.myIndex(), i).Reserved, s.Limit)
	}
	return s, true
}

func (cb *clusterBudgets) myIndex() int {
	i, _ := cb.core.View().BrokerIndex(cluster.BrokerID(cb.cfg.BrokerID))
	return i
}

func (cb *clusterBudgets) enforcing() bool { return cb != nil && cb.cfg.Mode == config.ModeEnforce }

// clusterHeldCycles: a budget reports held back while its entity was held
// back in any of this many recent cycles and still ran at half its share or
// more in the last one. A client held at its share does not run exactly at
// it every second (bursts, TCP backing off), and one cycle reported as not
// held makes the round water-fill by its usage: the brokers that were not
// held take headroom they do not use, and the sum falls under the limit.
// A client that stopped is let go at once: its share is what others wait
// for.
const clusterHeldCycles = 3

// measure records a governed entity's usage, its rate over the last
// interval, and whether the shaper held it back this cycle.
//
// A rate that fell below half the usage, not held back, is reported as
// the usage: the client went away (it stopped, or its partition's leader
// moved), and the share it leaves is what the other brokers wait for. The
// average would keep most of it for another round.
func (cb *clusterBudgets) measure(i int, usage, lastRate float64, heldBack bool) {
	switch {
	case heldBack:
		cb.heldFor[i] = clusterHeldCycles
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

// ClusterTickInterval is how often the agent reads the coordination topic
// between control cycles. A raise waits until every live broker has
// acknowledged the round, and rounds close about once a period: reading and
// acknowledging only once a cycle, each broker would acknowledge a round
// when the next one has already closed, and only the broker whose report
// closes rounds would ever raise.
const ClusterTickInterval = 100 * time.Millisecond

// ClusterTick reads the coordination topic and runs the cluster budgets'
// core: a share lowered by a new round is written to the shaper at once
// (only down: never above what the control cycle wrote), and then the
// acknowledgement or periodic report is sent. A raise reaches the shaper at
// the next control cycle, through the allocator. Call it every
// ClusterTickInterval; it does nothing without a cluster section.
//
// It returns true when a share rose: the caller runs a control cycle at
// once, so that the raise reaches the shaper now rather than up to a
// refresh interval later (a cycle's rates use the time that passed, so an
// early one is sound).
func (a *Agent) ClusterTick() (raised bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	cb := a.cluster
	if cb == nil {
		return false
	}
	before := cb.scratch[:0]
	if cb.enforcing() {
		before = append(before, cb.core.Applied()...)
	}
	cb.scratch = before
	cb.tick(a.deps.Clock.Monotonic(), a.lowerClusterShare)
	for i, v := range before {
		raised = raised || cb.core.Applied()[i] > v
	}
	// Once when the state file starts failing, then every 60 failures
	// (not every tick while the count stands still).
	if cb.persistFailures != cb.loggedFailures && cb.persistFailures%60 == 1 {
		a.log.Error("cluster report withheld: its promises could not be kept on disk; after the lease this host takes its fallback share",
			"failures", cb.persistFailures, "err", cb.lastErr)
	}
	cb.loggedFailures = cb.persistFailures
	return raised
}

// lowerClusterShare writes a lowered share of budget i as its entity's rate
// at once, if the rate in force is above it.
func (a *Agent) lowerClusterShare(i int, share float64) error {
	b := a.cluster.budgets[i]
	key, dir := a.cluster.refs[i].key, a.cluster.refs[i].dir
	id, ok := a.registry.Lookup(key)
	if !ok {
		return nil // no entity, no rate: it gets the share when registered (applyStandby)
	}
	if !a.dirs[dir].cfg.Enabled() {
		return nil
	}
	if err := a.rates.Lower(maps.Direction(dir), uint32(id), share); err != nil {
		return fmt.Errorf("lower %s to %v: %w", b, share, err)
	}
	return nil
}

// kafkaLimits gives the budgets whose limit is Kafka's quota (a rate of
// "kafka") the quota store's last good read: the entity's exact client-id
// or user entry, +Inf when it holds none or nothing was read yet. The next
// report carries it; rounds split the smallest limit the live brokers
// report, so a host that has not read a change yet holds no one above the
// smaller of the old and the new.
//
// pullKafkaQuotas calls it when an import brings a new set, not every tick.
func (cb *clusterBudgets) kafkaLimits(q entity.KafkaQuotas) {
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

// ignoredLogEvery: a kind of ignored report is logged when first seen, then
// at most once in this long, with how many came since.
const ignoredLogEvery = time.Minute

// logIgnored says that a report was ignored and why: at warning level for
// what no healthy cluster writes (another cluster or configuration, an
// unknown broker, two agents on one broker id, a previous life, a bad
// field, a round far ahead), at debug level for redeliveries and
// reordering (the network's doing). Each kind once a minute at most.
func (cb *clusterBudgets) logIgnored(now time.Duration, verdict cluster.Verdict, r *cluster.Report) {
	if verdict == cluster.Accepted || cb.log == nil {
		return
	}
	at, seen := cb.ignoredLogged[verdict]
	if seen && now-at < ignoredLogEvery {
		return
	}
	since := cb.verdicts[verdict] - cb.ignoredCount[verdict]
	cb.ignoredLogged[verdict], cb.ignoredCount[verdict] = now, cb.verdicts[verdict]
	level := slog.LevelWarn
	if verdict == cluster.Duplicate || verdict == cluster.Stale {
		level = slog.LevelDebug
	}
	msg := "cluster report ignored, counted in sluice_cluster_reports_received_total"
	if verdict == cluster.Outside {
		// Another configuration's member (a roll of brokers: or of the
		// timing parameters): not split, but its allowance is reserved.
		msg = "cluster report from a broker outside this configuration, counted outside the budget in sluice_cluster_reports_received_total"
	}
	cb.log.Log(context.Background(), level, msg, "verdict", verdict.String(),
		"cluster", r.Cluster, "broker", r.Broker, "epoch", r.Epoch, "instance", r.Instance, "seq", r.Seq, "round", r.Round, "since_last_log", since)
}

// tick reads the topic, runs the core, writes lowered shares, then persists
// and sends the report the core asks for. A report is withheld if a lowered
// share could not be written: it would claim a share the data path does
// not hold.
func (cb *clusterBudgets) tick(now time.Duration, lower func(i int, share float64) error) {
	at, ok := cb.link.Log.Drain(func(r *cluster.Report) {
		verdict := cb.core.Observe(r)
		cb.verdicts[verdict]++
		cb.logIgnored(now, verdict, r)
	})
	if ok {
		cb.core.CaughtUp(at)
	}
	if cb.link.Leaders != nil {
		for i, b := range cb.budgets {
			if n, known := cb.link.Leaders.Led(cb.cfg.BrokerID, b.Topics); known {
				cb.locals[i].Led = n
			}
		}
	}
	r := cb.core.Step(now, cb.locals)
	cb.followHolders(now)
	written := true
	if cb.enforcing() {
		for i, share := range cb.core.Applied() {
			if err := lower(i, share); err != nil {
				written = false
				cb.lastErr = err
			}
		}
	}
	if r == nil {
		return
	}
	if !written {
		cb.withheld++
		return
	}
	disk := cb.core.Persist()
	if !cb.diskWritten || disk != cb.lastDisk || cb.core.Mode() != cb.lastMode {
		applied := append([]float64(nil), cb.core.Applied()...)
		if err := writeClusterState(cb.cfg.StateFile, clusterStateFile{Disk: disk, Applied: applied}); err != nil {
			cb.persistFailures++
			cb.withheld++
			cb.lastErr = fmt.Errorf("cluster state file: %w", err)
			return
		}
		cb.lastDisk, cb.diskWritten, cb.lastMode = disk, true, cb.core.Mode()
	}
	cb.link.Log.Publish(r)
	cb.published++
	if cb.log != nil && !r.Ack && cb.log.Enabled(context.Background(), slog.LevelDebug) {
		for i, e := range r.Entities {
			cb.log.Debug("cluster report", "budget", e.Entity, "round", r.Round, "processed", r.Processed, "usage", int64(e.Usage),
				"held_back", e.HeldBack, "applied", e.Applied, "led", e.Led, "mode", cb.core.Mode().String(), "target", cb.targetOf(i))
		}
	}
}

// followHolders records since when each budget's raise has been held up by
// other brokers.
func (cb *clusterBudgets) followHolders(now time.Duration) {
	if len(cb.heldSince) != len(cb.budgets) {
		cb.heldSince = make([]map[cluster.BrokerID]time.Duration, len(cb.budgets))
		for i := range cb.heldSince {
			cb.heldSince[i] = map[cluster.BrokerID]time.Duration{}
		}
	}
	cb.lastTick = now
	for i := range cb.budgets {
		holders := cb.core.HoldingRaise(i)
		for b := range cb.heldSince[i] {
			if !slices.Contains(holders, b) {
				delete(cb.heldSince[i], b)
			}
		}
		for _, b := range holders {
			if _, ok := cb.heldSince[i][b]; !ok {
				cb.heldSince[i][b] = now
			}
		}
	}
}

// raiseHolders are the brokers holding budget i's raise up, each with how
// long it has without a break, the longest first.
func (cb *clusterBudgets) raiseHolders(i int) []status.ClusterRaiseHolder {
	if i >= len(cb.heldSince) {
		return nil
	}
	var out []status.ClusterRaiseHolder
	for b, since := range cb.heldSince[i] {
		out = append(out, status.ClusterRaiseHolder{Broker: int32(b), Seconds: (cb.lastTick - since).Seconds()})
	}
	slices.SortFunc(out, func(x, y status.ClusterRaiseHolder) int {
		if x.Seconds != y.Seconds {
			return cmp.Compare(y.Seconds, x.Seconds)
		}
		return cmp.Compare(x.Broker, y.Broker)
	})
	return out
}

// targetOf is this host's target for budget i in the round it acts on (0
// before one).
func (cb *clusterBudgets) targetOf(i int) float64 {
	if t, ok := cb.core.Pending(); ok {
		return t.Share(cb.myIndex(), i).Target
	}
	return 0
}

func (cb *clusterBudgets) stop() {
	if cb != nil && cb.link.Stop != nil {
		cb.link.Stop()
	}
}

// clusterStateFile is the state file's content: the core's Disk, and the
// shares the data path was given (a restart on the same boot with adopted
// pins starts from them).
type clusterStateFile struct {
	Version int          `json:"version"`
	Disk    cluster.Disk `json:"disk"`
	Applied []float64    `json:"applied"`
}

// readClusterState reads the state file; a missing file is no state (nil),
// an unreadable one is an error naming it, not a silent fresh start.
func readClusterState(path string) (*clusterStateFile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster.state_file: %w", err)
	}
	var st clusterStateFile
	if err := json.Unmarshal(data, &st); err != nil || st.Version != 1 {
		return nil, fmt.Errorf("cluster.state_file %s: not a sluice cluster state (remove it to start without one: the agent then learns its epoch from the topic)", path)
	}
	return &st, nil
}

// writeClusterState replaces the state file atomically and durably: a
// promise sent must survive a crash (fsync before rename, then the
// directory).
func writeClusterState(path string, st clusterStateFile) error {
	st.Version = 1
	for i, v := range st.Applied {
		if math.IsInf(v, 1) {
			st.Applied[i] = math.MaxFloat64 // JSON has no infinity; no share reaches it
		}
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".cluster-state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// bootID identifies this boot of the host: monotonic clock readings are
// comparable only within one.
func bootID() uint64 {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return randomUint64() // no boot id: never trust an old anchor
	}
	h := fnv.New64a()
	h.Write(data)
	return h.Sum64()
}

func randomUint64() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux ≥ 3.17
	}
	return binary.LittleEndian.Uint64(b[:])
}

// view is status' picture of the cluster budgets.
func (cb *clusterBudgets) view() *status.ClusterView {
	if cb == nil {
		return nil
	}
	core := cb.core
	v := core.View()
	t := v.Targets()
	out := &status.ClusterView{
		Name: cb.cfg.Name, Broker: cb.cfg.BrokerID, Mode: string(cb.cfg.Mode), Lease: core.Mode().String(),
		Rebuilding: core.Rebuilding(), Epoch: core.Epoch(), Round: t.Round, Processed: core.Processed(),
		Published: cb.published, Withheld: cb.withheld, StateFileFailures: cb.persistFailures,
		Reports: map[string]uint64{},
	}
	for verdict := cluster.Accepted; verdict.String() != "invalid"; verdict++ {
		out.Reports[verdict.String()] = cb.verdicts[verdict]
	}
	ls := cb.link.Log.Stats()
	out.Topic = status.ClusterTopicView{Name: cb.cfg.Topic, Published: ls.Published, PublishFailed: ls.PublishFailed, Delivered: ls.Delivered,
		Undecodable: ls.Undecodable, TopicErrors: ls.TopicErrors, LateAcks: ls.LateAcks, Lag: ls.Lag, CaughtUp: ls.CaughtUp, LastError: ls.LastError}
	me := cb.myIndex()
	pending, hasPending := core.Pending()
	for i, b := range cb.budgets {
		round, own := core.RoundBudget(i), core.Budget(i)
		bv := status.ClusterBudgetView{ID: b.ID, Kind: b.Kind, Name: b.Name, Direction: directionName(b.Produce),
			Limit: status.Bps(round.Limit), Reservation: status.Bps(min(round.Reservation, round.Limit)),
			HostLimit: status.Bps(own.Limit), LimitFrom: "config", Share: status.Bps(core.Applied()[i]),
			Usage: cb.locals[i].Usage, HeldBack: cb.locals[i].HeldBack, Led: cb.locals[i].Led}
		if b.LimitFromKafka {
			bv.LimitFrom = "kafka quota store"
		}
		if hasPending {
			s := pending.Share(me, i)
			bv.Target, bv.Reserved = status.Bps(s.Target), status.Bps(s.Reserved)
		}
		bv.RaiseHeldBy = cb.raiseHolders(i)
		bv.Why = cb.why(i, hasPending)
		for bi, id := range slices.Sorted(slices.Values(cb.cfg.Brokers)) {
			r, ok := v.Latest(bi)
			bb := status.ClusterBrokerView{Broker: id, Live: t.Round > 0 && bi < len(t.Live) && t.Live[bi]}
			if ok && i < len(r.Entities) {
				e := r.Entities[i]
				bb.Reported, bb.Usage, bb.HeldBack, bb.Applied, bb.Led = true, e.Usage, e.HeldBack, status.Bps(e.Applied), e.Led
				bb.Limit = status.Bps(e.Limit)
				bb.Processed = r.Processed
				bv.SumUsage += e.Usage
			}
			bv.Brokers = append(bv.Brokers, bb)
		}
		out.Budgets = append(out.Budgets, bv)
	}
	return out
}

// why says in a sentence why this host's share is what it is.
func (cb *clusterBudgets) why(i int, hasPending bool) string {
	core := cb.core
	applied := core.Applied()[i]
	switch {
	case core.Mode() == cluster.ModeFenced:
		return "fenced: another agent reports this broker id; holding the floor share"
	case core.Mode() == cluster.ModeFallback:
		return fmt.Sprintf("fallback (%s): no report of this host landed for the lease (%v)", cb.cfg.Fallback, cb.cfg.Lease)
	case core.Rebuilding():
		return "rebuilding: reading the topic before acting on a round"
	case !hasPending:
		return "no round computed yet"
	}
	pending, _ := core.Pending()
	target := pending.Share(cb.myIndex(), i).Target
	if applied < target {
		if holders := cb.raiseHolders(i); len(holders) > 0 {
			return fmt.Sprintf("raising to round %d's target once every live broker reports it lowered: waiting for %s",
				pending.Round, holderList(holders))
		}
		return fmt.Sprintf("raising to round %d's target once every live broker reports it lowered", pending.Round)
	}
	return fmt.Sprintf("round %d's target", pending.Round)
}

// holderList says "broker 3 (41.0 s), broker 1 (0.2 s)".
func holderList(hs []status.ClusterRaiseHolder) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = "broker " + strconv.FormatInt(int64(h.Broker), 10) + " (" + strconv.FormatFloat(h.Seconds, 'f', 1, 64) + " s)"
	}
	return strings.Join(parts, ", ")
}

func directionName(produce bool) string {
	if produce {
		return "produce"
	}
	return "fetch"
}
