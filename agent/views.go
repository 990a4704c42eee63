package agent

// Views: what the last cycle decided, for status, explain and metrics,
// and the agent's accessors.

import (
	stdmaps "maps"
	"math"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
)

// publish hands this cycle's state out for status, explain and metrics;
// views are built only when asked for. The cycle's per-entity buffers and
// the published ones change places (the next cycle refills the older
// ones): nothing is copied per entity for views that may never be built.
// A direction that collected nothing this cycle (disabled, or its shaper
// could not be read) keeps what it published last, which is what its
// buffers held.
func (a *Agent) publish(now time.Time) {
	a.published.at = now
	a.published.snapshot = nil
	for _, dc := range a.dirs {
		p := &dc.pub
		p.summary, p.cfg = dc.summary, dc.cfg
		if dc.collected {
			p.inputs, dc.inputs = dc.inputs, p.inputs
			p.outputs, dc.outputs = dc.outputs, p.outputs
			p.keys, dc.keys = dc.keys, p.keys
			p.params, dc.params = dc.params, p.params
			p.sources, dc.sources = dc.sources, p.sources
			p.heldIdx, dc.heldIdx = dc.heldIdx, p.heldIdx
			p.held = dc.heldList // the caller's until the next Held (shaping.Shaper)
			dc.collected = false
		}
		p.bytes, p.heldBytes, p.dropped, p.ownSeries = p.bytes[:0], p.heldBytes[:0], p.dropped[:0], p.ownSeries[:0]
		for _, in := range p.inputs {
			c := a.gather.counters[dc.dir][in.Slot]
			p.bytes = append(p.bytes, c.Bytes)
			p.heldBytes = append(p.heldBytes, c.HeldBytes)
			p.dropped = append(p.dropped, dc.dropped[in.Slot])
			p.ownSeries = append(p.ownSeries, a.objectives.OwnSeries(in.Slot))
		}
		p.heldBy = nil // copied only while an objective holds someone: most cycles, nobody
		if heldBy := a.objectives.HeldBy(dc.dir); len(heldBy) > 0 {
			p.heldBy = stdmaps.Clone(heldBy)
		}
		p.others = dc.others
		p.unknown.bytes = a.gather.counters[dc.dir][entity.UnknownID].Bytes
		p.unknown.rate = a.windowRate(dc.window.window(int(entity.UnknownID)))
		p.unknown.limit = dc.unknownLimit
	}
}

// runningMode is the mode the data path is in, read from its settings
// (not from the configuration): shadow while it holds nothing back,
// enforce while it shapes; "unknown" if they cannot be read.
func (a *Agent) runningMode() string {
	s, err := a.deps.DataPath.ReadSettings()
	switch {
	case err != nil:
		return "unknown"
	case s.Shaper == maps.ShaperNone:
		return string(config.ModeShadow)
	}
	return string(config.ModeEnforce)
}

// view builds the snapshot from the last published cycle.
func (a *Agent) view() *status.Snapshot {
	now := a.deps.Clock.Now()
	s := &status.Snapshot{
		Time:         a.published.at,
		Cycle:        a.loop.cycle,
		Mode:         a.runningMode(),
		Shaper:       string(a.rates.Shaper().Kind()),
		ShaperReason: a.host.shaper.reason,
		AgentVersion: a.deps.Version,
		Entities:     a.registry.Len(),
		MaxEntities:  a.cfg.MaxEntities,
		Overflowed:   a.registry.Overflowed,
		Unconfigured: a.registry.Unconfigured(),
		// Where overflow begins: what the near-full alert divides by.
		UnconfiguredMax: a.registry.UnconfiguredBudget(),
		LastReload:      a.published.reloads.last,
		// Brokers exempt_peers misses (their replication is governed).
		UnexemptBrokers: a.metadata.replication.unexempt,
		// New unconfigured entities a peer asked for faster than new_entities_per_peer.
		PeerRateRefused: a.identity.newPerPeer.Refused,
		Learner: status.LearnerView{
			Parsed: a.identity.learner.Stats.Parsed, Truncated: a.identity.learner.Stats.Truncated, Failed: a.identity.learner.Stats.Failed,
			Connections: a.identity.learner.Connections(), ReplicationClaims: a.identity.learner.Stats.ReplicationClaims,
			Unresolved:     a.identity.learner.Stats.Unresolved,
			NewConnections: a.identity.learner.Stats.NewConnections,
		},
		Connections: status.ConnectionsView{Tracked: a.identity.conns.Tracked, Reaped: a.identity.conns.Reaped, Rebound: a.identity.conns.Rebound,
			Rebinds: copyCounts(a.identity.conns.Rebinds), IdentityErrors: a.identity.conns.IdentityErrors,
			IdentitiesReclaimed: a.identity.conns.IdentitiesReclaimed},
		CycleSeconds:         a.cfg.RefreshInterval.Seconds(),
		KafkaQuotas:          a.metadata.kafka.View(),
		Cluster:              a.cluster.View(),
		Hooks:                a.host.blind.view(),
		Objectives:           a.objectives.Views(),
		ObjectiveTransitions: a.objectives.Transitions(),
	}
	for _, dc := range a.dirs {
		p := &dc.pub
		sum := p.summary
		v := status.DirectionView{
			Direction: dc.dir.String(), Enabled: p.cfg.Enabled(), Capacity: status.Bps(p.cfg.Capacity),
			C: status.Bps(sum.C), H: status.Bps(sum.H), Scale: sum.Scale, MinLimit: status.Bps(p.cfg.MinLimit), FloorScale: sum.FloorScale, PromisedRatio: finiteOr(sum.PromisedRatio, -1),
			GreenRatio: sum.GreenRatio, Overcommit: sum.Overcommit, Active: sum.Active, Standby: sum.Standby,
			Others: status.OthersView{Entities: p.others.entities, Rate: status.Bps(p.others.rate), Bytes: p.others.bytes,
				HeldBytes: p.others.heldBytes, DroppedPackets: p.others.droppedPackets, Latency: a.objectives.OthersLatency(now, dc.dir)},
		}
		if p.cfg.Enabled() {
			for i, in := range p.inputs {
				out, key := p.outputs[i], p.keys[i]
				var h shaping.Held
				if at := p.heldIdx[i]; at > 0 {
					h = p.held[at-1]
				}
				held := 0.0
				if in.Throttled && !math.IsInf(out.Demand, 1) {
					held = math.Max(0, out.Demand-in.Usage)
				}
				from := p.sources[i]
				v.Entities = append(v.Entities, status.EntityView{
					ID: in.Slot, Kind: key.Kind.String(), Name: key.Name, State: out.State.String(),
					Rate: status.Bps(in.Usage), Bytes: p.bytes[i], Throttled: in.Throttled,
					Reservation: status.Bps(p.params[i].Reservation), Weight: in.Weight, Limit: status.Bps(in.Limit),
					Sources:              status.SourcesView{Reservation: from.Reservation.String(), Weight: from.Weight.String(), Limit: from.Limit.String()},
					EffectiveReservation: status.Bps(out.EffectiveReservation), Demand: status.Bps(out.Demand), Green: status.Bps(out.Green),
					Extra: status.Bps(out.Extra), Headroom: status.Bps(out.Headroom), DynamicLimit: status.Bps(out.DynamicLimit),
					QueueDelayMillis: float64(h.Delay) / float64(time.Millisecond), DroppedPackets: h.Dropped, HeldRate: status.Bps(held),
					ShapedBytes: h.Sent, HeldBytes: p.heldBytes[i], DroppedPacketsTotal: p.dropped[i],
					Configured: a.registry.Pinned(entity.ID(in.Slot)), OwnSeries: p.ownSeries[i],
					Latency: a.objectives.Latency(now, dc.dir, entity.ID(in.Slot)), HeldBy: p.heldBy[in.Slot],
				})
			}
			unknownLimit := status.Bps(p.unknown.limit)
			if p.unknown.limit == 0 { // before the first cycle
				unknownLimit = status.Bps(allocatorConfig(p.cfg).UnknownLimit())
			}
			v.Entities = append(v.Entities, status.EntityView{ID: uint32(entity.UnknownID), Kind: "unknown", State: "standby",
				Rate: status.Bps(p.unknown.rate), Bytes: p.unknown.bytes, Weight: 1, Limit: unknownLimit, DynamicLimit: unknownLimit,
				Sources:   status.SourcesView{Reservation: "headroom H", Weight: "headroom H", Limit: "the strictest limit in force"},
				OwnSeries: true, Latency: a.objectives.Latency(now, dc.dir, entity.UnknownID)})
			sort.Slice(v.Entities, func(i, j int) bool {
				if v.Entities[i].Kind != v.Entities[j].Kind {
					return v.Entities[i].Kind < v.Entities[j].Kind
				}
				return v.Entities[i].Name < v.Entities[j].Name
			})
		}
		s.Directions[dc.dir] = v
	}
	return s
}

func finiteOr(v, or float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return or
	}
	return v
}

// Snapshot returns the last cycle's snapshot (nil before the first cycle),
// built on first request after each cycle.
func (a *Agent) Snapshot() *status.Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.loop.cycle == 0 {
		return nil
	}
	if a.published.snapshot == nil {
		a.published.snapshot = a.view()
	}
	return a.published.snapshot
}

// KafkaQuotas is kafka_quotas: import's state (zero when import is off).
func (a *Agent) KafkaQuotas() status.KafkaQuotasView {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v := a.metadata.kafka.View(); v != nil {
		return *v
	}
	return status.KafkaQuotasView{}
}

// RefreshAge is the time since the last successful cycle.
func (a *Agent) RefreshAge() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.loop.lastOK.IsZero() {
		return 0
	}
	return a.deps.Clock.Now().Sub(a.loop.lastOK)
}

// LastReloadSucceeded is false while the last reload was refused (the
// file on disk is not what runs).
func (a *Agent) LastReloadSucceeded() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.published.reloads.last == nil || a.published.reloads.last.Applied
}

// CycleFailures counts control-loop cycles that failed.
func (a *Agent) CycleFailures() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.loop.cycleFailures
}

// RateWriteFailures counts cycles whose rate writes failed.
func (a *Agent) RateWriteFailures() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rates.Failures
}

// StopMetadata ends the metadata client the agent built (Deps.NewMetadata)
// and the cluster budgets' link to their topic (Deps.NewCluster).
func (a *Agent) StopMetadata() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.metadata.stopTopics()
	a.cluster.Stop()
}

// CloseShaper takes the shaper the agent built (Deps.NewShaper) off the
// devices; the caller decides whether to (keep_attached_on_exit).
func (a *Agent) CloseShaper() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rates.Shaper().Close()
}

// ShaperKind and ShaperReason name the backend in use and why.
func (a *Agent) ShaperKind() shaping.Kind {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rates.Shaper().Kind()
}

func (a *Agent) ShaperReason() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.host.shaper.reason
}

// Config is the configuration in force (the last one applied).
func (a *Agent) Config() config.Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg
}

// ReloadFailures counts refused reloads.
func (a *Agent) ReloadFailures() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.published.reloads.failures
}

// copyCounts copies a map of counts for a snapshot.
func copyCounts(m map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
