package agent

import (
	"fmt"
	"sync"

	"github.com/sluice-dev/sluice/agent/config"
)

// MetricsOpener starts serving metrics on an address, with an
// exporter-toolkit web configuration ("" for plain HTTP); stop ends it.
type MetricsOpener func(addr, webConfigFile string) (stop func(), err error)

// MetricsListener is the metrics listener of a process: the daemon opens
// it at start and closes it at exit; the agent only moves it when a
// reload changes metrics_address or metrics.web_config_file. The new
// listener opens beside the one in use and takes over only if the whole
// reload is applied, so a refused reload keeps the address scrapers use.
type MetricsListener struct {
	open MetricsOpener
	mu   sync.Mutex
	stop func() // nil: closed
}

// NewMetricsListener is a listener that serves through open.
func NewMetricsListener(open MetricsOpener) *MetricsListener {
	return &MetricsListener{open: open}
}

// Open serves metrics where cfg says.
func (l *MetricsListener) Open(cfg config.Config) error {
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
func (l *MetricsListener) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop != nil {
		l.stop()
		l.stop = nil
	}
}

// metricsMove is a listener opened beside the one in use for a reload.
type metricsMove struct {
	l    *MetricsListener
	stop func()
}

// prepareMove opens what next asks for when it differs from old (nil:
// nothing to move).
func (l *MetricsListener) prepareMove(old, next config.Config) (*metricsMove, error) {
	if next.MetricsAddress == old.MetricsAddress && next.Metrics.WebConfigFile == old.Metrics.WebConfigFile {
		return nil, nil
	}
	stop, err := l.open(next.MetricsAddress, next.Metrics.WebConfigFile)
	if err != nil {
		return nil, fmt.Errorf("metrics_address, metrics.web_config_file: %w", err)
	}
	return &metricsMove{l: l, stop: stop}, nil
}

// commit makes the new listener the one in use and closes the old.
func (m *metricsMove) commit() {
	m.l.mu.Lock()
	defer m.l.mu.Unlock()
	if m.l.stop != nil {
		m.l.stop()
	}
	m.l.stop = m.stop
}

// abort closes the new listener; the old one serves on.
func (m *metricsMove) abort() { m.stop() }
