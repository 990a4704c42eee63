package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/agent/learner"
	"github.com/sluice-dev/sluice/internal/addr"
)

// BrokerSource lists the cluster's brokers (the metadata client's view).
type BrokerSource interface {
	Brokers() []learner.Broker
}

// unexemptBrokers names the cluster's brokers, other than this host's,
// whose addresses exempt_peers does not cover: their replication fetches
// from this broker are governed like any client's, which is never what an
// operator wants. A broker whose host did not resolve is named too: its
// replication cannot be known to be exempt.
func unexemptBrokers(brokers []learner.Broker, exempt []netip.Prefix) []string {
	var out []string
	for _, b := range brokers {
		if b.Local {
			continue
		}
		covered := len(b.Addrs) > 0
		for _, a := range b.Addrs {
			covered = covered && addr.AnyHolds(exempt, a)
		}
		if covered {
			continue
		}
		addrs := make([]string, len(b.Addrs))
		for i, a := range b.Addrs {
			addrs[i] = a.String()
		}
		where := strings.Join(addrs, ",")
		if where == "" {
			where = "unresolved"
		}
		out = append(out, fmt.Sprintf("broker %d %s:%d (%s)", b.ID, b.Host, b.Port, where))
	}
	slices.Sort(out)
	return out
}

// replicationCheck is the cluster's brokers (nil: no metadata client) and
// those exempt_peers misses.
type replicationCheck struct {
	brokers  BrokerSource
	unexempt []string
}

// checkReplication notes, once per change, the brokers exempt_peers
// misses (under a.mu).
func (a *Agent) checkReplication() {
	if a.metadata.replication.brokers == nil {
		return
	}
	now := unexemptBrokers(a.metadata.replication.brokers.Brokers(), a.cfg.ExemptPeers)
	if slices.Equal(now, a.metadata.replication.unexempt) {
		return
	}
	a.metadata.replication.unexempt = now
	if len(now) > 0 {
		a.log.Warn("brokers of the cluster outside exempt_peers: their replication from this broker is governed like a client's; add them to exempt_peers", "brokers", now)
	}
}

// UnexemptBrokers is the last check's list (checkReplication).
func (a *Agent) UnexemptBrokers() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.metadata.replication.unexempt
}
