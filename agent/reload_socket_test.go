package agent

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/status"
)

// `sluice reload` asks on the status socket and gets the verdict: applied,
// or refused with the reason while the running configuration stays; the
// verdict shows in the snapshot at once. An agent with no reloader (the
// daemon sets one) says so rather than pretending.
func TestReloadOverTheSocketReportsTheVerdict(t *testing.T) {
	r := newRig(t, "")
	r.cycle()
	sock := filepath.Join(t.TempDir(), "status.sock")
	l, err := status.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go r.a.ServeStatus(l, nil)
	if _, err := status.RequestReload(sock); err == nil || !strings.Contains(err.Error(), "SIGHUP only") {
		t.Errorf("no reloader: %v", err)
	}
	l.Close()

	// The daemon's reloader (daemon/reload.go) reads the file, runs the
	// agent's Reload and gives it the verdict to publish; this one does
	// the same with a file in memory.
	if l, err = status.Listen(sock); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	file := baseConfig
	go r.a.ServeStatus(l, func() (status.ReloadResult, error) {
		cfg, err := configfile.Parse([]byte(file))
		if err == nil {
			err = r.a.Reload(cfg)
		}
		res := status.ReloadResult{Why: "sluice reload", Applied: err == nil}
		if err != nil {
			res.Error = err.Error()
		}
		r.a.NoteReload(res)
		return res, nil
	})
	before := r.a.Config().Produce.Capacity
	file = strings.Replace(baseConfig, "produce: {capacity: 1000,", "produce: {capacity: 1e300TiB,", 1)
	res, err := status.RequestReload(sock)
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied || !strings.Contains(res.Error, "produce.capacity") || res.Why != "sluice reload" {
		t.Errorf("refused file: verdict %+v", res)
	}
	if got := r.a.Config().Produce.Capacity; got != before {
		t.Errorf("a refused reload changed produce.capacity: %v, was %v", got, before)
	}
	if s := r.a.Snapshot(); s == nil || s.LastReload == nil || s.LastReload.Applied || s.LastReload.Error != res.Error {
		t.Errorf("snapshot's last reload %+v, want the refusal", s.LastReload)
	}
	if r.a.LastReloadSucceeded() || r.a.ReloadFailures() != 1 {
		t.Errorf("the metrics after a refusal: succeeded %v, failures %d", r.a.LastReloadSucceeded(), r.a.ReloadFailures())
	}

	file = baseConfig
	if res, err := status.RequestReload(sock); err != nil || !res.Applied || res.Error != "" {
		t.Errorf("valid file: verdict %+v, %v", res, err)
	}
	if s := r.a.Snapshot(); s.LastReload == nil || !s.LastReload.Applied || !r.a.LastReloadSucceeded() || r.a.ReloadFailures() != 1 {
		t.Errorf("snapshot's last reload %+v after an applied one", s.LastReload)
	}
}

// The status socket replaces only a stale socket of its own: a file, a
// directory or a socket another process listens on is left, and refused.
func TestStatusSocketReplacesOnlyAStaleSocket(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("someone's data"), 0o600)
	if _, err := status.Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("regular file: %v", err)
	}
	if data, _ := os.ReadFile(file); string(data) != "someone's data" {
		t.Errorf("the file was changed: %q", data)
	}
	if _, err := status.Listen(dir); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("directory: %v", err)
	}
	live := filepath.Join(dir, "live.sock")
	other, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := status.Listen(live); err == nil || !strings.Contains(err.Error(), "a process listens") {
		t.Errorf("live socket: %v", err)
	}
	if c, err := net.Dial("unix", live); err != nil {
		t.Errorf("the other process's socket is gone: %v", err)
	} else {
		c.Close()
	}
	// A stale one (its listener gone, the file left) is replaced.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	l2, err := status.Listen(stale)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	l2.Close()
}
