package maps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
)

// Whose pin directory it is. A bpffs directory can be shared (iproute2's
// /sys/fs/bpf/tc/globals holds every tool's pins), and a name is not an
// owner: another tool's map called stats or conns must never be adopted
// nor removed. sluice marks a directory it makes, or finds empty, with a
// pin of its own (DirMarkerPin) and uses a non-empty one only when it
// carries the mark, or is an earlier release's from before the mark: every
// entry named as sluice names its pins, and its core tables there.

// DirMarkerPin marks a pin directory as sluice's.
const DirMarkerPin = "sluice_pins"

// dirMark is the marker map's one value.
var dirMark = [16]byte{'s', 'l', 'u', 'i', 'c', 'e', '-', 'p', 'i', 'n', 's', '-', 'v', '1'}

var dirMarkerSpec = ebpf.MapSpec{Name: DirMarkerPin, Type: ebpf.Array, KeySize: 4, ValueSize: 16, MaxEntries: 1}

// corePins are tables every release of sluice has pinned: a directory
// without the mark is an earlier release's only if it holds them.
var corePins = []string{"settings", "counters", "stats"}

// checkOwned refuses an existing pin directory that is not sluice's (see
// above), naming what it found; an absent directory is sluice's to make.
func checkOwned(dir string) error {
	names, err := pinNames(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("pin_path %s: %w", dir, err)
	case len(names) == 0:
		return nil
	}
	if slices.Contains(names, DirMarkerPin) {
		if marked(filepath.Join(dir, DirMarkerPin)) {
			return nil
		}
		return fmt.Errorf("%w: %s holds a %s that is not sluice's mark: another tool's directory; set pin_path to a directory of sluice's own (default /sys/fs/bpf/sluice)",
			ErrPinPath, dir, DirMarkerPin)
	}
	for _, n := range names {
		if !ownPin(n) {
			return fmt.Errorf("%w: %s holds %s, which sluice does not make, and no mark of sluice's: another tool's directory; set pin_path to a directory of sluice's own (default /sys/fs/bpf/sluice)",
				ErrPinPath, dir, n)
		}
	}
	for _, core := range corePins {
		if !slices.Contains(names, core) {
			return fmt.Errorf("%w: %s holds pins named like sluice's but not its %s table, and no mark of sluice's: not a directory sluice made; set pin_path to a directory of sluice's own",
				ErrPinPath, dir, core)
		}
	}
	return nil // an earlier release's: Load marks it
}

// markOwned pins the mark in dir if it is not there.
func markOwned(dir string) error {
	path := filepath.Join(dir, DirMarkerPin)
	if _, err := os.Lstat(path); err == nil {
		return nil
	}
	m, err := ebpf.NewMap(&dirMarkerSpec)
	if err != nil {
		return fmt.Errorf("mark %s as sluice's: %w", dir, err)
	}
	defer m.Close()
	if err := m.Put(uint32(0), dirMark); err != nil {
		return fmt.Errorf("mark %s as sluice's: %w", dir, err)
	}
	if err := m.Pin(path); err != nil {
		return fmt.Errorf("mark %s as sluice's: %w", dir, err)
	}
	return nil
}

// marked reports whether the pin at path is sluice's mark.
func marked(path string) bool {
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		return false
	}
	defer m.Close()
	var v [16]byte
	info, err := m.Info()
	if err != nil || info.Type != ebpf.Array || info.KeySize != 4 || info.ValueSize != 16 {
		return false
	}
	return m.Lookup(uint32(0), &v) == nil && v == dirMark
}

func pinNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
