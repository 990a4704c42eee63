package agent

// The data path as the agent configures it: listeners, exempt peers, the
// TLS listeners' peer table, live settings and capacities.

import (
	"fmt"
	"math"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/maps"
)

// applyDataPathSettings writes listeners, exempt peers and live settings.
func (a *Agent) applyDataPathSettings() error {
	dp := a.deps.DataPath
	if err := dp.SetListeners(a.cfg.Listeners); err != nil {
		return err
	}
	if err := dp.SetExempt(a.cfg.ExemptPeers); err != nil {
		return err
	}
	forget, err := a.applyPeers(a.cfg, a.limits.Policy())
	if err != nil {
		return err
	}
	if err := dp.ForgetConns(forget); err != nil {
		return fmt.Errorf("peer entities: %w", err)
	}
	if err := a.writeSettings(a.cfg, a.dataPathMode(a.cfg), a.host.shaper.ifb, a.host.shaper.egressIFB); err != nil {
		return err
	}
	return a.rates.SetCapacities(a.capacities(a.dirConfigs()))
}

// dataPathMode is what the data path does under cfg with the shaper in use.
func (a *Agent) dataPathMode(cfg config.Config) maps.Shaper {
	if cfg.Mode == config.ModeEnforce {
		return a.rates.Shaper().Kind().DataPathMode()
	}
	return maps.ShaperNone
}

// dirConfigs are both directions' configurations in force.
func (a *Agent) dirConfigs() [2]config.Direction {
	return [2]config.Direction{a.dirs[0].cfg, a.dirs[1].cfg}
}

// capacities are what each direction's governed traffic is capped at in
// the shaper's hierarchy (htb): Σ effective reservations ≤ C and the
// unknown entity's guarantee (at most H) make up at most the capacity, so every
// guarantee can be kept while the rest is lent out up to the ceilings.
// A disabled direction is not capped.
func (a *Agent) capacities(cfgs [2]config.Direction) [2]float64 {
	var c [2]float64
	for d, cfg := range cfgs {
		c[d] = math.Inf(1)
		if cfg.Enabled() {
			c[d] = cfg.Capacity
		}
	}
	return c
}

func (a *Agent) writeSettings(cfg config.Config, mode maps.Shaper, ifb, egressIFB int) error {
	return a.deps.DataPath.SetSettings(maps.Settings{
		Shaper: mode, IFBIndex: ifb, EgressIFBIndex: egressIFB, StaleAfter: cfg.StaleAfter, SamplesPerSecond: cfg.SamplesPerSecond,
		Horizon: cfg.MaxQueueDelay, ECNThreshold: shaping.ECNThreshold(cfg.MaxQueueDelay), PoliceBurst: shaping.DefaultPoliceBurst,
	})
}

// applyPeers writes the TLS listeners' peer table (each TLS listener's
// own entry, then every configured prefix under it) and rebinds the
// listeners' open connections to what the table now says, so that a
// changed table, or one written after connections started, reaches them.
// It returns the connections of ports no longer TLS, which the caller
// forgets: the data path enters them again with request tracking.
func (a *Agent) applyPeers(cfg config.Config, policy *entity.Policy) (forget []maps.ConnKey, err error) {
	tls := cfg.TLSListeners()
	rules := policy.Peers()
	entries := make([]maps.PeerEntity, 0, len(tls)*(len(rules)+1))
	for _, port := range tls {
		id := a.configuredID(entity.ListenerKey(port))
		entries = append(entries, maps.PeerEntity{Port: port, Produce: id, Fetch: id})
		for _, r := range rules {
			id := a.configuredID(r.Key)
			entries = append(entries, maps.PeerEntity{Port: port, Prefix: r.Prefix, Produce: id, Fetch: id})
		}
	}
	if err := a.deps.DataPath.SetPeerEntities(entries); err != nil {
		return nil, fmt.Errorf("peer entities: %w", err)
	}
	if len(tls) == 0 && len(a.identity.tlsPorts) == 0 {
		return nil, nil
	}
	wasTLS := a.identity.tlsPorts
	a.identity.tlsPorts = map[uint16]bool{}
	for _, port := range tls {
		a.identity.tlsPorts[port] = true
	}
	var rebind []maps.Binding
	err = a.deps.DataPath.EachBinding(func(b maps.Binding) {
		port := b.Conn.Local.Port()
		if b.Closing || (b.Produce == maps.NotGoverned && b.Fetch == maps.NotGoverned) {
			return
		}
		if !a.identity.tlsPorts[port] {
			if wasTLS[port] {
				// No longer TLS: the entry was decided by its peer and tracks
				// no requests. Forgotten, the broker's next segment enters it
				// again with request tracking, and the learner decides it.
				forget = append(forget, b.Conn)
			}
			return
		}
		id := a.configuredID(policy.ByPeer(port, b.Conn.Peer.Addr()))
		if b.Produce != id || b.Fetch != id {
			rebind = append(rebind, maps.Binding{Conn: b.Conn, Produce: id, Fetch: id})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("peer entities: %w", err)
	}
	return forget, a.deps.DataPath.BindConns(rebind)
}

// configuredID is a configured (pinned) entity's id; the unknown entity's
// if the registry had no room for it (pinning counted it as overflowed).
func (a *Agent) configuredID(key entity.Key) uint32 {
	if id, ok := a.registry.Lookup(key); ok {
		return uint32(id)
	}
	return maps.EntityUnknown
}
