package status

import (
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type fakeHandler struct {
	snap   *Snapshot
	conns  []ConnectionView
	peer   netip.Addr
	reload func() (ReloadResult, error)
}

func (f *fakeHandler) Snapshot() *Snapshot { return f.snap }
func (f *fakeHandler) Connections(peer netip.Addr) ([]ConnectionView, error) {
	f.peer = peer
	return f.conns, nil
}
func (f *fakeHandler) Reload() (ReloadResult, error) { return f.reload() }

// The socket's client and server agree on every request, and each
// failure reaches the client as an error naming it.
func TestSocketRoundTrips(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHandler{reload: func() (ReloadResult, error) { return ReloadResult{}, errors.New("stopping") }}
	done := make(chan error, 1)
	go func() { done <- Serve(l, h) }()
	defer func() {
		l.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	if _, err := Query(path); err == nil || !strings.Contains(err.Error(), "no cycle has run yet") {
		t.Errorf("before the first cycle: %v", err)
	}
	h.snap = &Snapshot{Cycle: 7, Mode: "enforce", Directions: [2]DirectionView{{Direction: "produce", Capacity: 5e6}}}
	if s, err := Query(path); err != nil || s.Cycle != 7 || s.Mode != "enforce" || s.Directions[0].Capacity != 5e6 {
		t.Errorf("snapshot: %+v %v", s, err)
	}
	h.conns = []ConnectionView{{Peer: "198.18.0.2:40000", Produce: "client:alpha"}}
	peer := netip.MustParseAddr("198.18.0.2")
	if v, err := QueryConnections(path, peer); err != nil || len(v) != 1 || v[0].Produce != "client:alpha" || h.peer != peer {
		t.Errorf("connections: %+v %v (asked for %v)", v, err, h.peer)
	}
	if _, err := RequestReload(path); err == nil || err.Error() != "stopping" {
		t.Errorf("a reload that cannot run: %v", err)
	}
	at := time.Unix(1_800_000_000, 0).UTC()
	h.reload = func() (ReloadResult, error) {
		return ReloadResult{At: at, Applied: false, Error: "produce.capacity: bad"}, nil
	}
	if r, err := RequestReload(path); err != nil || r.Applied || r.Error != "produce.capacity: bad" || !r.At.Equal(at) {
		t.Errorf("a refused reload's verdict: %+v %v", r, err)
	}
	// A second listener on a live socket is refused, and the socket stays.
	if _, err := Listen(path); !errors.Is(err, ErrSocketTaken) {
		t.Errorf("listen on a live socket: %v, want ErrSocketTaken", err)
	}
}
