package daemon

import (
	"net/netip"

	"github.com/sluice-dev/sluice/agent"
	"github.com/sluice-dev/sluice/agent/status"
)

// versionedStatus is what the status socket answers: the agent's own
// views, with the running binary's version in each snapshot, so that
// `sluice status` and `sluice version` tell which build is running (after
// an upgrade that was not followed by a restart, not the installed one).
// The daemon adds it because the build is the process's, not the agent's
// decision core's.
type versionedStatus struct {
	a       *agent.Agent
	reload  func() (status.ReloadResult, error)
	version string
}

var _ status.Handler = versionedStatus{}

// Snapshot is the agent's last snapshot, copied (the agent shares its
// cached one between readers) with AgentVersion set; nil before the first
// cycle.
func (v versionedStatus) Snapshot() *status.Snapshot {
	s := v.a.Snapshot()
	if s == nil {
		return nil
	}
	c := *s
	c.AgentVersion = v.version
	return &c
}

func (v versionedStatus) Connections(peer netip.Addr) ([]status.ConnectionView, error) {
	return v.a.Connections(peer)
}

// Reload runs the daemon's reloader, the one the agent was given.
func (v versionedStatus) Reload() (status.ReloadResult, error) { return v.reload() }
