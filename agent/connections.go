package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/kafka"
	"github.com/sluice-dev/sluice/agent/learner"
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

// ConnectionView is one connection as `sluice explain ADDRESS` shows it:
// the entity that holds each direction, the rule that put it there, and
// the request and moment that bound it. Read from the data path's table.
type ConnectionView struct {
	Peer     string `json:"peer"`
	Local    string `json:"local"`
	Listener string `json:"listener"` // the listener's security protocol
	// Produce and Fetch are kind:name of each direction's entity.
	Produce string `json:"produce"`
	Fetch   string `json:"fetch"`
	// Rule says why the entity holds it (per direction when they differ).
	Rule string `json:"rule"`
	// BoundBy is the request that decided the binding ("" when none did:
	// a peer address, or an agent that adopted it after a restart).
	BoundBy string `json:"bound_by,omitempty"`
	// Reason is why it was last bound (first, request, login,
	// rule_change, binding_lost, adopted, peer); Since is when.
	Reason  string     `json:"reason,omitempty"`
	Since   *time.Time `json:"since,omitempty"`
	Closing bool       `json:"closing,omitempty"`
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
func (a *Agent) Connections(peer netip.Addr) ([]ConnectionView, error) {
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
	out := make([]ConnectionView, 0, len(found))
	for _, b := range found {
		v := ConnectionView{
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

// serveConnections answers a status socket's "connections" request.
func (a *Agent) serveConnections(w io.Writer, peer string) {
	var addr netip.Addr
	if peer != "" {
		var err error
		if addr, err = netip.ParseAddr(peer); err != nil {
			json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf("peer %q is not an IP address", peer)})
			return
		}
	}
	views, err := a.Connections(addr)
	if err != nil {
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	json.NewEncoder(w).Encode(views)
}

// QueryConnections asks the agent at the socket for the connections from
// peer (the zero Addr: all of them).
func QueryConnections(path string, peer netip.Addr) ([]ConnectionView, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("is the agent running? %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := statusRequest{Cmd: "connections"}
	if peer.IsValid() {
		req.Peer = peer.String()
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return nil, err
	}
	var raw json.RawMessage
	if err := json.NewDecoder(c).Decode(&raw); err != nil {
		return nil, fmt.Errorf("read connections: %w", err)
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		return nil, errors.New(e.Error)
	}
	var views []ConnectionView
	if err := json.Unmarshal(raw, &views); err != nil {
		return nil, fmt.Errorf("decode connections: %w", err)
	}
	return views, nil
}
