package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/agent"
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/status"
)

// A reload's lifecycle is the daemon's: when one runs (SIGHUP, the file
// changing, `sluice reload`), reading the file, what the process moves
// with it (the metrics listener, the log level, the loop's ticker) and the
// verdict. The agent applies the configuration to its own state as one
// transaction (agent.Reload) and publishes the verdict it is given.

// stepMetricsListener is the daemon's step, before the agent's: the new
// listener opens beside the old one and replaces it only if the agent
// applies the reload, so a refused reload keeps the address scrapers use.
const stepMetricsListener = "metrics listener"

// ReloadStepNames are a reload's steps in order, the daemon's first; the
// fault-injection build can fail each (faultinject.go).
var ReloadStepNames = append([]string{stepMetricsListener}, agent.ReloadStepNames...)

// reloadTarget is the agent as a reload sees it.
type reloadTarget interface {
	Config() config.Config
	Reload(config.Config) error
	NoteReload(status.ReloadResult)
}

// metricsMover is the process's metrics listener as a reload sees it
// (internal/metricslistener).
type metricsMover interface {
	// PrepareMove opens what next asks for beside the listener in use,
	// when it differs from old: commit makes it the one in use and closes
	// the old, abort closes it; both nil when nothing moves.
	PrepareMove(old, next config.Config) (commit, abort func(), err error)
}

// reloader runs reloads, one at a time (the config watcher's goroutine).
type reloader struct {
	target  reloadTarget
	metrics metricsMover
	level   *slog.LevelVar
	// interval carries a reloaded refresh_interval to the loop's ticker
	// (buffered, one: the latest wins).
	interval chan time.Duration
	// fault, in fault-injection builds, fails the step it names.
	fault func(step string) error
	now   func() time.Time
	log   *slog.Logger
}

func newReloader(target reloadTarget, metrics metricsMover, level *slog.LevelVar, fault func(string) error, log *slog.Logger) *reloader {
	return &reloader{target: target, metrics: metrics, level: level, interval: make(chan time.Duration, 1), fault: fault, now: time.Now, log: log}
}

// run applies next (read from the file, or loadErr if it could not be) or
// refuses it whole, and returns the verdict the agent now publishes.
func (r *reloader) run(why string, next config.Config, loadErr error) status.ReloadResult {
	err := r.apply(next, loadErr)
	res := status.ReloadResult{At: r.now(), Why: why, Applied: err == nil, PartlyApplied: errors.Is(err, agent.ErrUndoFailed)}
	if err != nil {
		res.Error = err.Error()
		r.log.Error("configuration reload refused; the running configuration stays", "err", err)
	}
	r.target.NoteReload(res)
	return res
}

func (r *reloader) apply(next config.Config, loadErr error) error {
	if loadErr != nil {
		return fmt.Errorf("%w; nothing changed", loadErr)
	}
	old := r.target.Config()
	if err := r.faultAt(stepMetricsListener); err != nil {
		return fmt.Errorf("%w; nothing changed", err)
	}
	commit, abort, err := r.metrics.PrepareMove(old, next)
	if err != nil {
		return fmt.Errorf("%s: %w; nothing changed", stepMetricsListener, err)
	}
	if err := r.target.Reload(next); err != nil {
		if abort != nil {
			abort()
		}
		return err
	}
	// Applied: what cannot fail follows.
	if commit != nil {
		commit()
		r.log.Info("metrics listener reopened", "metrics_address", next.MetricsAddress, "web_config_file", next.Metrics.WebConfigFile)
	}
	if r.level != nil {
		r.level.Set(next.LogLevel)
	}
	if next.RefreshInterval != old.RefreshInterval {
		select { // the latest interval wins; the loop resets its ticker
		case <-r.interval:
		default:
		}
		r.interval <- next.RefreshInterval
	}
	return nil
}

func (r *reloader) faultAt(step string) error {
	if r.fault == nil {
		return nil
	}
	if err := r.fault(step); err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	return nil
}
