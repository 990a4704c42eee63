package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/agent/apply"
	"github.com/sluice-dev/sluice/agent/clusterbudget"
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/kafkaquotas"
	"github.com/sluice-dev/sluice/agent/learner"
	"github.com/sluice-dev/sluice/agent/limits"
	"github.com/sluice-dev/sluice/agent/objectives"
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
	// NewMetadata, when set, builds the metadata client (topic IDs, and the
	// cluster's client quotas with kafka_quotas: import) at start and again
	// when a reload changes bootstrap, sasl, tls, metadata_refresh or
	// kafka_quotas. It overrides Topics. Without it those keys need a
	// restart.
	NewMetadata func(cfg config.Config) (Metadata, error)
	Topics      learner.TopicNames
	// NewCluster builds the link to the cluster budgets' coordination
	// topic when the configuration has a cluster section (required then).
	NewCluster func(cfg config.Config) (ClusterLink, error)
	Clock      Clock
	Log        *slog.Logger
	// Version is the running build's ("<version> revision <revision>"),
	// shown by status so that an upgrade not followed by a restart shows.
	Version string
	// Hooks, when set, reads what runs ahead of sluice's programs on each
	// hook (AttachedHooks): at start and every cycle, for status, the
	// sluice_blind_hooks metric and the log (blindhooks.go).
	Hooks HookInspector
	// Leads, when set, keeps the latency objectives' learned lead
	// directions across restarts (leads.go).
	Leads LeadStore
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

	mu  sync.Mutex
	cfg config.Config
	// identity is the learn side: samples into connections' entities.
	identity identityState
	// registry gives entities their dense ids (the data path's index).
	registry *entity.Registry
	// Stages of the control cycle (docs/design.md §4): gather, resolve
	// (limits), allocate (dirs), apply (rates), publish (snapshot).
	gather gatherState
	limits *limits.Resolver
	dirs   [2]*direction
	rates  *apply.Writer
	// published: the snapshot of the last published cycle.
	published publishedView
	// loop is the cycle's own bookkeeping: counts, failures, timings.
	loop loopState
	// host: where sluice's objects sit on the host (the shaper backend in
	// use, what runs ahead of its programs).
	host hostView
	// metadata: what the metadata client feeds (quotas, brokers).
	metadata metadataState
	// pending: writes the data path refused, tried again every cycle.
	pending pendingWrites
	// objectives: the latency objectives (agent/objectives): request
	// latency per entity, who has metric series of their own, and the
	// breakers whose hold is an input to each direction's allocation.
	objectives *objectives.Tracker
	// cluster: the cluster budgets (nil without a cluster section).
	cluster *clusterbudget.Budgets
}

// publishedView is the publish stage's: the snapshot status and metrics
// read, built from the last published cycle on demand (nil until asked),
// and when that cycle ran.
type publishedView struct {
	snapshot *status.Snapshot
	at       time.Time
	// reloads: the daemon's verdicts on reloads (NoteReload).
	reloads reloadState
}

// hostView is what the agent knows of its place on the host.
type hostView struct {
	// shaper says why the backend in use was chosen and which IFB devices
	// it redirects to (the backend itself is rates.Shaper()).
	shaper shaperInUse
	// blind: the last reading of what runs ahead of sluice (deps.Hooks).
	blind blindHooks
}

// identityState is what learning keeps: the learner, the connections'
// bindings and identities, and the limits on who may create entities.
type identityState struct {
	learner *learner.Learner[maps.ConnKey]
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
	store  EntityStore   // nil when the data path keeps no registry
	idents IdentityStore // nil when the data path keeps no identities
	// bindLog: each connection's last binding by Learn (explain).
	bindLog map[maps.ConnKey]bindRecord
	conns   connStats
	// unseen: connections with a saved identity and no entry in the
	// connection table, since when (reclaimIdentities).
	unseen map[maps.ConnKey]time.Time
	// identitiesRead: when reclaimIdentities last listed the store.
	identitiesRead time.Time
}

// gatherState is the gather stage's: the counters as last read and the
// time each reading covered.
type gatherState struct {
	counters [2][]maps.Counters
	primed   bool // counters read once: deltas are meaningful
	// lastRead is when counters were last read; elapsed[k] is the time
	// between the readings k+1 and k cycles ago (newest first), so rates
	// divide by the time that passed, not the nominal interval; elapsedSum[f]
	// is the sum of the newest f (a window filled f slots deep covers it).
	lastRead   time.Time
	elapsed    []float64
	elapsedSum []float64
}

// loopState is the control loop's bookkeeping.
type loopState struct {
	cycle         uint64
	lastOK        time.Time // the last cycle that succeeded
	cycleFailures uint64
	lastScan      time.Time // the last connection scan
	// observeCycle observes each cycle's duration, for metrics.
	observeCycle func(time.Duration)
	// leadsFailure is the last failure to keep the objectives' leads
	// (logged once, retried every cycle).
	leadsFailure string
}

// metadataState is what the metadata client feeds the agent.
type metadataState struct {
	// stopTopics ends the metadata client NewMetadata built.
	stopTopics func()
	// kafka: the cluster's client quotas and where they come from.
	kafka *kafkaquotas.Import
	// replication: the cluster's brokers and those exempt_peers misses.
	replication replicationCheck
}

// direction is one direction's control-loop state.
type direction struct {
	dir   entity.Direction
	cfg   config.Direction
	alloc *allocator.Allocator
	// fromCluster[i]: inputs[i]'s limit is a cluster share this cycle.
	fromCluster []bool
	// unknownLimit is what the last cycle held the unknown entity to.
	unknownLimit float64
	// Per entity id: the rate window (bytes per interval) and the last
	// counter reading.
	window    rateWindows
	lastBytes []uint64
	lastHeld  []uint64 // held-back bytes the data path counted (edt, police)
	// dropped[id] counts the packets the shaper dropped (Held.Dropped summed).
	dropped []uint64
	// others sums the entities without series of their own
	// (objectives.Tracker.OwnSeries).
	others aggregate
	// heldList is what the shaper said this cycle (Held), and heldAt[id]
	// a note of what it said of the entity (zero: nothing; all zero
	// between cycles).
	heldList []shaping.Held
	heldAt   []heldNote
	// scratch, reused every cycle
	inputs  []allocator.Entity
	outputs []allocator.Allocation
	keys    []entity.Key
	params  []entity.Params
	sources []entity.Sources
	heldIdx []int32 // per input, as heldAt[its id]
	targets []apply.Target
	summary allocator.Summary
	// collected: this cycle refilled inputs, keys, params, sources,
	// heldIdx and outputs; publish then swaps them with pub's.
	collected bool
	// published for status, explain and metrics (built into views on demand)
	pub published
}

// published is a direction's last cycle, kept (in buffers swapped with
// the cycle's, views.go publish) so that views can be built when asked
// for, not every cycle.
type published struct {
	summary allocator.Summary
	cfg     config.Direction
	inputs  []allocator.Entity
	outputs []allocator.Allocation
	keys    []entity.Key
	params  []entity.Params
	sources []entity.Sources
	// held is the shaper's answer the inputs' heldIdx point into.
	held    []shaping.Held
	heldIdx []int32
	bytes   []uint64
	// Per entity (as inputs): held-back bytes the data path counted,
	// dropped packets, and whether it has metric series of its own.
	heldBytes []uint64
	dropped   []uint64
	ownSeries []bool
	heldBy    map[uint32]string
	others    aggregate
	unknown   struct {
		rate, limit float64
		bytes       uint64
	}
}

// aggregate sums, per direction, the entities without series of their own.
// Its counters accumulate deltas, so they never go back (an entity joining
// or leaving the sum would otherwise read as a counter reset or a burst).
type aggregate struct {
	entities       int
	rate           float64
	bytes          uint64
	heldBytes      uint64
	droppedPackets uint64
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
	// IdentitiesReclaimed: saved identities dropped because their
	// connection had no entry for identityGrace (its end was missed).
	IdentitiesReclaimed uint64
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
	choice := ShaperChoice{Shaper: deps.Shaper, Reason: deps.ShaperReason, IFBIndex: deps.IFBIndex, EgressIFBIndex: deps.EgressIFBIndex}
	if deps.NewShaper != nil {
		built, serr := deps.NewShaper(cfg)
		if serr != nil {
			return nil, serr
		}
		choice = built
		defer func() { // err: New's result; an agent that fails to start leaves no tree behind
			if err != nil {
				built.Shaper.Close()
			}
		}()
	}
	if choice.Shaper == nil {
		choice.Shaper = shaping.Shadow{}
	}
	stopTopics := func() {}
	var quotas kafkaquotas.Source
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
		deps:     deps,
		log:      deps.Log,
		cfg:      cfg,
		registry: entity.NewRegistry(cfg.MaxEntities),
		identity: identityState{
			newPerPeer: entity.NewPeerLimiter(cfg.NewEntitiesPerPeer, maxLimitedPeers),
			learner:    learner.New[maps.ConnKey](policy, deps.Topics),
		},
		metadata: metadataState{stopTopics: stopTopics, kafka: kafkaquotas.New(quotas), replication: replicationCheck{brokers: brokers}},
		loop:     loopState{observeCycle: func(time.Duration) {}},
		gather:   gatherState{elapsed: make([]float64, cfg.RateWindow), elapsedSum: make([]float64, cfg.RateWindow+1)},
	}
	// Read under a.mu, so a reload's listener protocols apply at once.
	a.identity.learner.SetSASLListeners(func(c maps.ConnKey) bool {
		return a.cfg.Protocol(c.Local.Port()) == config.ProtocolSASLPlaintext
	})
	ids := a.registry.Limit()
	a.rates = apply.New(choice.Shaper, ids, cfg.UpdateThreshold)
	a.host.shaper = shaperInUse{reason: choice.Reason, ifb: choice.IFBIndex, egressIFB: choice.EgressIFBIndex}
	a.objectives = objectives.New(ids, a.log)
	a.objectives.Sync(cfg.Entities)
	a.restoreLeads()
	for _, d := range entity.Directions {
		a.gather.counters[d] = make([]maps.Counters, ids)
		dc := directionConfig(cfg, d)
		alloc, err := allocator.New(allocatorConfig(dc))
		if err != nil && dc.Enabled() {
			return nil, fmt.Errorf("%s: %w", d, err)
		}
		if alloc == nil {
			alloc, _ = allocator.New(allocator.DefaultConfig(0))
		}
		a.dirs[d] = &direction{
			dir:       d,
			cfg:       dc,
			alloc:     alloc,
			window:    newRateWindows(ids, cfg.RateWindow),
			lastBytes: make([]uint64, ids),
			lastHeld:  make([]uint64, ids),
			dropped:   make([]uint64, ids),
			heldAt:    make([]heldNote, ids),
		}
	}
	a.registry.SetUnconfiguredBudget(cfg.MaxUnconfiguredEntities)
	a.identity.conns.Rebinds = make(map[string]uint64, len(RebindReasons))
	a.identity.bindLog = map[maps.ConnKey]bindRecord{}
	if idents, ok := deps.DataPath.(IdentityStore); ok {
		a.identity.idents = idents
		a.identity.learner.OnLogin(a.saveIdentity)
	}
	if store, ok := deps.DataPath.(EntityStore); ok {
		a.identity.store = store
		if err := a.restoreRegistry(); err != nil {
			return nil, err
		}
	}
	if cfg.Cluster.Enabled {
		cb, cerr := startClusterBudgets(cfg, deps)
		if cerr != nil {
			return nil, cerr
		}
		a.cluster = cb
		defer func() { // err: New's result
			if err != nil {
				cb.Stop()
			}
		}()
	}
	var shares limits.Shares
	if a.cluster != nil {
		shares = a.cluster
	}
	a.limits = limits.New(policy, shares, ids)
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
	a.objectives.EntitiesChanged() // pinning changes who has series, new or not
	now := a.deps.Clock.Now()
	added = a.registry.Pin(a.limits.Policy().ConfiguredKeys(), now)
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
		if err := a.rates.Remove(uint32(id), true); err != nil {
			errs = append(errs, err)
		}
		delete(a.pending.unsaved, id)
		if a.identity.store != nil {
			if err := a.identity.store.DeleteEntity(uint32(id)); err != nil {
				errs = append(errs, fmt.Errorf("forget entity %d: %w", id, err))
			}
		}
	}
	a.objectives.EntitiesChanged()
	return errors.Join(errs...)
}

// registered gives a new entity its standby limit and persists it.
func (a *Agent) registered(id uint32, key entity.Key) {
	a.objectives.EntitiesChanged()
	a.applyStandby(id, key)
	if a.identity.store != nil {
		if _, err := a.identity.store.SaveEntity(id, uint8(key.Kind), key.Name); err != nil {
			a.log.Warn("persist entity; written again next cycle", "entity", key.String(), "err", err)
			if a.pending.unsaved == nil {
				a.pending.unsaved = map[entity.ID]struct{}{}
			}
			a.pending.unsaved[entity.ID(id)] = struct{}{}
		}
	}
}

// persistUnsaved writes again the names the data path refused; an entity
// gone from the registry since (reclaimed, or added by a refused reload)
// is dropped instead.
func (a *Agent) persistUnsaved() {
	for id := range a.pending.unsaved {
		key, ok := a.registry.Key(id)
		if !ok {
			delete(a.pending.unsaved, id)
			continue
		}
		if _, err := a.identity.store.SaveEntity(uint32(id), uint8(key.Kind), key.Name); err != nil {
			a.log.Warn("persist entity; written again next cycle", "entity", key.String(), "err", err)
			continue
		}
		delete(a.pending.unsaved, id)
	}
}

// restoreRegistry rebuilds the registry an earlier agent saved.
func (a *Agent) restoreRegistry() error {
	saved := map[entity.ID]entity.Key{}
	err := a.identity.store.EachEntity(func(id uint32, kind uint8, name string) {
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
		a.identity.store.DeleteEntity(uint32(id))
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
