package maps

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/sluice-dev/sluice/internal/netns"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// bpffs mounts a private bpf filesystem for the test.
func bpffs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := MountBPFFS(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, 0) })
	return dir
}

func TestPinnedStateSurvivesReload(t *testing.T) {
	netns.RequireRoot(t, "loads BPF programs")
	opts := testOptions()
	opts.PinDir = filepath.Join(bpffs(t), "sluice")
	h := newHarness(t, opts)
	key := connKey(client4, broker4, 40100)
	if err := h.d.BindConns([]Binding{{Conn: key, Produce: 9, Fetch: 10}}); err != nil {
		t.Fatal(err)
	}
	h.run(Produce, toBroker(client4, broker4, 40100, 1, flagACK, make([]byte, 321)))
	// A second agent cannot take the directory while the first holds it.
	if _, err := Load(opts); !errors.Is(err, ErrPinDirBusy) {
		t.Errorf("second load while the first holds the pins: %v, want ErrPinDirBusy", err)
	}
	// Nor can `sluice unload` remove them under it.
	if _, err := Unpin(opts.PinDir); !errors.Is(err, ErrPinDirBusy) {
		t.Errorf("unpin while an agent holds the pins: %v, want ErrPinDirBusy", err)
	}
	h.d.Close()
	// What the departed agent left is readable without loading programs.
	if left, err := PinnedBindings(opts.PinDir); err != nil || len(left) != 1 || left[0].Conn != key || left[0].Produce != 9 || left[0].Fetch != 10 {
		t.Errorf("PinnedBindings: %+v %v, want %s bound to 9/10", left, err, key)
	}

	// A restarted agent re-adopts bindings, counters and listeners.
	d2, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if b, ok, err := d2.Binding(key); err != nil || !ok || b.Produce != 9 || b.Fetch != 10 {
		t.Errorf("binding after reload: %+v %v %v", b, ok, err)
	}
	if c, err := d2.EntityCounters(Produce, 9); err != nil || c.Bytes != 321 {
		t.Errorf("counters after reload: %+v %v", c, err)
	}
	if !d2.listenerPorts[brokerPort] {
		t.Errorf("listeners after reload: %v", d2.listenerPorts)
	}
	d2.Close()

	// A data path of another size refuses the pins, naming the problem.
	other := opts
	other.MaxConnections *= 2
	if _, err := Load(other); !errors.Is(err, ErrIncompatiblePins) {
		t.Errorf("incompatible reload: %v, want ErrIncompatiblePins", err)
	}
	if _, err := Unpin(opts.PinDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(opts.PinDir); !os.IsNotExist(err) {
		t.Errorf("pins left after unpin: %v", err)
	}
	d3, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d3.Close()
	if _, ok, _ := d3.Binding(key); ok {
		t.Error("binding survived unpin")
	}
	if matches, _ := filepath.Glob(opts.PinDir + "-tmp-*"); len(matches) != 0 {
		t.Errorf("temporary pin directories left: %v", matches)
	}
}

func TestPinDirMustBeBPFFS(t *testing.T) {
	netns.RequireRoot(t, "loads BPF programs")
	opts := testOptions()
	opts.PinDir = filepath.Join(t.TempDir(), "sluice")
	if _, err := Load(opts); err == nil {
		t.Fatal("pinning outside a bpf filesystem was accepted")
	}
}

func TestSampleLayoutMatchesGenerated(t *testing.T) {
	var s sluiceSample
	if got := int(sizeofSample(s)); got != sampleSize {
		t.Fatalf("struct sample is %d bytes, the decoder assumes %d", got, sampleSize)
	}
	offsets := map[string][2]uintptr{
		"req_seq":   {offsetofReqSeq(), sampleOffReqSeq},
		"frag_off":  {offsetofFragOff(), sampleOffFragOff},
		"req_len":   {offsetofReqLen(), sampleOffReqLen},
		"len":       {offsetofLen(), sampleOffLen},
		"conn_born": {offsetofBorn(), sampleOffBorn},
		"bound":     {offsetofBound(), sampleOffBound},
		"data":      {offsetofData(), sampleOffData},
	}
	for name, o := range offsets {
		if o[0] != o[1] {
			t.Errorf("%s at %d, the decoder reads %d", name, o[0], o[1])
		}
	}
}

func TestSampleRingLayoutMatchesGenerated(t *testing.T) {
	var r sluiceSampleRing
	if got := int(unsafe.Sizeof(r)); got != ringSize {
		t.Fatalf("struct sample_ring is %d bytes, the reader assumes %d", got, ringSize)
	}
	if got := unsafe.Offsetof(r.Head); got != ringOffHead {
		t.Errorf("head at %d, the reader reads %d", got, ringOffHead)
	}
	if got := unsafe.Offsetof(r.Tail); got != ringOffTail {
		t.Errorf("tail at %d, the reader writes %d", got, ringOffTail)
	}
}

// Pins of maps an earlier data path had (and this one has not) are removed
// when an upgraded agent adopts the directory; the links beside them stay.
func TestPinnedRetiredMapsRemoved(t *testing.T) {
	opts, d := pinnedLoad(t)
	// Stand-ins for an older layout's pins, and a pinned link's name.
	for _, name := range append(retiredPins, "link_3_ingress") {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Pin(filepath.Join(opts.PinDir, name)); err != nil {
			t.Fatal(err)
		}
		m.Close()
		if _, err := os.Stat(filepath.Join(opts.PinDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	d.Close()
	d, err := Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, name := range retiredPins {
		if _, err := os.Stat(filepath.Join(opts.PinDir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("retired pin %s still there: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(opts.PinDir, "link_3_ingress")); err != nil {
		t.Errorf("a pin that is not retired was removed: %v", err)
	}
}

// Pins of another size (max_connections or max_entities changed across a
// restart) are carried over with Migrate: bindings, identities, counters
// (moved to the new entity layout), entity names and listeners are all in
// the new maps, nothing is left beside the pin directory, and without
// Migrate the same pins are refused. An entity past a smaller max_entities
// that still has state refuses the migration and leaves the pins as they
// were.
func TestPinnedStateMigratesToOtherSizes(t *testing.T) {
	netns.RequireRoot(t, "loads BPF programs")
	opts := testOptions()
	opts.PinDir = filepath.Join(bpffs(t), "sluice")
	h := newHarness(t, opts)
	key := connKey(client4, broker4, 40100)
	if err := h.d.BindConns([]Binding{{Conn: key, Produce: 9, Fetch: 10}}); err != nil {
		t.Fatal(err)
	}
	h.run(Produce, toBroker(client4, broker4, 40100, 1, flagACK, make([]byte, 321)))
	if _, err := h.d.SaveEntity(9, 3, "alpha"); err != nil {
		t.Fatal(err)
	}
	if err := h.d.SaveIdentity(key, Identity{Mechanism: "PLAIN", User: "alice"}); err != nil {
		t.Fatal(err)
	}
	h.d.Close()
	// A pin standing where an agent pins its links: it must move with the
	// maps, and stay where it was when a migration is refused.
	linkPin := filepath.Join(opts.PinDir, "link_7_ingress")
	stand, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := stand.Pin(linkPin); err != nil {
		t.Fatal(err)
	}
	stand.Close()

	bigger := opts
	bigger.MaxConnections *= 2
	bigger.MaxEntities += 30
	if _, err := Load(bigger); !errors.Is(err, ErrIncompatiblePins) {
		t.Fatalf("other sizes without Migrate: %v, want ErrIncompatiblePins", err)
	}
	smaller := opts
	smaller.MaxEntities = 8 // entity 9 has counters
	smaller.Migrate = true
	if _, err := Load(smaller); !errors.Is(err, ErrIncompatiblePins) || !strings.Contains(err.Error(), "cannot shrink") {
		t.Fatalf("shrinking below an entity in use: %v, want a refusal saying so", err)
	}
	if left, err := PinnedBindings(opts.PinDir); err != nil || len(left) != 1 || left[0].Produce != 9 {
		t.Fatalf("a refused migration changed the pins: %+v %v", left, err)
	}
	if _, err := os.Stat(linkPin); err != nil {
		t.Fatalf("a refused migration lost the link pin: %v", err)
	}

	bigger.Migrate = true
	d, err := Load(bigger)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	defer d.Close()
	if !d.Adopted() || len(d.Migrated()) == 0 {
		t.Errorf("adopted %v, migrated %v", d.Adopted(), d.Migrated())
	}
	t.Logf("migrated: %v", d.Migrated())
	if b, ok, err := d.Binding(key); err != nil || !ok || b.Produce != 9 || b.Fetch != 10 {
		t.Errorf("binding after migration: %+v %v %v", b, ok, err)
	}
	if c, err := d.EntityCounters(Produce, 9); err != nil || c.Bytes != 321 {
		t.Errorf("produce counters of entity 9 after migration: %+v %v", c, err)
	}
	if c, err := d.EntityCounters(Fetch, 9); err != nil || c.Bytes != 0 {
		t.Errorf("fetch counters of entity 9 after migration: %+v %v (produce's must not land in fetch)", c, err)
	}
	names := map[uint32]string{}
	d.EachEntity(func(id uint32, _ uint8, name string) { names[id] = name })
	if names[9] != "alpha" {
		t.Errorf("entity names after migration: %v", names)
	}
	if id, ok, err := d.Identity(key); err != nil || !ok || id.User != "alice" {
		t.Errorf("identity after migration: %+v %v %v", id, ok, err)
	}
	if !d.listenerPorts[brokerPort] {
		t.Errorf("listeners after migration: %v", d.listenerPorts)
	}
	if _, err := os.Stat(linkPin); err != nil {
		t.Errorf("the link pin did not move with the maps: %v", err)
	}
	for _, pattern := range []string{"-tmp-*", "-old-*"} {
		if m, _ := filepath.Glob(opts.PinDir + pattern); len(m) != 0 {
			t.Errorf("left beside the pins: %v", m)
		}
	}
}

// A release that appends fields to the connection table's value (struct
// conn_state's latency state, then the pending request's size) carries an
// earlier agent's connections over: each old value is the new one's start,
// its new fields zero. Without the migration the same pins are refused.
func TestPinnedConnectionsCarriedIntoLongerValues(t *testing.T) {
	full := binary.Size(sluiceConnState{})
	for _, earlier := range []struct {
		name  string
		value int
	}{
		{"before latency", full - binary.Size(sluiceConnState{}.Lat)},
		// The release before req_size: the latency state without it and its pad.
		{"before request sizes", int(unsafe.Offsetof(sluiceConnState{}.Lat) + unsafe.Offsetof(sluiceConnState{}.Lat.ReqSize))},
	} {
		t.Run(earlier.name, func(t *testing.T) {
			opts := pinnedAndClosed(t)
			path := filepath.Join(opts.PinDir, "conns4")
			spec := &ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: uint32(binary.Size(sluiceConnKey4{})), ValueSize: uint32(earlier.value), MaxEntries: uint32(opts.MaxConnections)}
			old, err := ebpf.NewMap(spec)
			if err != nil {
				t.Fatal(err)
			}
			key := connKey(client4, broker4, 40200)
			k4, _ := key.raw4()
			value := make([]byte, spec.ValueSize)
			binary.NativeEndian.PutUint32(value[0:], 9)  // produce entity
			binary.NativeEndian.PutUint32(value[4:], 10) // fetch entity
			for i := 8; i < len(value); i++ {
				value[i] = 0x5a // tracking state, birth (and latency state), carried as they are
			}
			if err := old.Put(k4, value); err != nil {
				t.Fatal(err)
			}
			os.Remove(path)
			if err := old.Pin(path); err != nil {
				t.Fatal(err)
			}
			old.Close()

			// Tools and tests read what the earlier release left, as it is.
			if left, err := PinnedBindings(opts.PinDir); err != nil || len(left) != 1 || left[0].Conn != key || left[0].Produce != 9 || left[0].Fetch != 10 {
				t.Errorf("the earlier release's bindings read as %+v %v, want %s bound to 9/10", left, err, key)
			}
			if _, err := Load(opts); !errors.Is(err, ErrIncompatiblePins) {
				t.Fatalf("longer values without Migrate: %v, want ErrIncompatiblePins", err)
			}
			opts.Migrate = true
			d, err := Load(opts)
			if err != nil {
				t.Fatalf("migrate: %v", err)
			}
			defer d.Close()
			if b, ok, err := d.Binding(key); err != nil || !ok || b.Produce != 9 || b.Fetch != 10 {
				t.Errorf("binding after migration: %+v %v %v", b, ok, err)
			}
			carried := make([]byte, full)
			if err := d.objs.Conns4.Lookup(k4, carried); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(carried[:len(value)], value) || !bytes.Equal(carried[len(value):], make([]byte, full-len(value))) {
				t.Errorf("carried value % x: want the old %d bytes kept and the rest zero", carried, len(value))
			}
		})
	}
}
