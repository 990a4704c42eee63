package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/kafkaquotas"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/allocator"
	"github.com/sluice-dev/sluice/maps"
)

// Reload applies a new configuration to the agent's state, or refuses it
// whole and leaves that state as it was. Everything the agent runs that
// can change live does: the shaper backend (mode, shaper, max_queue_delay:
// shadow ↔ enforce, htb ↔ police), the allocators, entities and their
// pins, the data path's settings, the metadata client. Keys sized or bound
// at start (interfaces, map sizes, pin path, rate_window, sample_bytes,
// the status socket, log_format) need a restart: changing them refuses the
// reload.
//
// The reload's lifecycle is the daemon's (daemon/reload.go): when one
// runs, reading the file, what the process moves with it (the metrics
// listener, the log level, the loop's ticker) and the verdict, which it
// gives back to the agent to publish (NoteReload). An error says whether
// the running state is as before: ErrUndoFailed when it is not.
func (a *Agent) Reload(cfg config.Config) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Status shows what runs at once: the configuration applied, or what a
	// refused reload's failed undo left.
	defer func() { a.published.snapshot = nil }()
	tx := &reloadTx{a: a, old: a.cfg, next: cfg}
	if err := tx.prepare(); err != nil {
		tx.discard()
		return fmt.Errorf("%w; nothing changed", err)
	}
	if err := tx.commit(); err != nil {
		tx.discard()
		return err
	}
	tx.swap()
	a.log.Info("configuration reloaded", "mode", cfg.Mode, "shaper", a.rates.Shaper().Kind(), "refresh_interval", cfg.RefreshInterval,
		"clients", len(cfg.Entities.Clients), "topic_partitions", len(cfg.Entities.TopicPartitions))
	a.logWarnings(cfg)
	return nil
}

// A reload is a transaction in two phases.
//
// Prepare builds what the new configuration needs beside the running state
// and changes none of it: the checks, a new metadata client, the compiled
// policy. A failure there discards what was built.
//
// Commit then changes the running state one step at a time. Every step
// that can fail has an undo that puts back what it changed (also when it
// failed part-way); a failure runs the failed step's undo and those of the
// steps before it, newest first. What cannot fail (installing the
// configuration, moving the metadata client) comes after the last step
// that can. A refused reload says whether the undo restored everything;
// if an undo itself failed, the verdict names what differs.
//
// ReloadStepNames lists the steps in order; Deps.FailReloadStep can fail
// each (the fault-injection test does, one at a time).
var ReloadStepNames = []string{
	stepValidate, stepMetadata, stepPolicy,
	stepShaper, stepShaperBuild, stepAllocators, stepEntities, stepListeners, stepSettings,
	stepCapacities, stepPeerEntities, stepExemptPeers, stepSwap,
}

const (
	stepValidate     = "validate"
	stepMetadata     = "metadata client"
	stepPolicy       = "policy"
	stepShaper       = "shaper"
	stepShaperBuild  = "shaper: build new" // inside stepShaper, after the old one is closed
	stepAllocators   = "allocators"
	stepEntities     = "entities"
	stepListeners    = "listeners"
	stepSettings     = "data path settings"
	stepCapacities   = "capacities"
	stepPeerEntities = "peer entities"
	stepExemptPeers  = "exempt peers"
	stepSwap         = "swap" // the infallible tail
)

// NoteReload publishes the daemon's verdict on a reload: status shows it
// and the reload metrics count it.
func (a *Agent) NoteReload(r status.ReloadResult) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.published.reloads.last = &r
	if !r.Applied {
		a.published.reloads.failures++
	}
	a.published.snapshot = nil // status shows the verdict at once
}

// ErrUndoFailed marks a refused reload that could not be undone whole.
var ErrUndoFailed = errors.New("undo failed, the running state differs from before")

// reloadTx is one reload: what prepare built and what commit must be able
// to put back.
type reloadTx struct {
	a         *Agent
	old, next config.Config

	// prepared
	metadata *Metadata // the new metadata client (nil: unchanged)
	policy   kafkaquotas.Compiled

	// what commit changed, for the undo
	settingsBefore maps.Settings
	undos          []reloadStep
	// forgotten once applied (forgetStale)
	forget                     []maps.ConnKey
	exemptAdded, exemptRemoved []netip.Prefix
}

type reloadStep struct {
	name string
	do   func() error
	// undo puts back what do changed, also when do failed part-way (nil:
	// nothing to put back).
	undo func() error
}

// fault asks the test hook whether step must fail.
func (tx *reloadTx) fault(step string) error {
	if tx.a.deps.FailReloadStep == nil {
		return nil
	}
	if err := tx.a.deps.FailReloadStep(step); err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	return nil
}

// prepare checks the configuration and builds, beside the running state,
// what it needs. It changes nothing that runs.
func (tx *reloadTx) prepare() error {
	a, old, next := tx.a, tx.old, tx.next
	if err := tx.fault(stepValidate); err != nil {
		return err
	}
	if keys := restartOnly(old, next, a.deps.NewMetadata != nil); len(keys) > 0 {
		return fmt.Errorf("%s: cannot change while the agent runs; restart it to apply", strings.Join(keys, ", "))
	}
	for _, dc := range a.dirs {
		if d := directionConfig(next, dc.dir); d.Enabled() {
			if err := allocatorConfig(d).Validate(); err != nil {
				return fmt.Errorf("%s: %w", dc.dir, err)
			}
		}
	}
	if a.specInForce() != specOf(next) && a.deps.NewShaper == nil {
		return errors.New("mode, shaper, max_queue_delay: this agent's shaper is fixed; restart it to apply")
	}
	if err := tx.fault(stepMetadata); err != nil {
		return err
	}
	quotas := a.metadata.kafka.Quotas()
	if a.deps.NewMetadata != nil && anyChanged(metadataChanges(old, next)) {
		md, err := a.deps.NewMetadata(next)
		if err != nil {
			return fmt.Errorf("metadata client: %w", err)
		}
		tx.metadata = &md
		if md.Quotas == nil {
			quotas = entity.KafkaQuotas{} // import turned off
		}
	}
	if err := tx.fault(stepPolicy); err != nil {
		return err
	}
	tx.policy = kafkaquotas.Compile(next, quotas)
	return nil
}

// discard ends what prepare built for a reload that is refused.
func (tx *reloadTx) discard() {
	if tx.metadata != nil {
		tx.metadata.stop()()
		tx.metadata = nil
	}
}

// commit runs the steps that change the running state; on a failure it
// undoes them and says whether that put everything back.
func (tx *reloadTx) commit() error {
	settings, err := tx.a.deps.DataPath.ReadSettings()
	if err != nil {
		return fmt.Errorf("data path settings: %w; nothing changed", err)
	}
	tx.settingsBefore = settings
	for _, s := range tx.steps() {
		if err := tx.fault(s.name); err != nil {
			return tx.rollback(err)
		}
		if s.undo != nil {
			tx.undos = append(tx.undos, s)
		}
		if err := s.do(); err != nil {
			return tx.rollback(fmt.Errorf("%s: %w", s.name, err))
		}
	}
	if err := tx.fault(stepSwap); err != nil { // the last point a reload can be refused
		return tx.rollback(err)
	}
	return nil
}

// rollback runs the undos, newest first, and builds the verdict.
func (tx *reloadTx) rollback(cause error) error {
	var failed []error
	for _, s := range slices.Backward(tx.undos) {
		if err := s.undo(); err != nil {
			failed = append(failed, fmt.Errorf("undo %s: %w", s.name, err))
		}
	}
	tx.undos = nil
	if len(failed) > 0 {
		tx.a.log.Error("a refused reload could not be undone whole: the running state differs from before", "err", errors.Join(failed...))
		return fmt.Errorf("%w; %w: %w", cause, ErrUndoFailed, errors.Join(failed...))
	}
	return fmt.Errorf("%w; every change was undone", cause)
}

// steps are the commit's steps for this reload, in order.
func (tx *reloadTx) steps() []reloadStep {
	a, old, next := tx.a, tx.old, tx.next
	dp := a.deps.DataPath
	var steps []reloadStep
	if a.specInForce() != specOf(next) {
		steps = append(steps, tx.shaperStep())
	}
	// The allocators come before the entities: a new entity's standby limit
	// is its direction's (applyStandby).
	oldDirs := a.dirConfigs()
	var oldAlloc [2]allocator.Config
	var setAlloc [2]bool
	steps = append(steps, reloadStep{name: stepAllocators,
		do: func() error {
			for _, dc := range a.dirs {
				d := directionConfig(next, dc.dir)
				if d.Enabled() {
					oldAlloc[dc.dir], setAlloc[dc.dir] = dc.alloc.Config(), true
					if err := dc.alloc.SetConfig(allocatorConfig(d)); err != nil { // validated in prepare
						return err
					}
				}
				dc.cfg = d
			}
			return nil
		},
		undo: func() error {
			for _, dc := range a.dirs {
				dc.cfg = oldDirs[dc.dir]
				if setAlloc[dc.dir] {
					dc.alloc.SetConfig(oldAlloc[dc.dir]) // it was in force: valid
				}
			}
			return nil
		}})
	var registryBefore *entity.Registry
	var policyBefore *entity.Policy
	var kafkaBefore kafkaquotas.Held
	var added []entity.ID
	steps = append(steps, reloadStep{name: stepEntities,
		do: func() error {
			registryBefore, policyBefore = a.registry.Clone(), a.limits.Policy()
			kafkaBefore = a.metadata.kafka.Held()
			added = a.installPolicy(tx.policy)
			return nil
		},
		undo: func() error {
			if registryBefore == nil {
				return nil
			}
			err := a.unregister(added)
			a.registry.RestoreFrom(registryBefore)
			a.metadata.kafka.Restore(kafkaBefore)
			a.limits.SetPolicy(policyBefore) // parameters cached under the refused policy are stale
			a.identity.learner.SetPolicy(policyBefore)
			a.objectives.EntitiesChanged()
			return err
		}})
	steps = append(steps, reloadStep{name: stepListeners,
		do:   func() error { return dp.SetListeners(next.Listeners) },
		undo: func() error { return dp.SetListeners(old.Listeners) }})
	var settingsBefore *maps.Settings
	steps = append(steps, reloadStep{name: stepSettings,
		do: func() error {
			s, err := dp.ReadSettings()
			if err != nil {
				return err
			}
			settingsBefore = &s
			return a.writeSettings(next, a.dataPathMode(next), a.host.shaper.ifb, a.host.shaper.egressIFB)
		},
		undo: func() error {
			if settingsBefore == nil { // never read, never written
				return nil
			}
			return dp.SetSettings(*settingsBefore)
		}})
	nextDirs := [2]config.Direction{directionConfig(next, entity.Produce), directionConfig(next, entity.Fetch)}
	steps = append(steps, reloadStep{name: stepCapacities,
		do:   func() error { return a.rates.SetCapacities(a.capacities(nextDirs)) },
		undo: func() error { return a.rates.SetCapacities(a.capacities(oldDirs)) }})
	// The peer table and the connections it rebinds (a rebind is undone by
	// the old table's); connections that must be forgotten (no longer on a
	// TLS listener, exemption changed) are forgotten once the reload can
	// no longer be refused: a forgotten connection cannot be put back.
	policyOld := a.limits.Policy()
	steps = append(steps, reloadStep{name: stepPeerEntities,
		do: func() (err error) {
			tx.forget, err = a.applyPeers(next, tx.policy.Policy)
			return err
		},
		undo: func() error {
			_, err := a.applyPeers(old, policyOld)
			return err
		}})
	steps = append(steps, reloadStep{name: stepExemptPeers,
		do: func() (err error) {
			tx.exemptAdded, tx.exemptRemoved, err = dp.SetExemptTable(next.ExemptPeers)
			return err
		},
		undo: func() error {
			_, _, err := dp.SetExemptTable(old.ExemptPeers)
			return err
		}})
	return steps
}

// forgetStale forgets, once the reload is applied, the connections it
// left bound by rules that no longer hold: those of ports no longer TLS and
// those whose peer's exemption changed. The broker's next segment enters
// each again under the new tables. What the data path refuses is tried
// again every cycle.
func (tx *reloadTx) forgetStale() {
	a := tx.a
	a.pending.forget = append(a.pending.forget, tx.forget...)
	if len(tx.exemptAdded) > 0 || len(tx.exemptRemoved) > 0 {
		a.pending.exempt = &exemptChange{added: tx.exemptAdded, removed: tx.exemptRemoved, prefixes: tx.next.ExemptPeers}
	}
	a.forgetPending()
}

// reloadState is what the agent publishes of reloads (NoteReload).
type reloadState struct {
	// last: the verdict on the last reload (nil: none yet).
	last *status.ReloadResult
	// failures counts refused reloads.
	failures uint64
}

// shaperStep replaces the backend: the data path stops steering to the old
// one, the old one is closed (its tree must leave the device before
// another can take it), the new one is built and given every rate in
// force. Its undo closes the new one, builds the old one again and points
// the data path at it.
func (tx *reloadTx) shaperStep() reloadStep {
	a, old, next := tx.a, tx.old, tx.next
	var closedOld, builtNew bool
	// A backend that was not the configuration's (an earlier undo could not
	// rebuild it: nothing was held back) is put back as it was, not rebuilt
	// from the old file: a refused reload leaves the running state exactly
	// as it found it, and says so.
	degraded, reasonBefore := a.specInForce() != specOf(old), a.host.shaper.reason
	return reloadStep{name: stepShaper,
		do: func() error {
			off := tx.settingsBefore
			off.Shaper, off.IFBIndex, off.EgressIFBIndex = maps.ShaperNone, 0, 0
			if err := a.deps.DataPath.SetSettings(off); err != nil {
				return err
			}
			if err := a.rates.Shaper().Close(); err != nil {
				a.log.Warn("closing the previous shaper", "shaper", a.rates.Shaper().Kind(), "err", err)
			}
			closedOld = true
			if err := tx.fault(stepShaperBuild); err != nil {
				return err
			}
			choice, err := a.deps.NewShaper(next)
			if err != nil {
				return err
			}
			a.useShaper(choice)
			builtNew = true
			a.log.Info("shaper switched", "shaper", choice.Shaper.Kind(), "why", choice.Reason)
			return nil
		},
		undo: func() error {
			off := tx.settingsBefore
			off.Shaper, off.IFBIndex, off.EgressIFBIndex = maps.ShaperNone, 0, 0
			if err := a.deps.DataPath.SetSettings(off); err != nil {
				return err
			}
			if builtNew {
				if err := a.rates.Shaper().Close(); err != nil {
					a.log.Warn("closing the refused shaper", "shaper", a.rates.Shaper().Kind(), "err", err)
				}
			}
			if !closedOld {
				return a.deps.DataPath.SetSettings(tx.settingsBefore)
			}
			if degraded {
				a.useShaper(ShaperChoice{Shaper: shaping.Shadow{}, Reason: reasonBefore})
				return a.deps.DataPath.SetSettings(tx.settingsBefore)
			}
			back, err := a.deps.NewShaper(old)
			if err != nil {
				// Nothing holds traffic back now; say so loudly. The data
				// path counts on and the next reload tries again.
				a.useShaper(ShaperChoice{Shaper: shaping.Shadow{}, Reason: "no shaper could be built: " + err.Error()})
				return fmt.Errorf("rebuild the previous shaper: %w", err)
			}
			a.useShaper(back)
			restored := tx.settingsBefore
			restored.IFBIndex, restored.EgressIFBIndex = back.IFBIndex, back.EgressIFBIndex
			return a.deps.DataPath.SetSettings(restored)
		}}
}

// swap is the tail no failure can interrupt: the configuration is in
// force, the metadata client moves.
func (tx *reloadTx) swap() {
	a, next := tx.a, tx.next
	a.cfg = next
	a.rates.SetThreshold(next.UpdateThreshold)
	a.objectives.Sync(next.Entities)
	tx.forgetStale()
	a.registry.SetUnconfiguredBudget(next.MaxUnconfiguredEntities)
	a.identity.newPerPeer.SetRate(next.NewEntitiesPerPeer)
	if md := tx.metadata; md != nil {
		a.metadata.stopTopics()
		a.identity.learner.SetTopics(md.Topics)
		a.metadata.replication.brokers = md.Brokers
		a.metadata.stopTopics = md.stop()
		a.metadata.kafka.ReplaceSource(md.Quotas)
		tx.metadata = nil
		a.log.Info("metadata client rebuilt", "bootstrap", next.Bootstrap, "metadata_refresh", next.MetadataRefresh, "kafka_quotas", next.KafkaQuotas)
	}
}
