package agent

import (
	"errors"
	"net"
	"net/netip"

	"github.com/sluice-dev/sluice/agent/status"
)

// ServeStatus answers the status socket's requests until the listener
// closes; reload runs a reload asked for there (the daemon's, which reads
// the file and serialises the reload with SIGHUP and file changes; nil:
// this agent reloads on SIGHUP only).
func (a *Agent) ServeStatus(l net.Listener, reload func() (status.ReloadResult, error)) error {
	return status.Serve(l, statusHandler{a: a, reload: reload})
}

// statusHandler is the agent as the status socket sees it.
type statusHandler struct {
	a      *Agent
	reload func() (status.ReloadResult, error)
}

func (h statusHandler) Snapshot() *status.Snapshot { return h.a.Snapshot() }

func (h statusHandler) Connections(peer netip.Addr) ([]status.ConnectionView, error) {
	return h.a.Connections(peer)
}

func (h statusHandler) Reload() (status.ReloadResult, error) {
	if h.reload == nil {
		return status.ReloadResult{}, errors.New("this agent reloads on SIGHUP only")
	}
	return h.reload()
}
