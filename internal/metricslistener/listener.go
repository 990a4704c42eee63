// Package metricslistener is the process's metrics listener: the daemon
// opens it at start and closes it at exit; a reload moves it when
// metrics_address or metrics.web_config_file change, opening the new one
// beside the one in use so that a refused reload keeps the address
// scrapers use (the daemon's reload sees it as a metricsMover).
package metricslistener

import (
	"fmt"
	"sync"

	"github.com/sluice-dev/sluice/agent/config"
)

// Opener starts serving metrics on an address, with an exporter-toolkit
// web configuration ("" for plain HTTP); stop ends it.
type Opener func(addr, webConfigFile string) (stop func(), err error)

// Listener is the metrics listener of a process. The new listener of a
// move opens beside the one in use and takes over only if the whole
// reload is applied.
type Listener struct {
	open Opener
	mu   sync.Mutex
	stop func() // nil: closed
}

// New is a listener that serves through open.
func New(open Opener) *Listener {
	return &Listener{open: open}
}

// Open serves metrics where cfg says.
func (l *Listener) Open(cfg config.Config) error {
	stop, err := l.open(cfg.MetricsAddress, cfg.Metrics.WebConfigFile)
	if err != nil {
		return fmt.Errorf("metrics_address: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stop = stop
	return nil
}

// Close stops serving (a closed listener stays closed).
func (l *Listener) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop != nil {
		l.stop()
		l.stop = nil
	}
}

// PrepareMove opens what next asks for beside the listener in use when it
// differs from old: commit makes the new one the one in use and closes the
// old; abort closes the new one, and the old serves on. Both are nil when
// nothing moves.
func (l *Listener) PrepareMove(old, next config.Config) (commit, abort func(), err error) {
	if next.MetricsAddress == old.MetricsAddress && next.Metrics.WebConfigFile == old.Metrics.WebConfigFile {
		return nil, nil, nil
	}
	stop, err := l.open(next.MetricsAddress, next.Metrics.WebConfigFile)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics_address, metrics.web_config_file: %w", err)
	}
	commit = func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.stop != nil {
			l.stop()
		}
		l.stop = stop
	}
	return commit, stop, nil
}
