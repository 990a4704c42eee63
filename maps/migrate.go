package maps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"

	"github.com/cilium/ebpf"
)

// Migration: pinned maps an earlier agent left that this data path cannot
// reuse as they are, because their sizes differ (max_connections or
// max_entities changed, or a release sized them otherwise). Load builds
// the new maps beside them, carries every entry over (bindings, identities,
// counters, classes, rates, entity names, listeners, exempt and peer
// tables, settings), moves the link pins across, and swaps the directories;
// the attached programs move to the new maps when the daemon adopts the
// links (a link update: no moment without a program). Only layouts that
// match entry for entry are carried: a map whose key or value changed, a
// table that would not hold what is in use, or an entity past the new
// max_entities that still has state refuses the migration, and the pins
// stay as they were.

// entityIndexed are the arrays indexed by direction × MaxEntities + entity:
// their entries move when MaxEntities changes.
var entityIndexed = []string{"counters", "classes", "rates", "clocks", "buckets"}

// grownByAppending are the maps whose values a release may lengthen by
// fields appended at their end (struct conn_state's lat): an older value
// is carried over as the new value's start, the rest zeroed (a connection
// an earlier agent entered has no latency state yet).
var grownByAppending = []string{"conns4", "conns6"}

// migrate loads the data path into a new pin directory beside opts.PinDir,
// copies the old pins' entries into it and swaps it into place. old is the
// flock on opts.PinDir, held throughout and released at the end.
func migrate(opts Options, spec *ebpf.CollectionSpec, old *os.File, why error) (_ *Datapath, err error) {
	defer old.Close()
	tmp := fmt.Sprintf("%s-tmp-%d", opts.PinDir, os.Getpid())
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("migrate pins: %w", err)
	}
	lock, err := lockDir(tmp)
	if err != nil {
		removeOwnPinTree(tmp)
		return nil, err
	}
	d := &Datapath{opts: opts, pinDir: opts.PinDir, lock: lock, adopted: true, listenerPorts: map[uint16]bool{}, exemptSet: map[sluiceExemptKey]bool{}, peerSet: map[sluicePeerKey]bool{}}
	defer func() {
		if err != nil {
			d.Close()
			removeOwnPinTree(tmp)
			err = fmt.Errorf("%w (%s): %v; could not migrate: %w", ErrIncompatiblePins, opts.PinDir, why, err)
		}
	}()
	// Maps whose pins fit the new data path as they are move over whole
	// (the load re-adopts them): only the others are copied entry by entry.
	// moved lists every pin taken from the old directory (maps and links):
	// a failure puts each back before the new directory is removed, so a
	// refused migration leaves the earlier agent's pins, and its attached
	// programs, as they were.
	var moved []string
	defer func() {
		if err != nil { // put them back where the earlier agent left them
			for _, name := range moved {
				os.Rename(filepath.Join(tmp, name), filepath.Join(opts.PinDir, name))
			}
		}
	}()
	for _, name := range pinnedMaps {
		if fits(filepath.Join(opts.PinDir, name), spec.Maps[name]) {
			if err := os.Rename(filepath.Join(opts.PinDir, name), filepath.Join(tmp, name)); err != nil {
				return nil, fmt.Errorf("move pin %s: %w", name, err)
			}
			moved = append(moved, name)
		}
	}
	var collOpts ebpf.CollectionOptions
	collOpts.Maps.PinPath = tmp
	if err := spec.LoadAndAssign(&d.objs, &collOpts); err != nil {
		return nil, fmt.Errorf("load the new maps: %w", err)
	}
	var carried []string
	for _, name := range pinnedMaps {
		if slices.Contains(moved, name) {
			continue
		}
		from, err := ebpf.LoadPinnedMap(filepath.Join(opts.PinDir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			continue // an older layout without it: starts empty
		}
		if err != nil {
			return nil, fmt.Errorf("open pinned %s: %w", name, err)
		}
		to, err := ebpf.LoadPinnedMap(filepath.Join(tmp, name), nil)
		if err != nil {
			from.Close()
			return nil, fmt.Errorf("open new %s: %w", name, err)
		}
		n, err := copyMap(name, from, to)
		from.Close()
		to.Close()
		if err != nil {
			return nil, err
		}
		carried = append(carried, fmt.Sprintf("%s (%d entries copied)", name, n))
	}
	// The links an earlier agent pinned (and anything else there) move with
	// the maps; the daemon adopts them and points them at the new programs.
	names, err := os.ReadDir(opts.PinDir)
	if err != nil {
		return nil, err
	}
	for _, e := range names {
		if slices.Contains(pinnedMaps, e.Name()) || slices.Contains(retiredPins, e.Name()) {
			continue
		}
		if err := os.Rename(filepath.Join(opts.PinDir, e.Name()), filepath.Join(tmp, e.Name())); err != nil {
			return nil, fmt.Errorf("move pin %s: %w", e.Name(), err)
		}
		moved = append(moved, e.Name())
	}
	// What the new maps hold is read before the swap: after it, nothing
	// may fail.
	if err := d.readListeners(); err != nil {
		return nil, err
	}
	if err := d.readPeerEntities(); err != nil {
		return nil, err
	}
	retired := fmt.Sprintf("%s-old-%d", opts.PinDir, os.Getpid())
	if err := os.Rename(opts.PinDir, retired); err != nil {
		return nil, fmt.Errorf("set the old pins aside: %w", err)
	}
	if err := os.Rename(tmp, opts.PinDir); err != nil {
		os.Rename(retired, opts.PinDir)
		return nil, fmt.Errorf("move the new pins into place: %w", err)
	}
	// The old maps live on while the old programs hold them (until the
	// links are updated); their pins go now.
	removeOwnPinTree(retired)
	d.migrated = carried
	return d, nil
}

// fits says whether the map pinned at path is what spec asks for, so the
// new data path can take it as it is.
func fits(path string, spec *ebpf.MapSpec) bool {
	m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return false
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		return false
	}
	return spec != nil && m.Type() == spec.Type && m.KeySize() == spec.KeySize && m.ValueSize() == spec.ValueSize &&
		m.MaxEntries() == spec.MaxEntries && info.Flags == spec.Flags
}

// Migrated lists the maps Load carried over from pins of another size,
// with their entry counts (nil: none).
func (d *Datapath) Migrated() []string { return d.migrated }

// copyMap copies every entry of from into to, which must have the same
// type, key and value sizes (or, for grownByAppending maps, longer
// values); it returns how many it copied.
func copyMap(name string, from, to *ebpf.Map) (int, error) {
	grown := slices.Contains(grownByAppending, name) && from.Type() == to.Type() && from.KeySize() == to.KeySize() &&
		from.ValueSize() < to.ValueSize()
	if grown {
		return copyGrown(name, from, to)
	}
	if from.Type() != to.Type() || from.KeySize() != to.KeySize() || from.ValueSize() != to.ValueSize() {
		return 0, fmt.Errorf("%s changed layout (%v key %d value %d, now %v key %d value %d): unload the old pins first",
			name, from.Type(), from.KeySize(), from.ValueSize(), to.Type(), to.KeySize(), to.ValueSize())
	}
	perCPU := from.Type() == ebpf.PerCPUArray || from.Type() == ebpf.PerCPUHash || from.Type() == ebpf.LRUCPUHash
	newValue := func() reflect.Value { // a pointer to one value (per CPU: a slice of them)
		one := reflect.ArrayOf(int(from.ValueSize()), reflect.TypeOf(byte(0)))
		if perCPU {
			return reflect.New(reflect.SliceOf(one))
		}
		return reflect.New(one)
	}
	if from.Type() == ebpf.Array || from.Type() == ebpf.PerCPUArray {
		return copyArray(name, from, to, perCPU)
	}
	// A full LRU table would evict silently: count first.
	if n := countEntries(from, newValue()); n > int(to.MaxEntries()) {
		return 0, fmt.Errorf("%s holds %d entries; the new one holds %d", name, n, to.MaxEntries())
	}
	key := make([]byte, from.KeySize())
	value := newValue()
	n := 0
	it := from.Iterate()
	for it.Next(&key, value.Interface()) {
		if err := to.Put(key, value.Elem().Interface()); err != nil {
			return n, fmt.Errorf("copy %s: %w", name, err)
		}
		n++
		value = newValue()
	}
	if err := it.Err(); err != nil {
		return n, fmt.Errorf("read pinned %s: %w", name, err)
	}
	return n, nil
}

// copyGrown copies a hash map's entries into one with longer values: each
// old value is the start of the new one, the rest zero.
func copyGrown(name string, from, to *ebpf.Map) (int, error) {
	old := make([]byte, from.ValueSize())
	if n := countEntries(from, reflect.ValueOf(old)); n > int(to.MaxEntries()) {
		return 0, fmt.Errorf("%s holds %d entries; the new one holds %d", name, n, to.MaxEntries())
	}
	key := make([]byte, from.KeySize())
	n := 0
	it := from.Iterate()
	for it.Next(&key, old) {
		value := make([]byte, to.ValueSize())
		copy(value, old)
		if err := to.Put(key, value); err != nil {
			return n, fmt.Errorf("copy %s: %w", name, err)
		}
		n++
	}
	if err := it.Err(); err != nil {
		return n, fmt.Errorf("read pinned %s: %w", name, err)
	}
	return n, nil
}

func countEntries(m *ebpf.Map, value reflect.Value) int {
	key := make([]byte, m.KeySize())
	n := 0
	it := m.Iterate()
	for it.Next(&key, value.Interface()) {
		n++
	}
	return n
}

// isZero: every byte of v (an array of bytes, or a slice of them) is 0.
func isZero(v reflect.Value) bool {
	if v.Kind() == reflect.Slice {
		for i := 0; i < v.Len(); i++ {
			if !v.Index(i).IsZero() {
				return false
			}
		}
		return true
	}
	return v.IsZero()
}

// copyArray copies an array's non-zero entries in batches (an entry-by-
// entry walk of 131,076 entries a map takes seconds, longer than a
// restart may leave the data path without an agent), moving the
// entity-indexed ones to the new direction × max_entities layout.
func copyArray(name string, from, to *ebpf.Map, perCPU bool) (int, error) {
	const chunk = 4096
	cpus := 1
	if perCPU {
		n, err := ebpf.PossibleCPU()
		if err != nil {
			return 0, err
		}
		cpus = n
	}
	elem := reflect.ArrayOf(int(from.ValueSize()), reflect.TypeOf(byte(0)))
	oldMax, newMax := from.MaxEntries()/2, to.MaxEntries()/2
	remap := slices.Contains(entityIndexed, name)
	keys := make([]uint32, chunk)
	values := reflect.MakeSlice(reflect.SliceOf(elem), chunk*cpus, chunk*cpus)
	var cursor ebpf.MapBatchCursor
	copied := 0
	for {
		n, err := from.BatchLookup(&cursor, keys, values.Interface(), nil)
		done := errors.Is(err, ebpf.ErrKeyNotExist)
		if err != nil && !done {
			return copied, fmt.Errorf("read pinned %s: %w", name, err)
		}
		var outKeys []uint32
		outValues := reflect.MakeSlice(reflect.SliceOf(elem), 0, 0)
		for i := 0; i < n; i++ {
			v := values.Slice(i*cpus, (i+1)*cpus)
			if isZero(v) {
				continue // the new map starts zeroed
			}
			idx := keys[i]
			if remap {
				dir, entity := idx/oldMax, idx%oldMax
				idx = dir*newMax + entity
				if entity >= newMax {
					idx = to.MaxEntries()
				}
			}
			if idx >= to.MaxEntries() {
				return copied, fmt.Errorf("%s entry %d has state the new map has no room for (max_entities cannot shrink below an entity in use)", name, keys[i])
			}
			outKeys = append(outKeys, idx)
			outValues = reflect.AppendSlice(outValues, v)
		}
		if len(outKeys) > 0 {
			if _, err := to.BatchUpdate(outKeys, outValues.Interface(), nil); err != nil {
				return copied, fmt.Errorf("copy %s: %w", name, err)
			}
			copied += len(outKeys)
		}
		if done || n == 0 {
			return copied, nil
		}
	}
}
