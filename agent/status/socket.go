package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// ErrSocketTaken: something that is not sluice's stale socket holds the
// status socket's path.
var ErrSocketTaken = errors.New("socket path taken")

// Listen opens the unix socket `sluice status` and `sluice explain`
// talk to, readable and writable by root only. A stale socket from an
// earlier agent (one nobody listens on) is replaced; anything else at the
// path — a file, a directory, a live socket of another process — is left
// and refused.
func Listen(path string) (net.Listener, error) {
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

// Request is one line of JSON from a client.
type Request struct {
	Cmd string `json:"cmd"` // "snapshot", "connections" or "reload"
	// Peer filters "connections" to one client address ("": all).
	Peer string `json:"peer,omitempty"`
}

// Handler answers the socket's requests: the agent.
type Handler interface {
	// Snapshot is the last cycle's (nil before the first).
	Snapshot() *Snapshot
	// Connections are those from peer (the zero Addr: all).
	Connections(peer netip.Addr) ([]ConnectionView, error)
	// Reload reloads the configuration file and returns the verdict (an
	// error: it could not run at all).
	Reload() (ReloadResult, error)
}

// Serve answers requests on l until it closes: one JSON request per
// connection, one JSON answer ({"error": ...} when there is none).
func Serve(l net.Listener, h Handler) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go serveOne(c, h)
	}
}

func serveOne(c net.Conn, h Handler) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	enc := json.NewEncoder(c)
	fail := func(msg string) { enc.Encode(map[string]string{"error": msg}) }
	var req Request
	if err := json.NewDecoder(c).Decode(&req); err != nil {
		req.Cmd = ""
	}
	switch req.Cmd {
	case "snapshot":
		if s := h.Snapshot(); s != nil {
			enc.Encode(s)
		} else {
			fail("no cycle has run yet")
		}
	case "connections":
		var peer netip.Addr
		if req.Peer != "" {
			var err error
			if peer, err = netip.ParseAddr(req.Peer); err != nil {
				fail(fmt.Sprintf("peer %q is not an IP address", req.Peer))
				return
			}
		}
		views, err := h.Connections(peer)
		if err != nil {
			fail(err.Error())
			return
		}
		enc.Encode(views)
	case "reload":
		c.SetDeadline(time.Now().Add(ReloadTimeout))
		r, err := h.Reload()
		if err != nil {
			fail(err.Error())
			return
		}
		enc.Encode(r)
	default:
		fail(`unknown request; send {"cmd":"snapshot"}, {"cmd":"reload"} or {"cmd":"connections","peer":"ADDRESS"}`)
	}
}

// ReloadTimeout bounds a reload asked for on the status socket: building a
// new metadata client or shaper takes seconds at most.
const ReloadTimeout = 60 * time.Second

// Query asks the agent at the socket for its last snapshot.
func Query(path string) (*Snapshot, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("is the agent running? %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := json.NewEncoder(c).Encode(Request{Cmd: "snapshot"}); err != nil {
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

// RequestReload asks the agent at the socket to reload its configuration
// file now and returns its verdict (an error when it could not be asked,
// or is stopping).
func RequestReload(path string) (ReloadResult, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return ReloadResult{}, fmt.Errorf("is the agent running? %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(ReloadTimeout + 5*time.Second))
	if err := json.NewEncoder(c).Encode(Request{Cmd: "reload"}); err != nil {
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

// QueryConnections asks the agent at the socket for the connections from
// peer (the zero Addr: all of them).
func QueryConnections(path string, peer netip.Addr) ([]ConnectionView, error) {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("is the agent running? %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := Request{Cmd: "connections"}
	if peer.IsValid() {
		req.Peer = peer.String()
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return nil, err
	}
	var raw json.RawMessage
	if err := json.NewDecoder(c).Decode(&raw); err != nil {
		return nil, fmt.Errorf("read connections: %w", err)
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		return nil, errors.New(e.Error)
	}
	var views []ConnectionView
	if err := json.Unmarshal(raw, &views); err != nil {
		return nil, fmt.Errorf("decode connections: %w", err)
	}
	return views, nil
}
