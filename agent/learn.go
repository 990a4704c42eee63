package agent

// Learning: a request sample binds its connection to an entity.

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/learner"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/maps"
)

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
		if s, ok := a.clusterShare(key, dc.dir); ok {
			p.Limit, p.Reservation = s.limit, s.reservation
		}
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
