package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// ErrSocketTaken: something that is not sluice's stale socket holds the
// status socket's path.
var ErrSocketTaken = errors.New("socket path taken")

// ListenStatus opens the unix socket `sluice status` and `sluice explain`
// talk to, readable and writable by root only. A stale socket from an
// earlier agent (one nobody listens on) is replaced; anything else at the
// path — a file, a directory, a live socket of another process — is left
// and refused.
func ListenStatus(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("status socket directory: %w", err)
	}
	switch st, err := os.Lstat(path); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("status socket %s: %w", path, err)
	case st.Mode()&os.ModeSocket == 0:
		return nil, fmt.Errorf("%w: %s: something that is not a socket is there (%v); sluice replaces only a stale socket of its own", ErrSocketTaken, path, st.Mode().Type())
	default:
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%w: %s: a process listens on it (another agent?); sluice replaces only a stale socket", ErrSocketTaken, path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale status socket: %w", err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("status socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("status socket permissions: %w", err)
	}
	return l, nil
}

// statusRequest is one line of JSON from a client.
type statusRequest struct {
	Cmd string `json:"cmd"` // "snapshot", "connections" or "reload"
	// Peer filters "connections" to one client address ("": all).
	Peer string `json:"peer,omitempty"`
}

// ServeStatus answers snapshot requests until the listener closes.
func (a *Agent) ServeStatus(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			var req statusRequest
			if err := json.NewDecoder(c).Decode(&req); err != nil || (req.Cmd != "snapshot" && req.Cmd != "connections" && req.Cmd != "reload") {
				json.NewEncoder(c).Encode(map[string]string{"error": "unknown request; send {\"cmd\":\"snapshot\"}, {\"cmd\":\"reload\"} or {\"cmd\":\"connections\",\"peer\":\"ADDRESS\"}"})
				return
			}
			switch req.Cmd {
			case "connections":
				a.serveConnections(c, req.Peer)
				return
			case "reload":
				c.SetDeadline(time.Now().Add(reloadTimeout))
				a.serveReload(c)
				return
			}
			s := a.Snapshot()
			if s == nil {
				json.NewEncoder(c).Encode(map[string]string{"error": "no cycle has run yet"})
				return
			}
			json.NewEncoder(c).Encode(s)
		}()
	}
}

// QueryStatus asks the agent at the socket for its last snapshot.
func QueryStatus(path string) (*Snapshot, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("is the agent running? %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := json.NewEncoder(c).Encode(statusRequest{Cmd: "snapshot"}); err != nil {
		return nil, err
	}
	var raw json.RawMessage
	if err := json.NewDecoder(c).Decode(&raw); err != nil {
		return nil, fmt.Errorf("read status: %w", err)
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		return nil, errors.New(e.Error)
	}
	var s Snapshot
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("decode status: %w", err)
	}
	return &s, nil
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

// reloadTimeout bounds a reload asked for on the status socket: building a
// new metadata client or shaper takes seconds at most.
const reloadTimeout = 60 * time.Second

// SetReloader gives the agent what runs a reload asked for on the status
// socket: the daemon's, which reads the file and serialises the reload
// with SIGHUP and file changes.
func (a *Agent) SetReloader(f func() (ReloadResult, error)) {
	a.mu.Lock()
	a.reloader = f
	a.mu.Unlock()
}

func (a *Agent) serveReload(c net.Conn) {
	a.mu.Lock()
	f := a.reloader
	a.mu.Unlock()
	if f == nil {
		json.NewEncoder(c).Encode(map[string]string{"error": "this agent reloads on SIGHUP only"})
		return
	}
	r, err := f()
	if err != nil {
		json.NewEncoder(c).Encode(map[string]string{"error": err.Error()})
		return
	}
	json.NewEncoder(c).Encode(r)
}

// RequestReload asks the agent at the socket to reload its configuration
// file now and returns its verdict (an error when it could not be asked,
// or is stopping).
func RequestReload(path string) (ReloadResult, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return ReloadResult{}, fmt.Errorf("is the agent running? %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(reloadTimeout + 5*time.Second))
	if err := json.NewEncoder(c).Encode(statusRequest{Cmd: "reload"}); err != nil {
		return ReloadResult{}, err
	}
	var raw json.RawMessage
	if err := json.NewDecoder(c).Decode(&raw); err != nil {
		return ReloadResult{}, fmt.Errorf("read the reload's verdict: %w", err)
	}
	// A verdict says applied (true or false); a reply without it says why
	// the agent could not reload at all.
	var probe struct {
		Applied *bool  `json:"applied"`
		Error   string `json:"error"`
	}
	var r ReloadResult
	if err := json.Unmarshal(raw, &probe); err != nil {
		return r, fmt.Errorf("decode the reload's verdict: %w", err)
	}
	if probe.Applied == nil {
		return r, errors.New(probe.Error)
	}
	return r, json.Unmarshal(raw, &r)
}
