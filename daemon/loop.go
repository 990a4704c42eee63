package daemon

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/agent"
	"github.com/sluice-dev/sluice/maps"
)

// runAgent cycles the agent every refresh interval and learns from samples until ctx
// ends. ready is called after the first successful cycle; intervals carries
// each refresh_interval a reload applies.
func runAgent(ctx context.Context, a *agent.Agent, samples agent.Samples, latencies agent.LatencyEvents, intervals <-chan time.Duration, ready func(), log *slog.Logger) error {
	learned := make(chan error, 1)
	if samples != nil {
		go func() { learned <- learnLoop(a, samples, log) }()
		defer func() { samples.Close(); <-learned }()
	}
	if latencies != nil {
		measured := make(chan struct{})
		go func() { defer close(measured); latencyLoop(a, latencies, log) }()
		defer func() { latencies.Close(); <-measured }()
	}
	if err := a.Cycle(); err != nil {
		return err
	}
	if ready != nil {
		ready()
	}
	interval := a.Config().RefreshInterval
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	// The cluster budgets read their topic between cycles (a nil channel
	// without a cluster section: a cluster change needs a restart).
	var clusterTicks <-chan time.Time
	if a.Config().Cluster.Enabled {
		t := time.NewTicker(agent.ClusterTickInterval)
		defer t.Stop()
		clusterTicks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-clusterTicks:
			if a.ClusterTick() {
				// A share rose: it reaches the shaper now, through the
				// allocator, not at the next tick.
				if err := a.Cycle(); err != nil {
					log.Error("control cycle failed", "err", err)
				}
			}
		case d := <-intervals:
			ticker.Reset(d)
		case err := <-learned:
			if err != nil {
				return err
			}
			learned = nil
		case <-ticker.C:
			if err := a.Cycle(); err != nil {
				// A failed cycle is logged and retried; the data path fails
				// open by itself if the heartbeat stops, and systemd's
				// watchdog (WatchdogSec) restarts an agent that stays wedged.
				log.Error("control cycle failed", "err", err)
				continue
			}
			NotifyWatchdog()
		}
	}
}

func learnLoop(a *agent.Agent, samples agent.Samples, log *slog.Logger) error {
	for {
		s, err := samples.Read()
		if errors.Is(err, maps.ErrClosed) {
			return nil
		}
		if err != nil {
			log.Warn("read sample", "err", err)
			continue
		}
		if err := a.Learn(s); err != nil {
			log.Debug("sample not learned; the connection keeps its entity", "conn", s.Conn.String(), "err", err)
		}
	}
}

// latencyLoop hands the data path's latency measurements to the agent
// until the reader is closed.
func latencyLoop(a *agent.Agent, latencies agent.LatencyEvents, log *slog.Logger) {
	for {
		ev, err := latencies.Read()
		if errors.Is(err, maps.ErrClosed) {
			return
		}
		if err != nil {
			log.Warn("read latency measurement", "err", err)
			continue
		}
		a.ObserveLatency(ev)
	}
}
