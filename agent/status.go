package agent

import (
	"errors"
	"net"
	"net/netip"

	"github.com/sluice-dev/sluice/agent/status"
)

// ServeStatus answers the status socket's requests until the listener
// closes.
func (a *Agent) ServeStatus(l net.Listener) error { return status.Serve(l, statusHandler{a}) }

// statusHandler is the agent as the status socket sees it.
type statusHandler struct{ a *Agent }

func (h statusHandler) Snapshot() *status.Snapshot { return h.a.Snapshot() }

func (h statusHandler) Connections(peer netip.Addr) ([]status.ConnectionView, error) {
	return h.a.Connections(peer)
}

// Reload runs the reloader the daemon set (SetReloader).
func (h statusHandler) Reload() (status.ReloadResult, error) {
	h.a.mu.Lock()
	f := h.a.reloads.reloader
	h.a.mu.Unlock()
	if f == nil {
		return status.ReloadResult{}, errors.New("this agent reloads on SIGHUP only")
	}
	return f()
}

// SetReloader gives the agent what runs a reload asked for on the status
// socket: the daemon's, which reads the file and serialises the reload
// with SIGHUP and file changes.
func (a *Agent) SetReloader(f func() (status.ReloadResult, error)) {
	a.mu.Lock()
	a.reloads.reloader = f
	a.mu.Unlock()
}
