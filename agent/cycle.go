package agent

// The control loop's cycle: counters in, allocation, rates out, heartbeat,
// reclaim.

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluice-dev/sluice/agent/apply"
	"github.com/sluice-dev/sluice/agent/clusterbudget"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/allocator"
	"github.com/sluice-dev/sluice/maps"
)

// Cycle runs one control-loop cycle: read counters, allocate each
// direction, write changed rates, heartbeat, reclaim idle entities.
func (a *Agent) Cycle() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.runCycle()
	if err != nil {
		a.loop.cycleFailures++
	}
	return err
}

func (a *Agent) runCycle() error {
	start := a.deps.Clock.Now()
	a.loop.cycle++
	a.retryPending()
	a.pullKafkaQuotas()
	a.checkReplication()
	a.host.blind.check(a.deps.Hooks, a.log)
	// The first reading is every slot's baseline (pinned counters may hold
	// an earlier agent's history); after it, only ids the registry handed
	// out can have moved.
	ids := a.registry.Extent()
	if !a.gather.primed {
		ids = len(a.gather.counters[0])
	}
	if err := a.deps.DataPath.ReadCounters(&a.gather.counters, ids); err != nil {
		return fmt.Errorf("read counters: %w", err)
	}
	// The time this cycle's deltas cover: a late tick (a busy host, a
	// paused VM) must not read as a burst of traffic.
	since := a.cfg.RefreshInterval.Seconds()
	if !a.gather.lastRead.IsZero() {
		if d := start.Sub(a.gather.lastRead).Seconds(); d > 0 {
			since = d
		}
	}
	a.gather.lastRead = start
	copy(a.gather.elapsed[1:], a.gather.elapsed[:len(a.gather.elapsed)-1])
	a.gather.elapsed[0] = since
	for f, e := range a.gather.elapsed {
		a.gather.elapsedSum[f+1] = a.gather.elapsedSum[f] + e
	}
	if !a.gather.primed {
		// Counters may hold history (pinned maps from an earlier agent):
		// the first reading is the baseline, not one interval's use.
		for _, dc := range a.dirs {
			for i, c := range a.gather.counters[dc.dir] {
				dc.lastBytes[i], dc.lastHeld[i] = c.Bytes, c.HeldBytes
			}
		}
		a.gather.primed = true
	}
	a.objectives.AssignSeries(a.registry, a.cfg.Metrics)
	var errs []error
	for _, dc := range a.dirs {
		if err := a.cycleDirection(dc); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dc.dir, err))
		}
	}
	a.keepLeads() // a breaker's release this cycle may have moved one
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
	a.loop.observeCycle(elapsed)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	a.loop.lastOK = a.deps.Clock.Now()
	return nil
}

func (a *Agent) cycleDirection(dc *direction) error {
	if !dc.cfg.Enabled() {
		return nil
	}
	dir := maps.Direction(dc.dir)
	held, err := a.rates.Shaper().Held(dir)
	if err != nil {
		return err
	}
	// Spread by id, so that the walk below reads them in its own order;
	// cleared after it through the same list.
	for j, h := range held {
		if int(h.Entity) < len(dc.heldAt) { // a class of an id past the registry: not ours to read
			dc.heldAt[h.Entity] = heldNote{at: int32(j + 1), throttled: h.Throttled, dropped: h.Dropped}
		}
	}
	dc.heldList = held
	counters := a.gather.counters[dc.dir]
	interval := a.gather.elapsed[0]
	dc.inputs, dc.keys, dc.params, dc.sources, dc.heldIdx = dc.inputs[:0], dc.keys[:0], dc.params[:0], dc.sources[:0], dc.heldIdx[:0]
	now := a.deps.Clock.Now()
	dc.others.entities, dc.others.rate = 0, 0
	dc.fromCluster = dc.fromCluster[:0]
	a.registry.Each(func(id entity.ID, key entity.Key) {
		i := int(id)
		cur := counters[i].Bytes
		delta := cur - dc.lastBytes[i]
		if cur < dc.lastBytes[i] {
			delta = cur // counters were reset
		}
		dc.lastBytes[i] = cur
		dc.window.push(i, delta)
		usage := a.windowRate(dc.window.window(i))
		if delta > 0 {
			a.registry.Touch(id, now)
		}
		h := dc.heldAt[i]
		if id == entity.UnknownID {
			return // held to H, outside the allocation
		}
		p, src, shared := a.limits.Resolve(id, key, dc.dir)
		dc.dropped[i] += h.dropped
		// BPF shapers count what they hold back in the entity's counters.
		heldDelta := uint64(0)
		if held := counters[i].HeldBytes; held != dc.lastHeld[i] {
			h.throttled = true
			if held > dc.lastHeld[i] {
				heldDelta = held - dc.lastHeld[i]
			}
			dc.lastHeld[i] = held
		}
		if !a.objectives.OwnSeries(uint32(id)) {
			dc.others.entities++
			dc.others.rate += usage
			dc.others.bytes += delta
			dc.others.heldBytes += heldDelta
			dc.others.droppedPackets += h.dropped
		}
		inForce, _ := a.rates.InForce(dir, uint32(id))
		h.throttled = h.throttled && ranAtLimit(float64(delta)/interval, inForce)
		if a.limits.Governed(id, dc.dir) { // few entities: the budget's usage
			if b, ok := a.cluster.BudgetOf(key, dc.dir); ok {
				a.cluster.Measure(b, a.windowRate(dc.window.newest(i, clusterbudget.UsageIntervals)), float64(delta)/interval, h.throttled)
			}
		}

		dc.inputs = append(dc.inputs, allocator.Entity{
			Slot: uint32(id), Reservation: p.Reservation, Weight: p.Weight, Limit: p.Limit,
			Usage: usage, Throttled: h.throttled,
		})
		dc.keys = append(dc.keys, key)
		dc.fromCluster = append(dc.fromCluster, shared)
		dc.params = append(dc.params, p)
		dc.sources = append(dc.sources, src)
		dc.heldIdx = append(dc.heldIdx, h.at)
	})
	for _, h := range held { // every note back to zero for the next cycle
		if int(h.Entity) < len(dc.heldAt) {
			dc.heldAt[h.Entity] = heldNote{}
		}
	}
	if cap(dc.outputs) < len(dc.inputs) {
		dc.outputs = make([]allocator.Allocation, len(dc.inputs), 2*len(dc.inputs))
	}
	dc.outputs = dc.outputs[:len(dc.inputs)]
	dc.collected = true
	before := dc.summary.Overcommit
	// Allocate, the latency objectives' hold on best-effort traffic
	// included: an input to the allocation, not a patch on its output.
	trim := a.objectives.Trim(dc.dir, dc.inputs, a.registry, a.deps.Clock.Now())
	summary, err := dc.alloc.CycleTrim(dc.inputs, trim, dc.outputs)
	if err != nil {
		// No allocation: the outputs published are the last ones, as
		// they were before publish swapped buffers instead of copying.
		copy(dc.outputs, dc.pub.outputs)
		return err
	}
	dc.summary = summary
	a.objectives.NoteTrim(dc.dir, summary, dc.inputs, dc.outputs, dc.keys)
	if summary.OvercommitChanged {
		if summary.Overcommit {
			a.log.Info("overcommit entered: reservations exceed the distributable capacity",
				"direction", dc.dir.String(), "scale", summary.Scale, "entities", summary.Active, "promised_ratio", summary.PromisedRatio)
		} else if before {
			a.log.Info("overcommit left", "direction", dc.dir.String(), "entities", summary.Active, "promised_ratio", summary.PromisedRatio)
		}
	}
	// Apply: the rates the allocation decided, the unknown entity's first.
	// It is held to the strictest limit in force (unknownLimit) and
	// guaranteed at most H, the capacity's share no reservation is taken
	// from. A cluster share that went down is written however little it
	// moved: the report this cycle sends says it is in force.
	dc.targets = append(dc.targets[:0], apply.Target{Entity: uint32(entity.UnknownID)}) // its rate once the strictest is known
	strictest := math.Inf(1)
	for i, in := range dc.inputs {
		strictest = stricter(strictest, dc.outputs[i].DynamicLimit)
		dc.targets = append(dc.targets, apply.Target{Entity: in.Slot, Rate: dc.outputs[i].DynamicLimit,
			Guaranteed: dc.outputs[i].EffectiveReservation, LowerExactly: dc.fromCluster[i]})
	}
	dc.unknownLimit = unknownLimit(dc.alloc.Config(), strictest)
	dc.targets[0].Rate, dc.targets[0].Guaranteed = dc.unknownLimit, min(dc.unknownLimit, dc.alloc.Config().Headroom())
	written, err := a.rates.Apply(dir, dc.targets)
	if err != nil {
		return err
	}
	a.log.Debug("cycle", "direction", dc.dir.String(), "cycle", a.loop.cycle, "active", summary.Active, "standby", summary.Standby,
		"promised_ratio", summary.PromisedRatio, "green_ratio", summary.GreenRatio, "rate_updates", written)
	return nil
}

// heldNote is what the walk over entities needs of the shaper's Held for
// one entity: where it is in the shaper's answer (1 + index, 0: not in
// it), and two of its fields. Spread by id each cycle, a 16-byte note
// instead of the 56-byte Held, and cleared through the shaper's answer
// instead of a clear of every id's (#47).
type heldNote struct {
	at        int32
	throttled bool
	dropped   uint64
}

// windowRate is the rate of the bytes of an entity's newest filled
// intervals (rateWindows.window, newest): over the time they covered.
func (a *Agent) windowRate(bytes uint64, filled int) float64 {
	if filled == 0 {
		return 0
	}
	return float64(bytes) / a.gather.elapsedSum[filled]
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
	count := a.registry.Overflowed + a.identity.newPerPeer.Refused
	if count == a.identity.overflowLogged.count || now.Sub(a.identity.overflowLogged.at) < time.Minute {
		return
	}
	a.log.Warn("new entities share the overflow entity", "since_last_log", count-a.identity.overflowLogged.count,
		"unconfigured", a.registry.Unconfigured(), "max_unconfigured_entities", a.cfg.MaxUnconfiguredEntities,
		"refused_by_peer_rate", a.identity.newPerPeer.Refused)
	a.identity.overflowLogged.at, a.identity.overflowLogged.count = now, count
}

// scanConnections walks the connection table: live connections keep their
// entities from being reclaimed; closed ones (FIN or RST seen) leave the
// table; learner state of every connection no longer live is freed.
func (a *Agent) scanConnections(now time.Time) error {
	live := make(map[maps.ConnKey]struct{}, a.identity.learner.Connections())
	var closed []maps.ConnKey
	var unbound []maps.Binding // live and bound to no entity: holdUnsampled
	tracked := 0
	err := a.deps.DataPath.EachBinding(func(b maps.Binding) {
		tracked++
		if b.Closing {
			closed = append(closed, b.Conn)
			return
		}
		live[b.Conn] = struct{}{}
		if b.Produce == maps.EntityUnknown && b.Fetch == maps.EntityUnknown {
			unbound = append(unbound, b)
		}
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
	if a.identity.idents != nil {
		if err := a.identity.idents.ForgetIdentities(closed); err != nil {
			a.identity.conns.IdentityErrors++
			a.log.Warn("forget identities of closed connections", "err", err)
		}
	}
	a.identity.conns.Reaped += uint64(len(closed))
	a.identity.conns.Tracked = tracked - len(closed)
	a.identity.learner.Retain(func(c maps.ConnKey) bool { _, ok := live[c]; return ok })
	for c := range a.identity.bindLog {
		if _, ok := live[c]; !ok {
			delete(a.identity.bindLog, c)
		}
	}
	a.holdUnsampled(unbound, now)
	a.reclaimIdentities(live, now)
	a.identity.newPerPeer.Prune(now)
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
	if now.Sub(a.loop.lastScan) >= min(bindingsScanEvery, a.cfg.EntityIdleTimeout/2) {
		a.loop.lastScan = now
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
		if a.identity.store != nil {
			if err := a.identity.store.DeleteEntity(id); err != nil {
				errs = append(errs, fmt.Errorf("reclaim entity %d: %w", id, err))
				continue
			}
		}
		released = append(released, entity.ID(id))
	}
	a.registry.Release(released)
	a.objectives.EntitiesChanged()
	a.log.Debug("reclaimed idle entities", "count", len(released), "retrying", len(ids)-len(released))
	return errors.Join(errs...)
}

// clearEntity removes an entity taken out of the registry from the shaper
// and forgets what the agent kept for it.
func (a *Agent) clearEntity(id uint32) error {
	if err := a.rates.Remove(id, false); err != nil {
		return err
	}
	for _, dc := range a.dirs {
		dc.alloc.Forget(id)
		dc.window.clear(int(id))
		dc.lastBytes[id], dc.lastHeld[id] = 0, 0
		dc.dropped[id] = 0
	}
	a.limits.Forget(entity.ID(id))
	a.objectives.Forget(entity.ID(id))
	return nil
}
