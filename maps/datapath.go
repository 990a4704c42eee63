// Package maps is the only Go package that knows the data path's BPF map
// layouts. It loads the programs of bpf/ (compiled by bpf2go, output
// committed), optionally pins their maps by name under a bpffs directory so
// they survive an agent restart, and exports domain verbs: bind connections
// to entities, set listeners, exempt peers and live settings, read counters
// and statistics, read request samples stitched from the fragments of
// per-CPU sample rings, and read request latency measurements from per-CPU
// latency rings. It hands out *ebpf.Program only for attaching.
//
// Ownership: a Datapath owns its programs and maps and closes them in Close;
// pinned maps outlive it until Unpin.
package maps

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Entity ids as the data path reads them (see agent/entity for their meaning).
const (
	EntityUnknown uint32 = 0
	NotGoverned   uint32 = 0xffffffff
)

// SampleMax is the most request bytes a sample carries (SAMPLE_MAX in bpf/types.h).
const SampleMax = 512

// Options sizes and tunes the data path at load time.
type Options struct {
	// MaxEntities is the number of entity ids per direction the counters and
	// classes maps hold (unknown and overflow included).
	MaxEntities int
	// MaxConnections sizes the connection table (LRU).
	MaxConnections int
	// SampleBytes is how many bytes of a request's start a sample carries (≤ SampleMax).
	SampleBytes int
	// FirstRequestsSampled requests of every connection are always sampled.
	FirstRequestsSampled int
	// SampleSlotsPerCPU sizes each CPU's sample ring (a power of two): the
	// fragments a CPU can hold between two polls of the agent (~600 bytes
	// each; samples.go).
	SampleSlotsPerCPU int
	// PinDir, when set, pins the maps by name there (a bpffs directory).
	PinDir string
	// Migrate carries pinned maps of other sizes over into new ones
	// (migrate.go) instead of refusing them with ErrIncompatiblePins.
	Migrate bool

	// benchRewind makes the program undo its request tracking after each
	// run, so a benchmark can replay one packet (BPF_PROG_TEST_RUN).
	benchRewind bool
	// noFlowCache turns the per-CPU flow cache off (bpf/flowcache.h), so
	// tests and benchmarks can compare the data path with and without it.
	noFlowCache bool
	// noStoreRelease keeps the sample publication's full barrier where the
	// kernel has a store-release (publish.go), so tests cover both.
	noStoreRelease bool
	// latencyExpire and latencyUnsyncedWait, when set, replace how long a
	// request may stay pending unanswered, and hold its place on a stream
	// not followed (bpf/latency.h), for tests.
	latencyExpire, latencyUnsyncedWait time.Duration
	// latencySlotsPerCPU, when set, replaces latencySlotsPerCPU (a power
	// of two), for benchmarks that measure more requests than it holds.
	latencySlotsPerCPU int
}

// latencySlotsPerCPU sizes each CPU's latency ring: the measurements a CPU
// can hold between two polls of the agent (88 bytes each; latency.go).
// Measured requests are sampled ones, at most one pending per connection:
// twice the default sample ring's slots leaves room.
const latencySlotsPerCPU = 512

// latencySlots is the latency ring's slots per CPU with opts.
func (o Options) latencySlots() int {
	if o.latencySlotsPerCPU > 0 {
		return o.latencySlotsPerCPU
	}
	return latencySlotsPerCPU
}

// DefaultOptions are the defaults of the configuration.
func DefaultOptions() Options {
	return Options{
		MaxEntities:          65536 + 2,
		MaxConnections:       262144,
		SampleBytes:          256,
		FirstRequestsSampled: 8,
		SampleSlotsPerCPU:    256,
	}
}

// ErrIncompatiblePins: maps pinned by an earlier agent have a different
// layout or size; they must be removed (sluice unload) before loading.
var ErrIncompatiblePins = errors.New("pinned maps are incompatible with this data path")

// ErrPinDirBusy: another agent holds the pin directory.
var ErrPinDirBusy = errors.New("pin directory is in use by another sluice agent")

// Datapath is the loaded programs and maps.
type Datapath struct {
	objs   sluiceObjects
	opts   Options
	pinDir string
	lock   *os.File // flock on the pin directory while loaded
	// adopted: the pins were there before Load (an earlier agent's).
	adopted bool
	// migrated: the maps carried over from pins of other sizes (Migrated).
	migrated []string
	// listenerPorts remembers what SetListeners set, to clear it next time.
	listenerPorts map[uint16]bool
	exemptSet     map[sluiceExemptKey]bool
	exemptRead    bool                   // exemptSet holds what the pinned trie held at load
	peerSet       map[sluicePeerKey]bool // what SetPeerEntities set
	// sampleReaderOpen: a SampleReader owns the sample rings' tails;
	// latencyReaderOpen: a LatencyReader the latency rings'.
	sampleReaderOpen, latencyReaderOpen atomic.Bool
}

// SamplePublication says how the data path publishes samples (and
// latency measurements, the same way): a
// store-release, or a full barrier on kernels before 6.15 (publish.go).
func (d *Datapath) SamplePublication() string { return publication(d.opts) }

func (o Options) validate() error {
	switch {
	case o.MaxEntities < 2 || o.MaxEntities > 1<<24:
		return fmt.Errorf("max entities %d outside [2, %d]", o.MaxEntities, 1<<24)
	case o.MaxConnections < 1:
		return fmt.Errorf("max connections %d must be positive", o.MaxConnections)
	case o.SampleBytes < 16 || o.SampleBytes > SampleMax:
		return fmt.Errorf("sample bytes %d outside [16, %d]", o.SampleBytes, SampleMax)
	case o.FirstRequestsSampled < 0:
		return fmt.Errorf("first requests sampled %d must not be negative", o.FirstRequestsSampled)
	case o.SampleSlotsPerCPU < 1 || o.SampleSlotsPerCPU > 1<<16 || o.SampleSlotsPerCPU&(o.SampleSlotsPerCPU-1) != 0:
		return fmt.Errorf("sample slots per CPU %d must be a power of two in [1, %d]", o.SampleSlotsPerCPU, 1<<16)
	case o.latencySlots() > 1<<16 || o.latencySlots()&(o.latencySlots()-1) != 0:
		return fmt.Errorf("latency slots per CPU %d must be a power of two in [1, %d]", o.latencySlots(), 1<<16)
	}
	return nil
}

// Spec returns the data path's collection spec sized and tuned by opts,
// for loading (and for `sluice check-config`, which only verifies).
func Spec(opts Options) (*ebpf.CollectionSpec, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("data path options: %w", err)
	}
	spec, err := loadSluice()
	if err != nil {
		return nil, fmt.Errorf("read embedded data path: %w", err)
	}
	// Each family's table can hold every connection (a host may be IPv6 only).
	spec.Maps["conns4"].MaxEntries = uint32(opts.MaxConnections)
	spec.Maps["conns6"].MaxEntries = uint32(opts.MaxConnections)
	spec.Maps["identities"].MaxEntries = uint32(opts.MaxConnections)
	spec.Maps["counters"].MaxEntries = uint32(2 * opts.MaxEntities)
	spec.Maps["classes"].MaxEntries = uint32(2 * opts.MaxEntities)
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("count possible CPUs: %w", err)
	}
	spec.Maps["sample_rings"].MaxEntries = uint32(cpus)
	spec.Maps["sample_slots"].MaxEntries = uint32(cpus * opts.SampleSlotsPerCPU)
	spec.Maps["latency_rings"].MaxEntries = uint32(cpus)
	spec.Maps["latency_slots"].MaxEntries = uint32(cpus * opts.latencySlots())
	spec.Maps["entity_names"].MaxEntries = uint32(opts.MaxEntities)
	for _, name := range []string{"rates", "clocks", "buckets"} {
		spec.Maps[name].MaxEntries = uint32(2 * opts.MaxEntities)
	}
	vars := map[string]any{
		"max_entities":           uint32(opts.MaxEntities),
		"sample_bytes":           uint32(opts.SampleBytes),
		"first_requests_sampled": uint32(opts.FirstRequestsSampled),
		"slots_per_cpu":          uint32(opts.SampleSlotsPerCPU),
		"latency_slots_per_cpu":  uint32(opts.latencySlots()),
		"bench_rewind":           boolByte(opts.benchRewind),
		"flow_cache_on":          boolByte(!opts.noFlowCache),
		"flow_seed":              flowSeed(),
	}
	if opts.latencyExpire > 0 {
		vars["latency_expire_ns"] = uint64(opts.latencyExpire)
	}
	if opts.latencyUnsyncedWait > 0 {
		vars["latency_unsynced_wait_ns"] = uint64(opts.latencyUnsyncedWait)
	}
	for name, v := range vars {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	if publication(opts) == PublishStoreRelease {
		if err := useStoreRelease(spec); err != nil {
			return nil, fmt.Errorf("sample publication: %w", err)
		}
	}
	return spec, nil
}

// flowSeed seeds the flow cache's hash, so that a client cannot choose
// ports that share a slot with another tenant's connection.
func flowSeed() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return binary.NativeEndian.Uint32(b[:])
}

// pinnedMaps survive an agent restart: connection attribution, tracking,
// counters, classes and settings, so a restart resets no flow.
var pinnedMaps = []string{"conns4", "conns6", "counters", "classes", "settings", "listeners", "exempt", "peer_entities", "stats", "entity_names", "rates", "clocks", "buckets", "identities"}

// retiredPins are maps an earlier data path pinned and this one no longer
// has: an upgraded agent removes them, else their memory (tens of MB for
// connection tables) stays held until `sluice unload`.
var retiredPins = []string{
	"conns",  // one table for both families, before conns4 and conns6
	"tracks", // request tracking, now beside the entities in conns4 and conns6
}

func removeRetiredPins(dir string) error {
	for _, name := range retiredPins {
		if err := removePin(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("remove retired pin: %w", err)
		}
	}
	return nil
}

// Load loads the data path. With opts.PinDir it pins (or re-adopts) the
// maps there: created atomically (a temporary directory renamed into
// place), guarded by a flock, and checked for compatibility before reuse.
func Load(opts Options) (*Datapath, error) {
	spec, err := Spec(opts)
	if err != nil {
		return nil, err
	}
	d := &Datapath{opts: opts, pinDir: opts.PinDir, listenerPorts: map[uint16]bool{}, exemptSet: map[sluiceExemptKey]bool{}, peerSet: map[sluicePeerKey]bool{}}
	var collOpts ebpf.CollectionOptions
	var tmp string
	if opts.PinDir != "" {
		if err := checkPinDir(opts.PinDir); err != nil {
			return nil, err
		}
		if err := checkOwned(opts.PinDir); err != nil {
			return nil, err
		}
		for _, name := range pinnedMaps {
			spec.Maps[name].Pinning = ebpf.PinByName
		}
		pinPath := opts.PinDir
		if _, err := os.Stat(opts.PinDir); errors.Is(err, os.ErrNotExist) {
			// bpffs refuses names with a dot.
			tmp = fmt.Sprintf("%s-tmp-%d", opts.PinDir, os.Getpid())
			if err := os.Mkdir(tmp, 0o700); err != nil {
				return nil, fmt.Errorf("create pin directory: %w", err)
			}
			pinPath = tmp
		}
		lock, err := lockDir(pinPath)
		if err != nil {
			if tmp != "" {
				removeOwnPinTree(tmp)
			}
			return nil, err
		}
		d.lock = lock
		collOpts.Maps.PinPath = pinPath
	}
	if err := spec.LoadAndAssign(&d.objs, &collOpts); err != nil {
		d.unlock()
		if tmp != "" {
			removeOwnPinTree(tmp)
		}
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			if opts.Migrate && tmp == "" {
				lock, lerr := lockDir(opts.PinDir)
				if lerr != nil {
					return nil, lerr
				}
				return migrate(opts, spec, lock, err)
			}
			return nil, fmt.Errorf("%w (%s): %v", ErrIncompatiblePins, opts.PinDir, err)
		}
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load data path: verifier: %+v", verr)
		}
		return nil, fmt.Errorf("load data path: %w", err)
	}
	d.adopted = opts.PinDir != "" && tmp == ""
	if tmp != "" {
		// The mark goes in before the rename: the directory appears
		// whole, pins and mark, or not at all.
		if err := markOwned(tmp); err != nil {
			d.Close()
			removeOwnPinTree(tmp)
			return nil, err
		}
		if err := os.Rename(tmp, opts.PinDir); err != nil {
			d.Close()
			removeOwnPinTree(tmp)
			return nil, fmt.Errorf("move pins into place: %w", err)
		}
	} else if err := removeRetiredPins(opts.PinDir); err != nil {
		d.Close()
		return nil, err
	}
	if d.adopted {
		// An earlier release's directory, or an empty one: marked now.
		if err := markOwned(opts.PinDir); err != nil {
			d.Close()
			return nil, err
		}
	}
	if err := d.readListeners(); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.readPeerEntities(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Adopted reports whether Load found the pins an earlier agent left (and
// so re-adopted its bindings, counters and settings) rather than making
// them.
func (d *Datapath) Adopted() bool { return d.adopted }

// Close releases the programs and maps (pins, if any, stay).
func (d *Datapath) Close() error {
	err := d.objs.Close()
	d.unlock()
	return err
}

// Unpin removes the pinned maps: the next Load starts from empty tables.
func (d *Datapath) Unpin() error {
	if d.pinDir == "" {
		return nil
	}
	_, err := Unpin(d.pinDir)
	return err
}

// IngressProgram and EgressProgram are for attaching; Datapath keeps
// ownership.
func (d *Datapath) IngressProgram() *ebpf.Program { return d.objs.SluiceIngress }
func (d *Datapath) EgressProgram() *ebpf.Program  { return d.objs.SluiceEgress }

// EgressSelectProgram is the classic (not direct-action) cls_bpf program
// that matches the egress segments sluice_egress classified, for a filter
// whose mirred action moves them to the shared egress IFB (htb on several
// interfaces).
func (d *Datapath) EgressSelectProgram() *ebpf.Program { return d.objs.SluiceEgressSelect }

// MaxEntities is the number of entity ids per direction.
func (d *Datapath) MaxEntities() int { return d.opts.MaxEntities }

func (d *Datapath) unlock() {
	if d.lock != nil {
		unix.Flock(int(d.lock.Fd()), unix.LOCK_UN)
		d.lock.Close()
		d.lock = nil
	}
}

func lockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open pin directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrPinDirBusy, dir)
		}
		return nil, fmt.Errorf("lock pin directory: %w", err)
	}
	return f, nil
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
