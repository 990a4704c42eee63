package metricslistener

import (
	"errors"
	"testing"

	"github.com/sluice-dev/sluice/agent/config"
)

// A move opens the new listener beside the one in use: commit closes the
// old, abort the new; an unchanged address moves nothing; an address that
// cannot open is an error naming the keys, the old one serving on.
func TestListenerMoves(t *testing.T) {
	open := map[string]bool{}
	l := New(func(addr, _ string) (func(), error) {
		if addr == "busy" {
			return nil, errors.New("address already in use")
		}
		open[addr] = true
		return func() { delete(open, addr) }, nil
	})
	at := func(addr string) config.Config { c := config.Default(); c.MetricsAddress = addr; return c }
	if err := l.Open(at("a")); err != nil || !open["a"] {
		t.Fatalf("open: %v, %v", err, open)
	}
	if commit, abort, err := l.PrepareMove(at("a"), at("a")); commit != nil || abort != nil || err != nil {
		t.Fatalf("an unchanged address moved: %v", err)
	}
	commit, abort, err := l.PrepareMove(at("a"), at("b"))
	if err != nil || !open["a"] || !open["b"] {
		t.Fatalf("prepared: %v, open %v: want both open", err, open)
	}
	abort()
	if open["b"] || !open["a"] {
		t.Fatalf("aborted: open %v, want a only", open)
	}
	if commit, _, err = l.PrepareMove(at("a"), at("b")); err != nil {
		t.Fatal(err)
	}
	commit()
	if open["a"] || !open["b"] {
		t.Fatalf("committed: open %v, want b only", open)
	}
	if _, _, err := l.PrepareMove(at("b"), at("busy")); err == nil || !open["b"] {
		t.Fatalf("busy: %v, open %v: want an error, b serving on", err, open)
	}
	l.Close()
	if len(open) != 0 {
		t.Fatalf("closed: open %v", open)
	}
}
