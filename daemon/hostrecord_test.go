package daemon

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/internal/hoststate"
	"github.com/sluice-dev/sluice/maps"
)

// The agent's entry in the host record: written before the pins exist,
// each interface before the programs go on it; gone once everything was
// removed, kept while something is left for the next agent; and an entry
// an earlier agent left survives a start that made nothing.
func TestHostRecordLifecycle(t *testing.T) {
	t.Setenv(hoststate.DirEnv, t.TempDir())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pins := filepath.Join(t.TempDir(), "pins") // no bpffs: the pins' own record reads empty
	entry := func() *hoststate.Entry {
		r, err := hoststate.Read(hoststate.Dir())
		if err != nil {
			t.Fatal(err)
		}
		return r.Find(hoststate.Here(), pins)
	}

	var h hostRecord
	h.finish(true) // never begun (a refusal before the data path): nothing written
	if _, err := os.Stat(filepath.Join(hoststate.Dir(), hoststate.FileName)); !os.IsNotExist(err) {
		t.Fatalf("a record written by an agent that never began: %v", err)
	}
	h.begin(log, pins)
	if e := entry(); e == nil || h.had {
		t.Fatalf("after begin: %+v (had %v), want a new entry", e, h.had)
	}
	h.attaching(4, "eth0")
	h.droppedDetached()
	h.attaching(5, "eth1")
	if e := entry(); e == nil || len(e.Interfaces) != 1 || e.Interfaces[0] != (hoststate.Device{Index: 5, Name: "eth1"}) {
		t.Fatalf("interfaces after a dropped interface was detached: %+v", e)
	}
	h.finish(false) // left attached (keep_attached_on_exit)
	if entry() == nil {
		t.Fatal("the entry went with the data path left attached")
	}

	// The next agent finds it; its start is refused before it makes
	// anything (cleanup's first branch): the entry stays.
	var next hostRecord
	next.begin(log, pins)
	if !next.had {
		t.Fatal("the next agent did not see the entry the first left")
	}
	next.finish(!next.had)
	if entry() == nil {
		t.Fatal("a start that made nothing removed an earlier agent's entry")
	}
	// One that removed everything (keep_attached_on_exit: false).
	next.finish(true)
	if e := entry(); e != nil {
		t.Fatalf("the entry stayed after everything was removed: %+v", e)
	}
	if left, _ := os.ReadDir(hoststate.Dir()); len(left) != 0 {
		t.Errorf("left in the state directory: %v", left)
	}
}

// unload touches nothing while an agent holds any pin directory the record
// names (its flock): removing one entry takes sluice's legacy filters and
// IFB devices wherever they are, the running agent's too.
func TestUnloadAllRefusesWhileAnAgentRuns(t *testing.T) {
	t.Setenv(hoststate.DirEnv, t.TempDir())
	held := t.TempDir()
	if err := hoststate.Update(hoststate.Dir(), func(r *hoststate.Record) { r.Ensure(hoststate.Here(), held) }); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(held)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var said []string
	err = UnloadAll(filepath.Join(t.TempDir(), "absent"), map[int]bool{}, func(s string) { said = append(said, s) })
	if !errors.Is(err, maps.ErrPinDirBusy) {
		t.Fatalf("UnloadAll with an agent on %s: %v, want ErrPinDirBusy", held, err)
	}
	if len(said) > 0 {
		t.Errorf("said %q before refusing", said)
	}
	if r, _ := hoststate.Read(hoststate.Dir()); r.Find(hoststate.Here(), held) == nil {
		t.Error("the refused unload forgot the running agent's entry")
	}
}
