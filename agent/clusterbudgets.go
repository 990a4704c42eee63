package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/agent/clusterbudget"
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/maps"
)

// The cluster budgets live in agent/clusterbudget; these are the names the
// daemon and Deps know them by.
type (
	// ClusterLog is the coordination topic (cluster/kafkalog.Log).
	ClusterLog = clusterbudget.Log
	// ClusterLogStats are the transport's counters.
	ClusterLogStats = clusterbudget.LogStats
	// LeaderSource counts the partitions of topics a broker leads.
	LeaderSource = clusterbudget.LeaderSource
	// ClusterLink is what Deps.NewCluster builds.
	ClusterLink = clusterbudget.Link
)

// startClusterBudgets links the agent to the coordination topic and starts
// the core.
func startClusterBudgets(cfg config.Config, deps Deps) (*clusterbudget.Budgets, error) {
	if deps.NewCluster == nil {
		return nil, errors.New("cluster: this agent was built without a Kafka client for the coordination topic")
	}
	link, err := deps.NewCluster(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	adopted := false
	if d, ok := deps.DataPath.(interface{ Adopted() bool }); ok {
		adopted = d.Adopted()
	}
	cb, err := clusterbudget.New(cfg, link, deps.Clock.Monotonic(), adopted, deps.Log)
	if err != nil {
		if link.Stop != nil {
			link.Stop()
		}
		return nil, err
	}
	return cb, nil
}

// ClusterTickInterval is how often the agent reads the coordination topic
// between control cycles. A raise waits until every live broker has
// acknowledged the round, and rounds close about once a period: reading and
// acknowledging only once a cycle, each broker would acknowledge a round
// when the next one has already closed, and only the broker whose report
// closes rounds would ever raise.
const ClusterTickInterval = 100 * time.Millisecond

// ClusterTick reads the coordination topic and runs the cluster budgets'
// core: a share lowered by a new round is written to the shaper at once
// (only down: never above what the control cycle wrote), and then the
// acknowledgement or periodic report is sent. A raise reaches the shaper at
// the next control cycle, through the allocator. Call it every
// ClusterTickInterval; it does nothing without a cluster section.
//
// It returns true when a share rose: the caller runs a control cycle at
// once, so that the raise reaches the shaper now rather than up to a
// refresh interval later (a cycle's rates use the time that passed, so an
// early one is sound).
func (a *Agent) ClusterTick() (raised bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cluster == nil {
		return false
	}
	return a.cluster.Tick(a.deps.Clock.Monotonic(), a.lowerClusterShare)
}

// lowerClusterShare writes a lowered share of budget i as its entity's rate
// at once, if the rate in force is above it.
func (a *Agent) lowerClusterShare(i int, share float64) error {
	b, key, dir := a.cluster.Ref(i)
	id, ok := a.registry.Lookup(key)
	if !ok {
		return nil // no entity, no rate: it gets the share when registered (applyStandby)
	}
	if !a.dirs[dir].cfg.Enabled() {
		return nil
	}
	if err := a.rates.Lower(maps.Direction(dir), uint32(id), share); err != nil {
		return fmt.Errorf("lower %s to %v: %w", b, share, err)
	}
	return nil
}
