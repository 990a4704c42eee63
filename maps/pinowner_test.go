package maps

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/sluice-dev/sluice/internal/netns"
)

// pinForeign pins a map of another tool's in dir under name.
func pinForeign(t *testing.T, dir, name string) {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := m.Pin(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	n, err := pinNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(n)
	return n
}

// A pin directory another tool shares (iproute2's tc/globals holds every
// tool's pins) is not sluice's: Load refuses it and Unpin removes nothing,
// whatever the names of its pins, a foreign map called stats or settings
// included; a forged mark is no mark (issue #48).
func TestForeignPinDirectoryIsNeitherAdoptedNorEmptied(t *testing.T) {
	netns.RequireRoot(t, "loads BPF programs")
	for name, pins := range map[string][]string{
		"another tool's pins":                   {"cilium_calls", "globals_x"},
		"a foreign map named like sluice's":     {"stats"},
		"foreign maps named like sluice's core": {"settings", "counters", "stats", "cilium_calls"},
		"a forged mark":                         {DirMarkerPin, "settings", "counters", "stats"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(bpffs(t), "globals")
			for _, p := range pins {
				pinForeign(t, dir, p)
			}
			before := names(t, dir)
			opts := testOptions()
			opts.PinDir = dir
			if d, err := Load(opts); !errors.Is(err, ErrPinPath) {
				if d != nil {
					d.Close()
				}
				t.Fatalf("Load in another tool's directory: %v, want ErrPinPath", err)
			}
			if _, err := Unpin(dir); !errors.Is(err, ErrPinPath) {
				t.Errorf("Unpin of another tool's directory: %v, want ErrPinPath", err)
			}
			if after := names(t, dir); !slices.Equal(after, before) {
				t.Errorf("the directory held %v and holds %v", before, after)
			}
		})
	}
}

// A directory sluice made carries its mark; one an earlier release made
// (its pins, no mark) is adopted and marked; an empty one is taken and
// marked. Unpin takes the mark last, with the directory.
func TestSluiceMarksItsPinDirectory(t *testing.T) {
	opts := pinnedAndClosed(t)
	if !marked(filepath.Join(opts.PinDir, DirMarkerPin)) {
		t.Fatalf("a directory sluice made has no mark: %v", names(t, opts.PinDir))
	}
	// As an earlier release left it: no mark.
	if err := os.Remove(filepath.Join(opts.PinDir, DirMarkerPin)); err != nil {
		t.Fatal(err)
	}
	d, err := Load(opts)
	if err != nil {
		t.Fatalf("an earlier release's directory: %v", err)
	}
	if !d.Adopted() || !marked(filepath.Join(opts.PinDir, DirMarkerPin)) {
		t.Errorf("an earlier release's directory: adopted %v, marked %v", d.Adopted(), marked(filepath.Join(opts.PinDir, DirMarkerPin)))
	}
	d.Close()
	empty := filepath.Join(filepath.Dir(opts.PinDir), "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	o := opts
	o.PinDir = empty
	if d, err = Load(o); err != nil {
		t.Fatalf("an empty directory: %v", err)
	}
	d.Close()
	if !marked(filepath.Join(empty, DirMarkerPin)) {
		t.Error("an empty directory sluice took has no mark")
	}
	rep, err := Unpin(opts.PinDir)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rep.Removed); n < 2 || rep.Removed[n-1] != opts.PinDir {
		t.Errorf("unpin removed %v, the directory last", rep.Removed)
	}
	if _, err := os.Stat(opts.PinDir); !os.IsNotExist(err) {
		t.Errorf("the directory is still there: %v", err)
	}
}
