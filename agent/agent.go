package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/learner"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/allocator"
	"github.com/sluice-dev/sluice/maps"
)

// Deps are the agent's edges.
type Deps struct {
	DataPath DataPath
	Shaper   shaping.Shaper
	// ShaperReason says why this shaper was chosen (logged, shown by status).
	ShaperReason string
	// IFBIndex is the htb shaper's ingress redirect target (0 otherwise);
	// EgressIFBIndex its egress tree's device when it drives several
	// interfaces (0 otherwise).
	IFBIndex, EgressIFBIndex int
	// NewShaper, when set, builds the shaper (overriding the three fields
	// above) at start and again whenever a reload changes mode, shaper or
	// max_queue_delay; the agent then owns it (CloseShaper). Without it the
	// shaper is fixed and such reloads are refused.
	NewShaper ShaperFactory
	// LogLevel, when set, follows log_level on reload.
	LogLevel *slog.LevelVar
	// NewMetadata, when set, builds the metadata client (topic IDs, and the
	// cluster's client quotas with kafka_quotas: import) at start and again
	// when a reload changes bootstrap, sasl, tls, metadata_refresh or
	// kafka_quotas. It overrides Topics. Without it those keys need a
	// restart.
	NewMetadata func(cfg config.Config) (Metadata, error)
	Topics      learner.TopicNames
	Clock       Clock
	Log         *slog.Logger
	// FailReloadStep, in tests, is asked before each step of a reload
	// (ReloadStepNames) and fails the step with the error it returns: the
	// fault injection that proves every step is undone.
	FailReloadStep func(step string) error
}

// Agent runs the control loop and the learner. Its methods are safe for
// concurrent use: the learner, the control loop, reloads and the status
// server share one lock.
type Agent struct {
	deps Deps
	log  *slog.Logger

	mu       sync.Mutex
	cfg      config.Config
	policy   *entity.Policy
	registry *entity.Registry
	// tlsPorts are the TLS listeners applyPeers last wrote: their
	// connections belong to their peers, and samples of them are ignored.
	tlsPorts map[uint16]bool
	// newPerPeer caps how fast one peer creates unconfigured entities.
	newPerPeer *entity.PeerLimiter
	// overflowLogged: when overflow was last logged, and its count then.
	overflowLogged struct {
		at    time.Time
		count uint64
	}
	learner  *learner.Learner[maps.ConnKey]
	dirs     [2]*direction
	counters [2][]maps.Counters
	store    EntityStore   // nil when the data path keeps no registry
	idents   IdentityStore // nil when the data path keeps no identities
	// bindLog: each connection's last binding by Learn (explain).
	bindLog map[maps.ConnKey]bindRecord
	primed  bool // counters read once: deltas are meaningful
	cycle   uint64
	// policyGen counts policies: parameters cached under an older one are stale.
	policyGen uint64
	lastScan  time.Time
	snapshot  *status.Snapshot // built from pub on demand, nil until asked
	pubTime   time.Time
	lastOK    time.Time

	// ReloadFailures counts refused configuration reloads.
	reloadFailures uint64
	// rateWriteFailures counts cycles whose rate writes failed (retried the
	// next cycle; no heartbeat meanwhile).
	rateWriteFailures uint64
	// brokers is the cluster's brokers (nil: no metadata client);
	// unexempt, those exempt_peers misses (checkReplication).
	brokers  BrokerSource
	unexempt []string
	// lastReload: the verdict on the last reload (nil: none yet).
	lastReload *status.ReloadResult
	// reloader runs a reload asked for on the status socket (nil: none).
	reloader func() (status.ReloadResult, error)
	// pendingForget: connections an applied reload must forget (their
	// exemption or listener changed) that the data path refused so far;
	// each cycle tries again.
	pendingForget []maps.ConnKey
	// pendingExempt: an applied exempt_peers change whose connections could
	// not be listed yet (nil: none); each cycle tries again.
	pendingExempt *exemptChange
	// cycleFailures counts cycles that returned an error.
	cycleFailures uint64
	// stopTopics ends the metadata client NewMetadata built.
	stopTopics func()
	// kafka: the cluster's client quotas and where they come from.
	kafka kafkaQuotaState
	// openMetrics (ServeMetrics) opens a metrics listener; stopMetrics
	// closes the one in use.
	openMetrics MetricsOpener
	stopMetrics func()
	// intervalChanged carries a reloaded refresh_interval to Run's ticker.
	intervalChanged chan time.Duration
	// lastRead is when counters were last read; elapsed[k] is the time
	// between the readings k+1 and k cycles ago (newest first), so rates
	// divide by the time that passed, not the nominal interval; elapsedSum[f]
	// is the sum of the newest f (a window filled f slots deep covers it).
	lastRead   time.Time
	elapsed    []float64
	elapsedSum []float64
	conns      connStats
	// cycleSeconds observes each cycle's duration, for metrics.
	observeCycle func(time.Duration)
	// ownSeries[id]: the entity has metric series of its own (assignSeries);
	// seriesStale: entities came, went or changed pinning since it ran.
	ownSeries   []bool
	seriesStale bool
}

// direction is one direction's control-loop state.
type direction struct {
	dir   entity.Direction
	cfg   config.Direction
	alloc *allocator.Allocator
	// Per entity id: the rate window (bytes per interval), the last counter
	// reading, and the rate last written to the shaper (NaN: none yet).
	window    []float64
	filled    []uint8
	lastBytes []uint64
	lastHeld  []uint64 // held-back bytes the data path counted (edt, police)
	// dropped[id] counts the packets the shaper dropped (Held.Dropped summed).
	dropped []uint64
	// others sums the entities without series of their own (assignSeries).
	others  aggregate
	applied []float64
	// guaranteed[id] is the guarantee last written with applied[id] (the
	// effective reservation; 0 for standby entities).
	guaranteed []float64
	held       map[uint32]shaping.Held
	// paramsOf[id] caches the entity's resolved parameters; paramsGen[id]
	// says for which policy (a reload resolves them again).
	paramsOf  []entity.Params
	sourcesOf []entity.Sources // where each of paramsOf's came from (explain)
	paramsGen []uint64
	// scratch, reused every cycle
	inputs  []allocator.Entity
	outputs []allocator.Allocation
	keys    []entity.Key
	params  []entity.Params
	sources []entity.Sources
	heldOf  []shaping.Held
	summary allocator.Summary
	// published copies for status, explain and metrics (built into views on demand)
	pub published
}

// published is a direction's last cycle, copied out so that views can be
// built when asked for, not every cycle.
type published struct {
	summary allocator.Summary
	cfg     config.Direction
	inputs  []allocator.Entity
	outputs []allocator.Allocation
	keys    []entity.Key
	params  []entity.Params
	sources []entity.Sources
	heldOf  []shaping.Held
	bytes   []uint64
	// Per entity (as inputs): held-back bytes the data path counted,
	// dropped packets, and whether it has metric series of its own.
	heldBytes []uint64
	dropped   []uint64
	ownSeries []bool
	others    aggregate
	unknown   struct {
		rate  float64
		bytes uint64
	}
}

// connStats counts the connection lifecycle, for status and metrics.
type connStats struct {
	// Rebound: samples whose connection entry did not hold the learner's
	// binding (evicted or re-entered by the data path), bound again at once.
	// Samples queued before a binding took effect count here too.
	Rebound uint64
	// Reaped: closed connections (FIN or RST seen) removed from the table.
	Reaped uint64
	// Rebinds: bound connections moved to another entity, by reason
	// (rebindReasons).
	Rebinds map[string]uint64
	// IdentityErrors: identities that could not be saved, read or dropped
	// (the store full, or a map error): such a connection's principal then
	// lives only in this learner.
	IdentityErrors uint64
	// Tracked: entries in the connection table at the last scan.
	Tracked int
}

// bindingsScanEvery: how often the connection table is scanned: closed
// connections are removed with their learner state, and live ones keep
// their entities from being reclaimed (at least twice per idle timeout).
// Churn of a few hundred connections a second leaves a few thousand closed
// entries between scans.
const bindingsScanEvery = 10 * time.Second

// New builds an agent for a validated configuration.
func New(cfg config.Config, deps Deps) (_ *Agent, err error) {
	if deps.Clock == nil {
		deps.Clock = SystemClock
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.NewShaper != nil {
		choice, serr := deps.NewShaper(cfg)
		if serr != nil {
			return nil, serr
		}
		deps.Shaper, deps.ShaperReason, deps.IFBIndex, deps.EgressIFBIndex = choice.Shaper, choice.Reason, choice.IFBIndex, choice.EgressIFBIndex
		defer func() { // err: New's result; an agent that fails to start leaves no tree behind
			if err != nil {
				choice.Shaper.Close()
			}
		}()
	}
	if deps.Shaper == nil {
		deps.Shaper = shaping.Shadow{}
	}
	stopTopics := func() {}
	var quotas QuotaSource
	var brokers BrokerSource
	if deps.NewMetadata != nil {
		md, merr := deps.NewMetadata(cfg)
		if merr != nil {
			return nil, fmt.Errorf("metadata client: %w", merr)
		}
		deps.Topics, stopTopics, quotas, brokers = md.Topics, md.stop(), md.Quotas, md.Brokers
		defer func() { // err: New's result
			if err != nil {
				stopTopics()
			}
		}()
	}
	policy := entity.NewPolicy(cfg.Entities)
	a := &Agent{
		kafka:           kafkaQuotaState{source: quotas},
		policyGen:       1,
		deps:            deps,
		log:             deps.Log,
		cfg:             cfg,
		policy:          policy,
		registry:        entity.NewRegistry(cfg.MaxEntities),
		newPerPeer:      entity.NewPeerLimiter(cfg.NewEntitiesPerPeer, maxLimitedPeers),
		learner:         learner.New[maps.ConnKey](policy, deps.Topics),
		stopTopics:      stopTopics,
		brokers:         brokers,
		observeCycle:    func(time.Duration) {},
		intervalChanged: make(chan time.Duration, 1),
		elapsed:         make([]float64, cfg.RateWindow),
		elapsedSum:      make([]float64, cfg.RateWindow+1),
	}
	// Read under a.mu, so a reload's listener protocols apply at once.
	a.learner.SetSASLListeners(func(c maps.ConnKey) bool {
		return a.cfg.Protocol(c.Local.Port()) == config.ProtocolSASLPlaintext
	})
	ids := a.registry.Limit()
	a.ownSeries, a.seriesStale = make([]bool, ids), true
	for _, d := range entity.Directions {
		a.counters[d] = make([]maps.Counters, ids)
		dc := directionConfig(cfg, d)
		alloc, err := allocator.New(allocatorConfig(dc))
		if err != nil && dc.Enabled() {
			return nil, fmt.Errorf("%s: %w", d, err)
		}
		if alloc == nil {
			alloc, _ = allocator.New(allocator.DefaultConfig(0))
		}
		applied := make([]float64, ids)
		for i := range applied {
			applied[i] = math.NaN()
		}
		a.dirs[d] = &direction{
			dir:        d,
			cfg:        dc,
			alloc:      alloc,
			window:     make([]float64, ids*cfg.RateWindow),
			filled:     make([]uint8, ids),
			lastBytes:  make([]uint64, ids),
			lastHeld:   make([]uint64, ids),
			dropped:    make([]uint64, ids),
			applied:    applied,
			guaranteed: make([]float64, ids),
			held:       map[uint32]shaping.Held{},
			paramsOf:   make([]entity.Params, ids),
			sourcesOf:  make([]entity.Sources, ids),
			paramsGen:  make([]uint64, ids),
		}
	}
	a.registry.SetUnconfiguredBudget(cfg.MaxUnconfiguredEntities)
	a.conns.Rebinds = make(map[string]uint64, len(RebindReasons))
	a.bindLog = map[maps.ConnKey]bindRecord{}
	if idents, ok := deps.DataPath.(IdentityStore); ok {
		a.idents = idents
		a.learner.OnLogin(a.saveIdentity)
	}
	if store, ok := deps.DataPath.(EntityStore); ok {
		a.store = store
		if err := a.restoreRegistry(); err != nil {
			return nil, err
		}
	}
	a.pinConfigured()
	if err := a.applyDataPathSettings(); err != nil {
		return nil, err
	}
	a.logWarnings(cfg)
	return a, nil
}

// logWarnings repeats check-config's warnings (valid, probably unintended
// settings) in the log at start and on each reload.
func (a *Agent) logWarnings(cfg config.Config) {
	for _, w := range cfg.Warnings() {
		a.log.Warn("configuration", "key", w.Key, "warning", w.Message)
	}
}

// maxLimitedPeers bounds the peers the new-entity limiter tracks at once.
const maxLimitedPeers = 65536

// pinConfigured registers every configured entity (at start and on each
// reload), so that no client can take a configured tenant's id, and gives
// the new ones their standby limits at once.
func (a *Agent) pinConfigured() (added []entity.ID) {
	a.seriesStale = true // pinning changes who is eligible, new or not
	now := a.deps.Clock.Now()
	added = a.registry.Pin(a.policy.ConfiguredKeys(), now)
	for _, id := range added {
		key, _ := a.registry.Key(id)
		a.registered(uint32(id), key)
	}
	return added
}

// unregister undoes registered for entities a refused reload pinned: their
// standby classes and persisted names go (the registry is restored apart).
func (a *Agent) unregister(ids []entity.ID) error {
	var errs []error
	for _, id := range ids {
		for _, dc := range a.dirs {
			if math.IsNaN(dc.applied[id]) {
				continue
			}
			if err := a.deps.Shaper.Remove(maps.Direction(dc.dir), uint32(id)); err != nil {
				errs = append(errs, fmt.Errorf("remove the %s class of entity %d: %w", dc.dir, id, err))
				continue
			}
			dc.applied[id], dc.guaranteed[id] = math.NaN(), 0
		}
		if a.store != nil {
			if err := a.store.DeleteEntity(uint32(id)); err != nil {
				errs = append(errs, fmt.Errorf("forget entity %d: %w", id, err))
			}
		}
	}
	a.seriesStale = true
	return errors.Join(errs...)
}

// registered gives a new entity its standby limit and persists it.
func (a *Agent) registered(id uint32, key entity.Key) {
	a.seriesStale = true
	a.applyStandby(id, key)
	if a.store != nil {
		if _, err := a.store.SaveEntity(id, uint8(key.Kind), key.Name); err != nil {
			a.log.Warn("persist entity", "entity", key.String(), "err", err)
		}
	}
}

// restoreRegistry rebuilds the registry an earlier agent saved.
func (a *Agent) restoreRegistry() error {
	saved := map[entity.ID]entity.Key{}
	err := a.store.EachEntity(func(id uint32, kind uint8, name string) {
		saved[entity.ID(id)] = entity.Key{Kind: entity.Kind(kind), Name: name}
	})
	if err != nil {
		return err
	}
	if len(saved) == 0 {
		return nil
	}
	skipped := a.registry.Restore(saved, a.deps.Clock.Now())
	for _, id := range skipped {
		a.store.DeleteEntity(uint32(id))
	}
	a.log.Info("restored entity registry from pinned state", "entities", a.registry.Len(), "skipped", len(skipped))
	return nil
}

func directionConfig(cfg config.Config, d entity.Direction) config.Direction {
	if d == entity.Produce {
		return cfg.Produce
	}
	return cfg.Fetch
}

func allocatorConfig(d config.Direction) allocator.Config {
	c := d.Config
	c.Capacity = math.Max(c.Capacity, 0) // Disabled
	return c
}

// applyDataPathSettings writes listeners, exempt peers and live settings.
func (a *Agent) applyDataPathSettings() error {
	dp := a.deps.DataPath
	if err := dp.SetListeners(a.cfg.Listeners); err != nil {
		return err
	}
	if err := dp.SetExempt(a.cfg.ExemptPeers); err != nil {
		return err
	}
	forget, err := a.applyPeers(a.cfg, a.policy)
	if err != nil {
		return err
	}
	if err := dp.ForgetConns(forget); err != nil {
		return fmt.Errorf("peer entities: %w", err)
	}
	if err := a.writeSettings(a.cfg, a.dataPathMode(a.cfg), a.deps.IFBIndex, a.deps.EgressIFBIndex); err != nil {
		return err
	}
	return a.applyCapacities(a.deps.Shaper, a.dirConfigs())
}

// dataPathMode is what the data path does under cfg with the shaper in use.
func (a *Agent) dataPathMode(cfg config.Config) maps.Shaper {
	if cfg.Mode == config.ModeEnforce {
		return dataPathShaper[a.deps.Shaper.Kind()]
	}
	return maps.ShaperNone
}

// dirConfigs are both directions' configurations in force.
func (a *Agent) dirConfigs() [2]config.Direction {
	return [2]config.Direction{a.dirs[0].cfg, a.dirs[1].cfg}
}

// applyCapacities caps each direction's governed traffic at its capacity
// in the shaper's hierarchy (htb): Σ effective reservations ≤ C and the
// unknown entity's guarantee H make up at most the capacity, so every
// guarantee can be kept while the rest is lent out up to the ceilings.
func (a *Agent) applyCapacities(s shaping.Shaper, cfgs [2]config.Direction) error {
	for _, dc := range a.dirs {
		capacity := math.Inf(1)
		if cfg := cfgs[dc.dir]; cfg.Enabled() {
			capacity = cfg.Capacity
		}
		if err := s.SetCapacity(maps.Direction(dc.dir), capacity); err != nil {
			return fmt.Errorf("%s capacity: %w", dc.dir, err)
		}
	}
	return nil
}

func (a *Agent) writeSettings(cfg config.Config, mode maps.Shaper, ifb, egressIFB int) error {
	return a.deps.DataPath.SetSettings(maps.Settings{
		Shaper: mode, IFBIndex: ifb, EgressIFBIndex: egressIFB, StaleAfter: cfg.StaleAfter, SamplesPerSecond: cfg.SamplesPerSecond,
		Horizon: cfg.MaxQueueDelay, ECNThreshold: shaping.ECNThreshold(cfg.MaxQueueDelay), PoliceBurst: shaping.DefaultPoliceBurst,
	})
}

// applyPeers writes the TLS listeners' peer table (each TLS listener's
// own entry, then every configured prefix under it) and rebinds the
// listeners' open connections to what the table now says, so that a
// changed table, or one written after connections started, reaches them.
// It returns the connections of ports no longer TLS, which the caller
// forgets: the data path enters them again with request tracking.
func (a *Agent) applyPeers(cfg config.Config, policy *entity.Policy) (forget []maps.ConnKey, err error) {
	tls := cfg.TLSListeners()
	rules := policy.Peers()
	entries := make([]maps.PeerEntity, 0, len(tls)*(len(rules)+1))
	for _, port := range tls {
		id := a.configuredID(entity.ListenerKey(port))
		entries = append(entries, maps.PeerEntity{Port: port, Produce: id, Fetch: id})
		for _, r := range rules {
			id := a.configuredID(r.Key)
			entries = append(entries, maps.PeerEntity{Port: port, Prefix: r.Prefix, Produce: id, Fetch: id})
		}
	}
	if err := a.deps.DataPath.SetPeerEntities(entries); err != nil {
		return nil, fmt.Errorf("peer entities: %w", err)
	}
	if len(tls) == 0 && len(a.tlsPorts) == 0 {
		return nil, nil
	}
	wasTLS := a.tlsPorts
	a.tlsPorts = map[uint16]bool{}
	for _, port := range tls {
		a.tlsPorts[port] = true
	}
	var rebind []maps.Binding
	err = a.deps.DataPath.EachBinding(func(b maps.Binding) {
		port := b.Conn.Local.Port()
		if b.Closing || (b.Produce == maps.NotGoverned && b.Fetch == maps.NotGoverned) {
			return
		}
		if !a.tlsPorts[port] {
			if wasTLS[port] {
				// No longer TLS: the entry was decided by its peer and tracks
				// no requests. Forgotten, the broker's next segment enters it
				// again with request tracking, and the learner decides it.
				forget = append(forget, b.Conn)
			}
			return
		}
		id := a.configuredID(policy.ByPeer(port, b.Conn.Peer.Addr()))
		if b.Produce != id || b.Fetch != id {
			rebind = append(rebind, maps.Binding{Conn: b.Conn, Produce: id, Fetch: id})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("peer entities: %w", err)
	}
	return forget, a.deps.DataPath.BindConns(rebind)
}

// configuredID is a configured (pinned) entity's id; the unknown entity's
// if the registry had no room for it (pinning counted it as overflowed).
func (a *Agent) configuredID(key entity.Key) uint32 {
	if id, ok := a.registry.Lookup(key); ok {
		return uint32(id)
	}
	return maps.EntityUnknown
}

// dataPathShaper is what the data path does for each backend.
var dataPathShaper = map[string]maps.Shaper{"htb": maps.ShaperHTB, "edt": maps.ShaperEDT, "police": maps.ShaperPolice}

// Learn takes one request sample: the learner resolves the connection's
// entities, new entities get their standby limit at once, and the data path
// binds the connection. A sample that cannot be parsed changes nothing.
func (a *Agent) Learn(s maps.Sample) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tlsPorts[s.Conn.Local.Port()] {
		// Encrypted bytes (a connection the data path tracked before its
		// listener's peer table was written): its peer decides, not this.
		return nil
	}
	adopted := false
	if !a.learner.Known(s.Conn, s.Born) {
		adopted = a.adopt(s)
	}
	decision, changed, err := a.learner.LearnSample(s.Conn, s.Born, learner.Sample{Data: s.Data, Whole: s.Complete, ClientIDCut: s.ClientIDCut})
	if err != nil {
		return err
	}
	now := a.deps.Clock.Now()
	var ids [2]uint32
	for _, d := range entity.Directions {
		t, decided := decision.Target(d)
		switch {
		case !decided && s.Bound[d] != maps.NotGoverned:
			// Not known yet: "I do not know" never moves a connection.
			ids[d] = s.Bound[d]
		case !decided:
			ids[d] = maps.EntityUnknown
		case d == entity.Fetch && decision.Decided[entity.Produce] && t == decision.Produce:
			ids[d] = ids[entity.Produce] // one entity both ways: resolved once
		default:
			ids[d] = a.entityID(t.Key, s.Conn.Peer.Addr(), now)
		}
	}
	if ids == s.Bound {
		if adopted {
			a.noteBinding(s.Conn, "adopted", -1)
		}
		return nil
	}
	if !changed {
		// The entry lost its binding (evicted, or entered again after a
		// reset): bind it again now, not when the decision next changes.
		a.conns.Rebound++
	}
	reason := rebindReason(s.Bound, ids, changed, a.learner.Cause())
	if reason != "" {
		a.conns.Rebinds[reason]++
		a.log.Debug("connection rebound", "conn", s.Conn.String(), "reason", reason,
			"from", fmt.Sprint(s.Bound), "to", fmt.Sprint(ids))
	}
	if err := a.deps.DataPath.BindConns([]maps.Binding{{Conn: s.Conn, Produce: ids[entity.Produce], Fetch: ids[entity.Fetch]}}); err != nil {
		return err
	}
	a.noteBinding(s.Conn, bindReason(reason, a.learner.Cause(), adopted), a.learner.LastAPI())
	return nil
}

// RebindReasons are the values of sluice_rebinds_total's reason label.
var RebindReasons = []string{"request", "login", "rule_change", "binding_lost", "to_unknown"}

// rebindReason says why a bound connection moves from bound to ids ("" when
// it was not bound to an entity yet: a first binding is no rebind). A move
// to the unknown entity of a connection that had one is its own reason:
// it means an identity was lost, which nothing should cause.
func rebindReason(bound, ids [2]uint32, changed bool, cause learner.Cause) string {
	wasBound := false
	for d := range bound {
		if bound[d] != maps.EntityUnknown && bound[d] != maps.NotGoverned {
			wasBound = true
		}
	}
	switch {
	case !wasBound:
		return ""
	case (ids[0] == maps.EntityUnknown && bound[0] != maps.EntityUnknown) ||
		(ids[1] == maps.EntityUnknown && bound[1] != maps.EntityUnknown):
		return "to_unknown"
	case !changed:
		return "binding_lost"
	case cause == learner.CauseLogin:
		return "login"
	case cause == learner.CauseRuleChange:
		return "rule_change"
	}
	return "request"
}

// adopt rebuilds the learner's state of a connection it does not follow
// (the agent restarted, or the learner freed the state, or the data path
// entered the connection again): the identity saved beside its binding,
// and the binding itself as the decision, so that a request that decides
// nothing leaves the connection where it is. A connection the data path
// saw open anew (SYN-ACK) has neither: its entry and its identity went
// with the old connection.
func (a *Agent) adopt(s maps.Sample) bool {
	var id learner.Identity
	if a.idents != nil {
		saved, ok, err := a.idents.Identity(s.Conn)
		if err != nil {
			a.conns.IdentityErrors++
			a.log.Warn("read connection identity", "conn", s.Conn.String(), "err", err)
		} else if ok {
			id = learner.Identity{Mechanism: saved.Mechanism, User: saved.User}
		}
	}
	var bound learner.Decision
	for _, d := range entity.Directions {
		if key, ok := a.boundKey(s.Bound[d]); ok {
			t := learner.Target{Key: key}
			if d == entity.Produce {
				bound.Produce = t
			} else {
				bound.Fetch = t
			}
			bound.Decided[d] = true
		}
	}
	if id == (learner.Identity{}) && bound.Decided == [2]bool{} {
		return false // nothing outlived the learner's state: learn from scratch
	}
	a.learner.Adopt(s.Conn, s.Born, id, bound)
	return true
}

// boundKey is the entity a connection is bound to, if it is a registered
// one (not unknown, overflow or not governed: those decide nothing).
func (a *Agent) boundKey(id uint32) (entity.Key, bool) {
	if id == maps.EntityUnknown || id == maps.NotGoverned || id == uint32(entity.OverflowID) {
		return entity.Key{}, false
	}
	return a.registry.Key(entity.ID(id))
}

// saveIdentity persists a principal a connection proved (the learner's
// OnLogin, under a.mu).
func (a *Agent) saveIdentity(c maps.ConnKey, id learner.Identity) {
	if err := a.idents.SaveIdentity(c, maps.Identity{Mechanism: id.Mechanism, User: id.User}); err != nil {
		a.conns.IdentityErrors++
		a.log.Warn("save connection identity", "conn", c.String(), "err", err)
	}
}

// entityID returns a decided entity's id: a known one's, or a new one's
// while the registry's budget and the peer's new_entities_per_peer allow,
// else the overflow entity's (a later request tries again).
func (a *Agent) entityID(key entity.Key, peer netip.Addr, now time.Time) uint32 {
	if id, known := a.registry.Lookup(key); known {
		a.registry.Touch(id, now)
		return uint32(id)
	}
	// A new entity nobody configured (configured ones are pinned).
	if key.Kind != entity.KindUnresolved && !a.newPerPeer.Allow(peer, now) {
		return uint32(entity.OverflowID)
	}
	id := a.registry.Acquire(key, now)
	if id != entity.OverflowID {
		a.registered(uint32(id), key)
	}
	return uint32(id)
}

// applyStandby holds a new entity to its standby limit until the loop
// knows it: min(L, max(res, H, min_limit)).
func (a *Agent) applyStandby(id uint32, key entity.Key) {
	for _, dc := range a.dirs {
		if !dc.cfg.Enabled() {
			continue
		}
		p := a.policy.Params(key, dc.dir)
		limit := dc.alloc.Config().StandbyLimit(p.Reservation, p.Limit)
		// Nothing guaranteed until the loop knows it: HTB lends it what the
		// guarantees leave, up to the limit.
		if err := a.deps.Shaper.SetRates(maps.Direction(dc.dir), []shaping.Rate{{Entity: id, BytesPerSecond: limit}}); err != nil {
			a.log.Warn("set standby limit", "entity", key.String(), "direction", dc.dir.String(), "err", err)
			continue
		}
		dc.applied[id], dc.guaranteed[id] = limit, 0
	}
}

// Cycle runs one control-loop cycle: read counters, allocate each
// direction, write changed rates, heartbeat, reclaim idle entities.
func (a *Agent) Cycle() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.runCycle()
	if err != nil {
		a.cycleFailures++
	}
	return err
}

func (a *Agent) runCycle() error {
	start := a.deps.Clock.Now()
	a.cycle++
	a.forgetPending()
	a.pullKafkaQuotas()
	a.checkReplication()
	if err := a.deps.DataPath.ReadCounters(&a.counters); err != nil {
		return fmt.Errorf("read counters: %w", err)
	}
	// The time this cycle's deltas cover: a late tick (a busy host, a
	// paused VM) must not read as a burst of traffic.
	since := a.cfg.RefreshInterval.Seconds()
	if !a.lastRead.IsZero() {
		if d := start.Sub(a.lastRead).Seconds(); d > 0 {
			since = d
		}
	}
	a.lastRead = start
	copy(a.elapsed[1:], a.elapsed[:len(a.elapsed)-1])
	a.elapsed[0] = since
	for f, e := range a.elapsed {
		a.elapsedSum[f+1] = a.elapsedSum[f] + e
	}
	if !a.primed {
		// Counters may hold history (pinned maps from an earlier agent):
		// the first reading is the baseline, not one interval's use.
		for _, dc := range a.dirs {
			for i, c := range a.counters[dc.dir] {
				dc.lastBytes[i], dc.lastHeld[i] = c.Bytes, c.HeldBytes
			}
		}
		a.primed = true
	}
	a.assignSeries()
	var errs []error
	for _, dc := range a.dirs {
		if err := a.cycleDirection(dc); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dc.dir, err))
		}
	}
	// The heartbeat says "the data path holds the rates this loop decided":
	// after a failed cycle it is not written, so an agent that cannot write
	// its rates lets the data path fail open after stale_after instead of
	// enforcing stale rates for ever.
	if len(errs) == 0 {
		if err := a.deps.DataPath.Heartbeat(a.deps.Clock.Monotonic()); err != nil {
			errs = append(errs, fmt.Errorf("heartbeat: %w", err))
		}
	}
	if err := a.reclaim(start); err != nil {
		errs = append(errs, err)
	}
	a.logOverflow(start)
	a.publish(start)
	elapsed := a.deps.Clock.Now().Sub(start)
	a.observeCycle(elapsed)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	a.lastOK = a.deps.Clock.Now()
	return nil
}

func (a *Agent) cycleDirection(dc *direction) error {
	if !dc.cfg.Enabled() {
		return nil
	}
	dir := maps.Direction(dc.dir)
	held, err := a.deps.Shaper.Held(dir)
	if err != nil {
		return err
	}
	clear(dc.held)
	for _, h := range held {
		dc.held[h.Entity] = h
	}
	counters := a.counters[dc.dir]
	w := a.cfg.RateWindow
	interval := a.elapsed[0]
	dc.inputs, dc.keys, dc.params, dc.sources, dc.heldOf = dc.inputs[:0], dc.keys[:0], dc.params[:0], dc.sources[:0], dc.heldOf[:0]
	now := a.deps.Clock.Now()
	dc.others.entities, dc.others.rate = 0, 0
	a.registry.Each(func(id entity.ID, key entity.Key) {
		i := int(id)
		cur := counters[i].Bytes
		delta := cur - dc.lastBytes[i]
		if cur < dc.lastBytes[i] {
			delta = cur // counters were reset
		}
		dc.lastBytes[i] = cur
		slot := dc.window[i*w : (i+1)*w]
		copy(slot[1:], slot[:w-1])
		slot[0] = float64(delta)
		if int(dc.filled[i]) < w {
			dc.filled[i]++
		}
		usage := a.windowRate(slot, int(dc.filled[i]))
		if delta > 0 {
			a.registry.Touch(id, now)
		}
		if id == entity.UnknownID {
			return // held to H, outside the allocation
		}
		if dc.paramsGen[i] != a.policyGen {
			dc.paramsOf[i], dc.sourcesOf[i] = a.policy.Explain(key, dc.dir)
			dc.paramsGen[i] = a.policyGen
		}
		p := dc.paramsOf[i]
		h := dc.held[uint32(id)]
		dc.dropped[i] += h.Dropped
		// BPF shapers count what they hold back in the entity's counters.
		heldDelta := uint64(0)
		if held := counters[i].HeldBytes; held != dc.lastHeld[i] {
			h.Throttled = true
			if held > dc.lastHeld[i] {
				heldDelta = held - dc.lastHeld[i]
			}
			dc.lastHeld[i] = held
		}
		if !a.ownSeries[i] {
			dc.others.entities++
			dc.others.rate += usage
			dc.others.bytes += delta
			dc.others.heldBytes += heldDelta
			dc.others.droppedPackets += h.Dropped
		}
		h.Throttled = h.Throttled && ranAtLimit(float64(delta)/interval, dc.applied[i])
		dc.inputs = append(dc.inputs, allocator.Entity{
			Slot: uint32(id), Reservation: p.Reservation, Weight: p.Weight, Limit: p.Limit,
			Usage: usage, Throttled: h.Throttled,
		})
		dc.keys = append(dc.keys, key)
		dc.params = append(dc.params, p)
		dc.sources = append(dc.sources, dc.sourcesOf[i])
		dc.heldOf = append(dc.heldOf, h)
	})
	if cap(dc.outputs) < len(dc.inputs) {
		dc.outputs = make([]allocator.Allocation, len(dc.inputs), 2*len(dc.inputs))
	}
	dc.outputs = dc.outputs[:len(dc.inputs)]
	before := dc.summary.Overcommit
	summary, err := dc.alloc.Cycle(dc.inputs, dc.outputs)
	if err != nil {
		return err
	}
	dc.summary = summary
	if summary.OvercommitChanged {
		if summary.Overcommit {
			a.log.Info("overcommit entered: reservations exceed the distributable capacity",
				"direction", dc.dir.String(), "scale", summary.Scale, "entities", summary.Active, "promised_ratio", summary.PromisedRatio)
		} else if before {
			a.log.Info("overcommit left", "direction", dc.dir.String(), "entities", summary.Active, "promised_ratio", summary.PromisedRatio)
		}
	}
	// Apply: changed rates and guarantees only, in one batch. The unknown
	// entity is held to the headroom H (or the floor if that is higher) and
	// guaranteed H: the capacity's share no reservation is taken from.
	var changes []shaping.Rate
	moved := func(old, now float64) bool {
		return math.IsNaN(old) || math.Abs(now-old) > a.cfg.UpdateThreshold*old || math.IsInf(now, 1) != math.IsInf(old, 1)
	}
	consider := func(id uint32, rate, guaranteed float64) {
		if moved(dc.applied[id], rate) || moved(dc.guaranteed[id], guaranteed) {
			changes = append(changes, shaping.Rate{Entity: id, BytesPerSecond: rate, Guaranteed: guaranteed})
			dc.applied[id], dc.guaranteed[id] = rate, guaranteed
		}
	}
	consider(uint32(entity.UnknownID), dc.alloc.Config().UnknownLimit(), dc.alloc.Config().Headroom())
	for i, in := range dc.inputs {
		consider(in.Slot, dc.outputs[i].DynamicLimit, dc.outputs[i].EffectiveReservation)
	}
	if len(changes) > 0 {
		if err := a.deps.Shaper.SetRates(dir, changes); err != nil {
			// Not written: try every one of them again next cycle.
			for _, c := range changes {
				dc.applied[c.Entity] = math.NaN()
			}
			a.rateWriteFailures++
			return fmt.Errorf("write rates: %w", err)
		}
	}
	a.log.Debug("cycle", "direction", dc.dir.String(), "cycle", a.cycle, "active", summary.Active, "standby", summary.Standby,
		"promised_ratio", summary.PromisedRatio, "green_ratio", summary.GreenRatio, "rate_updates", len(changes))
	return nil
}

// windowRate is an entity's rate over the newest filled slots of its
// window: their bytes over the time they covered.
func (a *Agent) windowRate(slot []float64, filled int) float64 {
	if filled == 0 {
		return 0
	}
	var sum float64
	for _, v := range slot[:filled] {
		sum += v
	}
	return sum / a.elapsedSum[filled]
}

// atLimitFraction: an entity the shaper held back counts as throttled only
// if its last interval ran at this fraction of its rate or more. Kafka
// responses come in bursts far larger than a shaper's bucket, so a shaper
// briefly queues bursts of entities well under their rate; calling those
// throttled would make them claim bandwidth they do not want (as Kafka
// itself only throttles when the windowed rate exceeds the quota).
const atLimitFraction = 0.9

func ranAtLimit(lastRate, applied float64) bool {
	return math.IsNaN(applied) || lastRate >= atLimitFraction*applied
}

// logOverflow says, at most once a minute, that new entities went to the
// overflow entity (registry or unconfigured budget full, or a peer over
// new_entities_per_peer).
func (a *Agent) logOverflow(now time.Time) {
	count := a.registry.Overflowed + a.newPerPeer.Refused
	if count == a.overflowLogged.count || now.Sub(a.overflowLogged.at) < time.Minute {
		return
	}
	a.log.Warn("new entities share the overflow entity", "since_last_log", count-a.overflowLogged.count,
		"unconfigured", a.registry.Unconfigured(), "max_unconfigured_entities", a.cfg.MaxUnconfiguredEntities,
		"refused_by_peer_rate", a.newPerPeer.Refused)
	a.overflowLogged.at, a.overflowLogged.count = now, count
}

// scanConnections walks the connection table: live connections keep their
// entities from being reclaimed; closed ones (FIN or RST seen) leave the
// table; learner state of every connection no longer live is freed.
func (a *Agent) scanConnections(now time.Time) error {
	live := make(map[maps.ConnKey]struct{}, a.learner.Connections())
	var closed []maps.ConnKey
	tracked := 0
	err := a.deps.DataPath.EachBinding(func(b maps.Binding) {
		tracked++
		if b.Closing {
			closed = append(closed, b.Conn)
			return
		}
		live[b.Conn] = struct{}{}
		for _, id := range []uint32{b.Produce, b.Fetch} {
			if id != maps.NotGoverned {
				a.registry.Touch(entity.ID(id), now)
			}
		}
	})
	if err != nil {
		return fmt.Errorf("scan connections: %w", err)
	}
	if err := a.deps.DataPath.ForgetConns(closed); err != nil {
		return fmt.Errorf("remove closed connections: %w", err)
	}
	if a.idents != nil {
		if err := a.idents.ForgetIdentities(closed); err != nil {
			a.conns.IdentityErrors++
			a.log.Warn("forget identities of closed connections", "err", err)
		}
	}
	a.conns.Reaped += uint64(len(closed))
	a.conns.Tracked = tracked - len(closed)
	a.learner.Retain(func(c maps.ConnKey) bool { _, ok := live[c]; return ok })
	for c := range a.bindLog {
		if _, ok := live[c]; !ok {
			delete(a.bindLog, c)
		}
	}
	a.newPerPeer.Prune(now)
	return nil
}

// reclaim takes idle entities out: live connections keep theirs (a scan
// of the connection table now and then), the rest idle for
// entity_idle_timeout are removed from the shaper, their counters and
// allocator memory cleared, and only then their ids released for reuse.
// An id whose cleanup fails stays taken out (the registry never hands it
// or any id past its arrays out again) and is retried next cycle: a shaper
// that keeps failing costs ids, never the agent.
func (a *Agent) reclaim(now time.Time) error {
	if now.Sub(a.lastScan) >= min(bindingsScanEvery, a.cfg.EntityIdleTimeout/2) {
		a.lastScan = now
		if err := a.scanConnections(now); err != nil {
			return err
		}
	}
	a.registry.Reclaim(now, a.cfg.EntityIdleTimeout)
	ids := a.registry.Reclaiming()
	if len(ids) == 0 {
		return nil
	}
	var errs []error
	cleared := make([]uint32, 0, len(ids))
	for _, id := range ids {
		if err := a.clearEntity(uint32(id)); err != nil {
			errs = append(errs, fmt.Errorf("reclaim entity %d: %w", id, err))
			continue
		}
		cleared = append(cleared, uint32(id))
	}
	if len(cleared) > 0 {
		if err := a.deps.DataPath.ResetCounters(cleared); err != nil {
			return errors.Join(append(errs, fmt.Errorf("reclaim: %w", err))...)
		}
	}
	released := make([]entity.ID, 0, len(cleared))
	for _, id := range cleared {
		if a.store != nil {
			if err := a.store.DeleteEntity(id); err != nil {
				errs = append(errs, fmt.Errorf("reclaim entity %d: %w", id, err))
				continue
			}
		}
		released = append(released, entity.ID(id))
	}
	a.registry.Release(released)
	a.seriesStale = true
	a.log.Debug("reclaimed idle entities", "count", len(released), "retrying", len(ids)-len(released))
	return errors.Join(errs...)
}

// clearEntity removes an entity taken out of the registry from the shaper
// and forgets what the agent kept for it.
func (a *Agent) clearEntity(id uint32) error {
	for _, dc := range a.dirs {
		if err := a.deps.Shaper.Remove(maps.Direction(dc.dir), id); err != nil {
			return err
		}
	}
	for _, dc := range a.dirs {
		dc.alloc.Forget(id)
		w := a.cfg.RateWindow
		clear(dc.window[int(id)*w : (int(id)+1)*w])
		dc.filled[id], dc.lastBytes[id], dc.lastHeld[id], dc.applied[id], dc.paramsGen[id] = 0, 0, 0, math.NaN(), 0
		dc.dropped[id] = 0
	}
	a.ownSeries[id] = false
	return nil
}
