package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/kafka"
	"github.com/sluice-dev/sluice/agent/learner"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
)

// bindRecord is what the agent remembers of a connection's last binding:
// when, why, and the request that decided it. It lives as long as the
// learner's state of the connection (scanConnections frees both).
type bindRecord struct {
	at     time.Time
	reason string // first, request, login, rule_change, binding_lost, adopted, peer
	api    int16  // the request that decided it (-1: none, a peer decided)
}

// noteBinding records a binding Learn wrote (under a.mu).
func (a *Agent) noteBinding(c maps.ConnKey, reason string, api int16) {
	a.bindLog[c] = bindRecord{at: a.deps.Clock.Now(), reason: reason, api: api}
}

// bindReason is the reason noteBinding keeps for a binding Learn writes:
// a rebind's, or first for a connection's first entity.
func bindReason(rebind string, cause learner.Cause, adopted bool) string {
	switch {
	case rebind != "":
		return rebind
	case adopted:
		return "adopted"
	case cause == learner.CauseLogin:
		return "login"
	}
	return "first"
}

// Connections lists the data path's connections from peer (every
// connection when peer is the zero Addr), with the entities that hold
// them and why. The table is read first, then the agent's records.
func (a *Agent) Connections(peer netip.Addr) ([]status.ConnectionView, error) {
	var found []maps.Binding
	err := a.deps.DataPath.EachBinding(func(b maps.Binding) {
		if !peer.IsValid() || b.Conn.Peer.Addr().Unmap() == peer.Unmap() {
			found = append(found, b)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("read connections: %w", err)
	}
	slices.SortFunc(found, func(x, y maps.Binding) int { return x.Conn.Peer.Compare(y.Conn.Peer) })
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]status.ConnectionView, 0, len(found))
	for _, b := range found {
		v := status.ConnectionView{
			Peer: b.Conn.Peer.String(), Local: b.Conn.Local.String(),
			Listener: a.cfg.Protocol(b.Conn.Local.Port()),
			Produce:  a.entityName(b.Produce), Fetch: a.entityName(b.Fetch), Closing: b.Closing,
		}
		v.Rule = a.rule(b.Produce)
		if b.Fetch != b.Produce {
			v.Rule = "produce: " + v.Rule + "; fetch: " + a.rule(b.Fetch)
		}
		if r, ok := a.bindLog[b.Conn]; ok {
			at := r.at
			v.Since, v.Reason = &at, r.reason
			if r.api >= 0 {
				v.BoundBy = kafka.APIName(r.api)
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// entityName is an entity id's kind:name as status shows it.
func (a *Agent) entityName(id uint32) string {
	switch id {
	case maps.NotGoverned:
		return "exempt"
	case maps.EntityUnknown:
		return "unknown"
	}
	if k, ok := a.registry.Key(entity.ID(id)); ok {
		return k.String()
	}
	return fmt.Sprintf("id:%d", id)
}

// rule says in words why an entity holds a connection.
func (a *Agent) rule(id uint32) string {
	switch id {
	case maps.NotGoverned:
		return "exempt peer (exempt_peers): never governed"
	case maps.EntityUnknown:
		return "not known yet: no request has decided it (held with the unknown entity to the headroom H)"
	case uint32(entity.OverflowID):
		return "overflow: the registry or new_entities_per_peer was full when it was decided"
	}
	k, ok := a.registry.Key(entity.ID(id))
	if !ok {
		return "an entity this agent does not know"
	}
	switch k.Kind {
	case entity.KindTopicPartition:
		return "configured topic-partition " + k.Name + " (first configured partition of its requests or fetch session)"
	case entity.KindUser:
		return "SASL principal " + k.Name + " (users." + k.Name + ")"
	case entity.KindUserClient:
		return "<user, client-id> level " + k.Name
	case entity.KindClientPattern:
		return "client-id matches the pattern " + k.Name
	case entity.KindClient:
		if a.registry.Pinned(entity.ID(id)) {
			return "configured client-id " + k.Name
		}
		return "client-id " + k.Name + " (clients <default>)"
	case entity.KindPeer:
		return "peer prefix " + k.Name + " (TLS listener: the peer address decides)"
	case entity.KindListener:
		return "TLS listener " + k.Name + " (no peer prefix holds the address)"
	case entity.KindUnresolved:
		return "unresolved: its sample could not tell (a client-id too long to sample whole, or topics hidden behind client-chosen fields); held to the most restrictive limits configured"
	}
	return k.String()
}
