package agent

import (
	"context"
	"errors"
	"math"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/maps"
)

// publish copies this cycle's state out (into reused buffers) for status,
// explain and metrics; views are built only when asked for.
func (a *Agent) publish(now time.Time) {
	a.pubTime = now
	a.snapshot = nil
	for _, dc := range a.dirs {
		p := &dc.pub
		p.summary, p.cfg = dc.summary, dc.cfg
		p.inputs = append(p.inputs[:0], dc.inputs...)
		p.outputs = append(p.outputs[:0], dc.outputs...)
		p.keys = append(p.keys[:0], dc.keys...)
		p.params = append(p.params[:0], dc.params...)
		p.heldOf = append(p.heldOf[:0], dc.heldOf...)
		p.bytes = p.bytes[:0]
		for _, in := range dc.inputs {
			p.bytes = append(p.bytes, a.counters[dc.dir][in.Slot].Bytes)
		}
		p.unknown.bytes = a.counters[dc.dir][entity.UnknownID].Bytes
		p.unknown.rate = 0
		if f := int(dc.filled[0]); f > 0 {
			var s float64
			for _, b := range dc.window[:f] {
				s += b
			}
			p.unknown.rate = s / (float64(f) * a.cfg.RefreshInterval.Seconds())
		}
	}
}

// view builds the snapshot from the last published cycle.
func (a *Agent) view() *Snapshot {
	s := &Snapshot{
		Time:         a.pubTime,
		Cycle:        a.cycle,
		Mode:         string(a.cfg.Mode),
		Shaper:       a.deps.Shaper.Kind(),
		ShaperReason: a.deps.ShaperReason,
		Entities:     a.registry.Len(),
		MaxEntities:  a.cfg.MaxEntities,
		Overflowed:   a.registry.Overflowed,
		Unconfigured: a.registry.Unconfigured(),
		// New unconfigured entities a peer asked for faster than new_entities_per_peer.
		PeerRateRefused: a.newPerPeer.Refused,
		Learner: LearnerView{
			Parsed: a.learner.Stats.Parsed, Truncated: a.learner.Stats.Truncated, Failed: a.learner.Stats.Failed,
			Connections: a.learner.Connections(), ReplicationClaims: a.learner.Stats.ReplicationClaims,
			NewConnections: a.learner.Stats.NewConnections,
		},
		Connections:  ConnectionsView{Tracked: a.conns.Tracked, Reaped: a.conns.Reaped, Rebound: a.conns.Rebound},
		CycleSeconds: a.cfg.RefreshInterval.Seconds(),
	}
	for _, dc := range a.dirs {
		p := &dc.pub
		sum := p.summary
		v := DirectionView{
			Direction: dc.dir.String(), Enabled: p.cfg.Enabled(), Capacity: Bps(p.cfg.Capacity),
			C: Bps(sum.C), H: Bps(sum.H), Scale: sum.Scale, PromisedRatio: finiteOr(sum.PromisedRatio, -1),
			GreenRatio: sum.GreenRatio, Overcommit: sum.Overcommit, Active: sum.Active, Standby: sum.Standby,
		}
		if p.cfg.Enabled() {
			for i, in := range p.inputs {
				out, key, h := p.outputs[i], p.keys[i], p.heldOf[i]
				held := 0.0
				if h.Throttled && !math.IsInf(out.Demand, 1) {
					held = math.Max(0, out.Demand-in.Usage)
				}
				v.Entities = append(v.Entities, EntityView{
					ID: in.Slot, Kind: key.Kind.String(), Name: key.Name, State: out.State.String(),
					Rate: Bps(in.Usage), Bytes: p.bytes[i], Throttled: in.Throttled,
					Reservation: Bps(p.params[i].Reservation), Weight: in.Weight, Limit: Bps(in.Limit),
					EffectiveReservation: Bps(out.EffectiveReservation), Demand: Bps(out.Demand), Green: Bps(out.Green),
					Extra: Bps(out.Extra), Headroom: Bps(out.Headroom), DynamicLimit: Bps(out.DynamicLimit),
					QueueDelayMillis: float64(h.Delay) / float64(time.Millisecond), DroppedPackets: h.Dropped, HeldRate: Bps(held),
					ShapedBytes: h.Sent,
				})
			}
			v.Entities = append(v.Entities, EntityView{ID: uint32(entity.UnknownID), Kind: "unknown", State: "standby",
				Rate: Bps(p.unknown.rate), Bytes: p.unknown.bytes, Weight: 1, Limit: Bps(sum.H), DynamicLimit: Bps(sum.H)})
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
func (a *Agent) Snapshot() *Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cycle == 0 {
		return nil
	}
	if a.snapshot == nil {
		a.snapshot = a.view()
	}
	return a.snapshot
}

// RefreshAge is the time since the last successful cycle.
func (a *Agent) RefreshAge() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lastOK.IsZero() {
		return 0
	}
	return a.deps.Clock.Now().Sub(a.lastOK)
}

// ReloadFailures counts refused reloads.
func (a *Agent) ReloadFailures() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reloadFailures
}

// Reload applies a new configuration from the next cycle, or refuses it:
// the running configuration stays and the failure is counted. Keys that
// need a restart (interfaces, shaper, pin path, sizes) are reported and
// keep their running values.
func (a *Agent) Reload(cfg config.Config, loadErr error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if loadErr != nil {
		a.reloadFailures++
		a.log.Error("configuration reload refused; the running configuration stays", "err", loadErr)
		return loadErr
	}
	for _, fixed := range restartOnly(a.cfg, cfg) {
		a.log.Warn("configuration key changed but needs a restart to apply", "key", fixed)
	}
	cfg.Interfaces, cfg.Shaper, cfg.PinPath = a.cfg.Interfaces, a.cfg.Shaper, a.cfg.PinPath
	cfg.MaxEntities, cfg.MaxConnections, cfg.RateWindow = a.cfg.MaxEntities, a.cfg.MaxConnections, a.cfg.RateWindow
	cfg.SampleBytes, cfg.Socket, cfg.MetricsAddress = a.cfg.SampleBytes, a.cfg.Socket, a.cfg.MetricsAddress
	for _, dc := range a.dirs {
		next := directionConfig(cfg, dc.dir)
		if next.Enabled() {
			if err := dc.alloc.SetConfig(allocatorConfig(next)); err != nil {
				a.reloadFailures++
				return err
			}
		}
		dc.cfg = next
	}
	old := a.cfg
	a.cfg = cfg
	a.policy = entity.NewPolicy(cfg.Entities)
	a.policyGen++
	a.learner.SetPolicy(a.policy)
	a.registry.SetUnconfiguredBudget(cfg.MaxUnconfiguredEntities)
	a.newPerPeer.SetRate(cfg.NewEntitiesPerPeer)
	a.pinConfigured()
	if err := a.applyDataPathSettings(); err != nil {
		a.cfg = old
		a.reloadFailures++
		return err
	}
	a.log.Info("configuration reloaded", "mode", cfg.Mode, "clients", len(cfg.Entities.Clients), "topic_partitions", len(cfg.Entities.TopicPartitions))
	return nil
}

func restartOnly(old, next config.Config) []string {
	var keys []string
	if !equalStrings(old.Interfaces, next.Interfaces) {
		keys = append(keys, "interfaces")
	}
	for name, changed := range map[string]bool{
		"shaper": old.Shaper != next.Shaper, "pin_path": old.PinPath != next.PinPath,
		"max_entities": old.MaxEntities != next.MaxEntities, "max_connections": old.MaxConnections != next.MaxConnections,
		"rate_window": old.RateWindow != next.RateWindow, "sample_bytes": old.SampleBytes != next.SampleBytes,
		"socket": old.Socket != next.Socket, "metrics_address": old.MetricsAddress != next.MetricsAddress,
	} {
		if changed {
			keys = append(keys, name)
		}
	}
	sort.Strings(keys)
	return keys
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Run cycles every refresh interval and learns from samples until ctx
// ends. ready is called after the first successful cycle.
func (a *Agent) Run(ctx context.Context, samples Samples, ready func()) error {
	learned := make(chan error, 1)
	if samples != nil {
		go func() { learned <- a.learnLoop(samples) }()
		defer func() { samples.Close(); <-learned }()
	}
	if err := a.Cycle(); err != nil {
		return err
	}
	if ready != nil {
		ready()
	}
	a.mu.Lock()
	interval := a.cfg.RefreshInterval
	a.mu.Unlock()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-learned:
			if err != nil {
				return err
			}
			learned = nil
		case <-ticker.C:
			if err := a.Cycle(); err != nil {
				// A failed cycle is logged and retried; the data path fails
				// open by itself if the heartbeat stops.
				a.log.Error("control cycle failed", "err", err)
			}
		}
	}
}

func (a *Agent) learnLoop(samples Samples) error {
	for {
		s, err := samples.Read()
		if errors.Is(err, maps.ErrClosed) {
			return nil
		}
		if err != nil {
			a.log.Warn("read sample", "err", err)
			continue
		}
		if err := a.Learn(s); err != nil {
			a.log.Debug("sample not learned; the connection keeps its entity", "conn", s.Conn.String(), "err", err)
		}
	}
}
