package agent

// Learning: a request sample binds its connection to an entity.

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/learner"
	"github.com/sluice-dev/sluice/maps"
)

// Learn takes one request sample: the learner resolves the connection's
// entities, new entities get their standby limit at once, and the data path
// binds the connection. A direction the learner has not decided keeps the
// entity the connection is bound to; bound to none yet, it is held to the
// unresolved entity (docs/identity.md: a connection not yet decided). A
// sample that cannot be parsed decides nothing: it returns the parser's
// error once the connection is bound by that rule.
func (a *Agent) Learn(s maps.Sample) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.identity.tlsPorts[s.Conn.Local.Port()] {
		// Encrypted bytes (a connection the data path tracked before its
		// listener's peer table was written): its peer decides, not this.
		return nil
	}
	if s.Bound == [2]uint32{maps.NotGoverned, maps.NotGoverned} {
		return nil // an exempt peer's (the data path decided it): never governed
	}
	adopted := false
	if !a.identity.learner.Known(s.Conn, s.Born) {
		adopted = a.adopt(s)
	}
	decision, changed, err := a.identity.learner.LearnSample(s.Conn, s.Born, learner.Sample{
		Data: s.Data, Whole: s.Complete, ClientIDCut: s.ClientIDCut, ClientIDHash: s.ClientIDHash, ClientIDHashed: s.ClientIDHashed})
	now := a.deps.Clock.Now()
	var ids [2]uint32
	var unresolved uint32 // its id, once looked up
	for _, d := range entity.Directions {
		t, decided := decision.Target(d)
		switch {
		case !decided && holdsEntity(s.Bound[d]):
			// Not known yet: "I do not know" never moves a connection.
			ids[d] = s.Bound[d]
		case !decided:
			// Bound to nothing yet (the unknown entity): a connection is
			// never left with unknown for want of a decision.
			if unresolved == 0 {
				unresolved = a.entityID(entity.UnresolvedKey, s.Conn.Peer.Addr(), now)
			}
			ids[d] = unresolved
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
		return err
	}
	if !changed {
		// The entry lost its binding (evicted, or entered again after a
		// reset), or was bound to nothing: bind it now, not when the
		// decision next changes.
		a.identity.conns.Rebound++
	}
	reason := rebindReason(s.Bound, ids, changed, a.identity.learner.Cause())
	if reason != "" {
		a.identity.conns.Rebinds[reason]++
		a.log.Debug("connection rebound", "conn", s.Conn.String(), "reason", reason,
			"from", fmt.Sprint(s.Bound), "to", fmt.Sprint(ids))
	}
	if berr := a.deps.DataPath.BindConns([]maps.Binding{{Conn: s.Conn, Produce: ids[entity.Produce], Fetch: ids[entity.Fetch]}}); berr != nil {
		return berr
	}
	a.noteBinding(s.Conn, bindReason(reason, a.identity.learner.Cause(), adopted), a.identity.learner.LastAPI())
	return err
}

// holdsEntity tells whether a connection bound to id is bound to an entity
// a decision made (or an earlier agent's, or the registry's overflow when
// it was full), as opposed to none yet: the unknown entity, or a direction
// no entity governs.
func holdsEntity(id uint32) bool {
	return id != maps.EntityUnknown && id != maps.NotGoverned
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
// entered the connection again): the identity saved beside its binding
// (or the mechanism of a login under way),
// and the binding itself as the decision, so that a request that decides
// nothing leaves the connection where it is. A connection the data path
// saw open anew (SYN-ACK) has neither: its entry and its identity went
// with the old connection.
func (a *Agent) adopt(s maps.Sample) bool {
	var id learner.Identity
	if a.identity.idents != nil {
		saved, ok, err := a.identity.idents.Identity(s.Conn)
		if err != nil {
			a.identity.conns.IdentityErrors++
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
	a.identity.learner.Adopt(s.Conn, s.Born, id, bound)
	return true
}

// boundKey is the entity a connection is bound to, if it is a registered
// one that a decision names (not unknown, overflow or not governed, nor
// unresolved: that holds a connection no request could tell, and the next
// request that can must still decide it).
func (a *Agent) boundKey(id uint32) (entity.Key, bool) {
	if id == maps.EntityUnknown || id == maps.NotGoverned || id == uint32(entity.OverflowID) {
		return entity.Key{}, false
	}
	k, ok := a.registry.Key(entity.ID(id))
	return k, ok && k.Kind != entity.KindUnresolved
}

// saveIdentity persists a principal a connection proved, or the mechanism
// of a login under way (the learner's OnLogin, under a.mu): a restart
// between the SaslHandshake and the SaslAuthenticate still reads the login,
// which cannot be read without its mechanism.
func (a *Agent) saveIdentity(c maps.ConnKey, id learner.Identity) {
	if err := a.identity.idents.SaveIdentity(c, maps.Identity{Mechanism: id.Mechanism, User: id.User}); err != nil {
		a.identity.conns.IdentityErrors++
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
	if key.Kind == entity.KindUnresolved {
		id := a.registry.Acquire(key, now) // registered as if configured
		if id != entity.OverflowID {
			a.registered(uint32(id), key)
		}
		return uint32(id)
	}
	// A new entity nobody configured (configured ones are pinned).
	if !a.identity.newPerPeer.Allow(peer, now) {
		return uint32(entity.OverflowID)
	}
	a.keepRoomForUnresolved(now)
	id := a.registry.Acquire(key, now)
	if id != entity.OverflowID {
		a.registered(uint32(id), key)
	}
	return uint32(id)
}

// keepRoomForUnresolved registers the unresolved entity before a new one
// would take the registry's last id or the unconfigured budget's last one:
// held to the most restrictive limits, it must never be refused for room
// and go to the overflow entity (unlimited by default). It counts against
// the unconfigured budget, so a reload that fills the configured
// entities' room (max_entities less the budget) leaves its id alone.
// Otherwise it is registered on first use, so an agent that never needs it
// shows no series for it.
func (a *Agent) keepRoomForUnresolved(now time.Time) {
	dynamic := a.registry.Limit() - int(entity.OverflowID) - 1 // the ids past unknown and overflow
	if _, ok := a.registry.Lookup(entity.UnresolvedKey); ok ||
		(a.registry.Len()+1 < dynamic && a.registry.Unconfigured()+1 < a.registry.UnconfiguredBudget()) {
		return
	}
	if id := a.registry.Acquire(entity.UnresolvedKey, now); id != entity.OverflowID {
		a.registered(uint32(id), entity.UnresolvedKey)
	}
}
