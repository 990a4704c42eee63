package agent

import (
	"net/netip"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/maps"
)

// Data-path writes the agent tolerates failing and retries every cycle, so
// that a reload or a refused write is completed later, never lost.

// pendingWrites are writes the data path refused that the agent tolerates
// and tries again every cycle (retryPending).
type pendingWrites struct {
	// forget: connections an applied reload must forget (their exemption
	// or listener changed).
	forget []maps.ConnKey
	// exempt: an applied exempt_peers change whose connections could not
	// be listed yet (nil: none).
	exempt *exemptChange
	// unsaved: entities whose names the data path refused to persist: a
	// name not persisted is an identity the next start cannot restore.
	unsaved map[entity.ID]struct{}
}

// exemptChange is what an exempt_peers change added to and removed from
// the table, and the table it made.
type exemptChange struct{ added, removed, prefixes []netip.Prefix }

// retryPending writes again, each cycle, what earlier writes left undone
// and the agent tolerated: connections to forget, entity names to persist.
func (a *Agent) retryPending() {
	a.forgetPending()
	a.persistUnsaved()
}

// forgetPending forgets the connections an applied reload left to forget;
// what fails stays pending for the next cycle.
func (a *Agent) forgetPending() {
	if c := a.pending.exempt; c != nil {
		var stale []maps.ConnKey
		err := a.deps.DataPath.EachBinding(func(b maps.Binding) {
			if maps.ExemptionChanged(b, c.added, c.removed, c.prefixes) {
				stale = append(stale, b.Conn)
			}
		})
		if err != nil {
			a.log.Warn("list the connections exempt_peers changed; tried again next cycle", "err", err)
		} else {
			a.pending.forget, a.pending.exempt = append(a.pending.forget, stale...), nil
		}
	}
	if len(a.pending.forget) == 0 {
		return
	}
	if err := a.deps.DataPath.ForgetConns(a.pending.forget); err != nil {
		a.log.Warn("forget connections a reload changed; tried again next cycle", "connections", len(a.pending.forget), "err", err)
		return
	}
	a.pending.forget = nil
}
