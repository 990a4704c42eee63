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
	reason string // first, request, login, rule_change, binding_lost, adopted, peer, unsampled
	api    int16  // the request that decided it (-1: none, a peer decided)
	// unbound: the connection (born) was bound to no entity when a scan
	// found it at time at (holdUnbound); no binding was written yet.
	unbound bool
	born    uint64
}

// unsampledGrace is how long a connection may stay bound to no entity
// (charged to unknown, at the strictest limit in force) before a scan holds it to the
// unresolved entity. The data path samples a connection's first requests
// whenever their headers are plausible, and the agent binds it at its
// first sample, within a poll; one that is still unbound a scan later
// sent nothing the data path could read as a request (garbage, a protocol
// that is not Kafka, TLS on a plaintext listener) or nothing at all. With
// scans every bindingsScanEvery (10 s), such a connection is held at most
// unsampledGrace plus one scan interval (20 s) after the broker accepted it.
const unsampledGrace = 10 * time.Second

// holdUnsampled binds to the unresolved entity each connection in unbound
// (the live entries a scan found bound to no entity) that an earlier scan,
// at least unsampledGrace before now, found unbound too, so no client can
// stay with unknown by sending nothing a request could be read from.
// Each such connection counts once in the learner's Stats.Unresolved, and
// its bytes in the unresolved entity's (alert SluiceUnresolvedTraffic). A
// request read later still moves it to its entity. A failed write is
// logged and tried again at the next scan. Called by the scan under a.mu,
// after it pruned bindLog to the live connections.
func (a *Agent) holdUnsampled(unbound []maps.Binding, now time.Time) {
	var held []maps.Binding
	var id uint32
	for _, b := range unbound {
		r, seen := a.identity.bindLog[b.Conn]
		switch {
		case !seen || !r.unbound || r.born != b.Born:
			// First seen unbound (or a new connection on the 4-tuple, or a
			// record of a binding the data path no longer holds).
			a.identity.bindLog[b.Conn] = bindRecord{at: now, reason: "unsampled", api: -1, unbound: true, born: b.Born}
		case now.Sub(r.at) >= unsampledGrace:
			if id == 0 {
				id = a.entityID(entity.UnresolvedKey, b.Conn.Peer.Addr(), now)
			}
			held = append(held, maps.Binding{Conn: b.Conn, Produce: id, Fetch: id})
		}
	}
	if len(held) == 0 {
		return
	}
	if err := a.deps.DataPath.BindConns(held); err != nil {
		a.log.Warn("hold unsampled connections to the unresolved entity", "connections", len(held), "err", err)
		return
	}
	for _, b := range held {
		a.noteBinding(b.Conn, "unsampled", -1)
	}
	a.identity.learner.Stats.Unresolved += uint64(len(held))
	a.log.Info("connections held to the unresolved entity: nothing they sent could be read as a request",
		"connections", len(held), "grace", unsampledGrace)
}

// noteBinding records a binding Learn wrote (under a.mu).
func (a *Agent) noteBinding(c maps.ConnKey, reason string, api int16) {
	a.identity.bindLog[c] = bindRecord{at: a.deps.Clock.Now(), reason: reason, api: api}
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
		if r, ok := a.identity.bindLog[b.Conn]; ok && !r.unbound {
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
		return "not known yet: no request has decided it (held with the unknown entity to the strictest limit in force)"
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
		return "unresolved: no request of it has told (before a SASL login, a sample that could not tell, or nothing it sent could be read as a request); held to the most restrictive limits configured"
	}
	return k.String()
}

// identityGrace: how long a saved identity outlives its connection's last
// entry in the table. A live connection that sends or receives anything is
// entered again at once (and adopts its identity), and Kafka closes a
// connection idle for connections.max.idle.ms (10 minutes by default), so
// an identity unseen this long belongs to a connection whose end (FIN or
// RST) the data path missed: an evicted entry, or one lost over a restart.
// Without this the identity table fills with the dead and then refuses
// the living.
const identityGrace = 15 * time.Minute

// identitiesReadEvery: how often the store of identities is listed (a map
// of up to max_connections entries, read under the agent's lock): often
// enough that a connection counts as gone only after about fifteen looks
// that all missed it, far less often than the 10 s connection scan.
const identitiesReadEvery = time.Minute

// reclaimIdentities drops the saved identities of connections absent from
// the table (live) for identityGrace.
func (a *Agent) reclaimIdentities(live map[maps.ConnKey]struct{}, now time.Time) {
	st := &a.identity
	if st.idents == nil || !st.identitiesRead.IsZero() && now.Sub(st.identitiesRead) < identitiesReadEvery {
		return
	}
	st.identitiesRead = now
	var stale []maps.ConnKey
	seen := make(map[maps.ConnKey]struct{}, len(st.unseen))
	err := st.idents.EachIdentity(func(c maps.ConnKey) {
		if _, ok := live[c]; ok {
			return
		}
		seen[c] = struct{}{}
		since, ok := st.unseen[c]
		switch {
		case !ok:
			if st.unseen == nil {
				st.unseen = map[maps.ConnKey]time.Time{}
			}
			st.unseen[c] = now
		case now.Sub(since) >= identityGrace:
			stale = append(stale, c)
		}
	})
	if err != nil {
		st.conns.IdentityErrors++
		a.log.Warn("list saved identities", "err", err)
		return
	}
	for c := range st.unseen { // back in the table, or gone from the store
		if _, ok := seen[c]; !ok {
			delete(st.unseen, c)
		}
	}
	if len(stale) == 0 {
		return
	}
	if err := st.idents.ForgetIdentities(stale); err != nil {
		st.conns.IdentityErrors++
		a.log.Warn("reclaim identities of connections whose end was missed", "connections", len(stale), "err", err)
		return
	}
	for _, c := range stale {
		delete(st.unseen, c)
	}
	st.conns.IdentitiesReclaimed += uint64(len(stale))
	a.log.Info("identities reclaimed: their connections had no entry for the grace", "connections", len(stale), "grace", identityGrace)
}
