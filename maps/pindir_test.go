package maps

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/internal/netns"
)

func isBPFFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

// pin_path values that are not sluice's to use are refused, naming the
// problem, and nothing is mounted over or removed: /, a directory whose
// parent is not a bpffs (/var/lib), a pin that is not a directory, a
// symlink into another bpffs; a bpffs is mounted only on an empty
// directory.
func TestPinPathsSluiceRefuses(t *testing.T) {
	netns.RequireRoot(t, "mounts bpf filesystems")
	fs, other := bpffs(t), bpffs(t)
	notBPF := t.TempDir()
	os.WriteFile(filepath.Join(notBPF, "broker-data"), []byte("kafka log"), 0o600)
	pinned, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	if err := pinned.Pin(filepath.Join(fs, "a_map")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(fs, "elsewhere")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{"/", "clean absolute path"},
		{"sluice", "clean absolute path"},
		{"/sys/fs/bpf/../sluice", "clean absolute path"},
		{filepath.Join(notBPF, "sluice"), "is not a bpf filesystem"},
		{filepath.Join(notBPF, "broker-data"), "is not a bpf filesystem"},
		{filepath.Join(fs, "a_map"), "is not a directory"},
		{filepath.Join(fs, "elsewhere"), "is a symlink"},
	} {
		if err := checkPinDir(c.dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("pin_path %s: %v, want %q", c.dir, err, c.want)
		}
		opts := testOptions()
		opts.PinDir = c.dir
		if d, err := Load(opts); err == nil {
			d.Close()
			t.Errorf("Load with pin_path %s succeeded", c.dir)
		}
	}
	// A directory that holds something is never mounted over.
	if err := MountBPFFS(notBPF); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("MountBPFFS on a non-empty directory: %v", err)
	}
	if isBPFFS(notBPF) {
		unix.Unmount(notBPF, 0)
		t.Fatal("a bpffs was mounted over a non-empty directory")
	}
	if data, err := os.ReadFile(filepath.Join(notBPF, "broker-data")); err != nil || string(data) != "kafka log" {
		t.Errorf("the directory's file after the refusal: %q %v", data, err)
	}
	// Unpin refuses outside a bpffs, and touches nothing there.
	if _, err := Unpin(notBPF); err == nil {
		t.Error("Unpin of a directory outside a bpffs succeeded")
	}
	if _, err := os.Stat(filepath.Join(notBPF, "broker-data")); err != nil {
		t.Errorf("Unpin removed a file outside a bpffs: %v", err)
	}
}

// Unpin removes the pins sluice makes and the half-built directory of a
// load that died, reports them, and leaves anything else in the directory
// (which then stays).
func TestUnpinRemovesOnlyItsOwnPins(t *testing.T) {
	opts := pinnedAndClosed(t)
	foreign, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	if err := foreign.Pin(filepath.Join(opts.PinDir, "cilium_calls")); err != nil {
		t.Fatal(err)
	}
	halfBuilt := opts.PinDir + "-tmp-4242"
	if err := os.Mkdir(halfBuilt, 0o700); err != nil {
		t.Fatal(err)
	}
	left, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer left.Close()
	if err := left.Pin(filepath.Join(halfBuilt, "conns4")); err != nil { // (a map pinned twice moves)
		t.Fatal(err)
	}

	rep, err := Unpin(opts.PinDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range pinnedMaps {
		if !slices.Contains(rep.Removed, filepath.Join(opts.PinDir, name)) {
			t.Errorf("pin %s not reported removed: %v", name, rep.Removed)
		}
		if _, err := os.Stat(filepath.Join(opts.PinDir, name)); !os.IsNotExist(err) {
			t.Errorf("pin %s left: %v", name, err)
		}
	}
	if !slices.Equal(rep.Foreign, []string{filepath.Join(opts.PinDir, "cilium_calls")}) {
		t.Errorf("foreign entries reported %v", rep.Foreign)
	}
	if _, err := os.Stat(filepath.Join(opts.PinDir, "cilium_calls")); err != nil {
		t.Errorf("the foreign pin was removed: %v", err)
	}
	if _, err := os.Stat(halfBuilt); !os.IsNotExist(err) || !slices.Contains(rep.Removed, halfBuilt) {
		t.Errorf("half-built directory: %v (removed %v)", err, rep.Removed)
	}
}

// Unpin with keep leaves the named pins and the directory (sluice unload
// keeps its record of host objects until they are gone); a second Unpin
// takes both.
func TestUnpinKeepsWhatItIsAskedTo(t *testing.T) {
	opts := pinnedAndClosed(t)
	if err := RecordOwned(opts.PinDir, OwnedIFB, 7, "slifb7"); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(opts.PinDir, OwnedRecordPin)
	rep, err := Unpin(opts.PinDir, OwnedRecordPin)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(rep.Removed, record) || slices.Contains(rep.Foreign, record) {
		t.Errorf("the kept record reported as removed or foreign: %+v", rep)
	}
	if got, err := Owned(opts.PinDir, OwnedIFB); err != nil || got[7] != "slifb7" {
		t.Fatalf("the record after the first unpin: %v %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(opts.PinDir, "settings")); !os.IsNotExist(err) {
		t.Errorf("a pin not kept is still there: %v", err)
	}
	rep, err = Unpin(opts.PinDir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rep.Removed, record) || !slices.Contains(rep.Removed, opts.PinDir) {
		t.Errorf("the second unpin removed %v, want the record and the directory", rep.Removed)
	}
	if _, err := os.Stat(opts.PinDir); !os.IsNotExist(err) {
		t.Errorf("the directory is still there: %v", err)
	}
}
