package agent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

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
	f := h.a.reloader
	h.a.mu.Unlock()
	if f == nil {
		return status.ReloadResult{}, errors.New("this agent reloads on SIGHUP only")
	}
	return f()
}

// NotifyReady tells systemd (Type=notify) the agent is ready, when run
// under it ($NOTIFY_SOCKET), and writes readyFile when given.
func NotifyReady(readyFile string) error {
	if readyFile != "" {
		if err := os.WriteFile(readyFile, []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("ready file: %w", err)
		}
	}
	return sdNotify("READY=1")
}

// NotifyWatchdog tells systemd's watchdog that a cycle succeeded (a no-op
// outside systemd).
func NotifyWatchdog() { sdNotify("WATCHDOG=1") }

// NotifyStopping tells systemd the agent is stopping.
func NotifyStopping() error { return sdNotify("STOPPING=1") }

func sdNotify(state string) error {
	socket := os.Getenv("NOTIFY_SOCKET")
	if socket == "" {
		return nil
	}
	addr := &net.UnixAddr{Name: socket, Net: "unixgram"}
	if socket[0] == '@' {
		addr.Name = "\x00" + socket[1:]
	}
	c, err := net.DialUnix("unixgram", nil, addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}

// SetReloader gives the agent what runs a reload asked for on the status
// socket: the daemon's, which reads the file and serialises the reload
// with SIGHUP and file changes.
func (a *Agent) SetReloader(f func() (status.ReloadResult, error)) {
	a.mu.Lock()
	a.reloader = f
	a.mu.Unlock()
}
