package agent

import (
	"errors"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/maps"
)

type fakeDataPath struct {
	mu         sync.Mutex
	bytes      [2]map[uint32]uint64
	bindings   map[maps.ConnKey]maps.Binding
	heartbeats []time.Duration
	settings   maps.Settings
	listeners  []uint16
	exempt     []netip.Prefix
	peers      []maps.PeerEntity
	resets     []uint32
	readIDs    []int // each ReadCounters' ids
	// failSettings, when set, fails SetSettings.
	failSettings error
	faults       *writeFaults // nil: every write succeeds
}

// writeFaults fails one write the agent makes to the data path, a shaper
// or one of its factories: the failAt-th (counting from 1; 0 fails none).
// A write made of parts (a table, a batch) fails after applying half of
// them, as a kernel map or netlink batch refused part-way leaves them, so
// an undo must put back what a failed write half did.
type writeFaults struct {
	n, failAt int
	calls     []string
}

var errPartway = errors.New("injected failure part-way through a write")

// hit counts a write and says whether it must fail.
func (w *writeFaults) hit(name string) bool {
	if w == nil {
		return false
	}
	w.n++
	w.calls = append(w.calls, name)
	return w.n == w.failAt
}

func newFakeDataPath() *fakeDataPath {
	return &fakeDataPath{bytes: [2]map[uint32]uint64{{}, {}}, bindings: map[maps.ConnKey]maps.Binding{}}
}

func (f *fakeDataPath) add(dir maps.Direction, entity uint32, n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bytes[dir][entity] += n
}

// ReadCounters reads what the real one does: the entities below ids, the
// rest left as they were.
func (f *fakeDataPath) ReadCounters(dst *[2][]maps.Counters, ids int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readIDs = append(f.readIDs, ids)
	for d := range dst {
		for e := range min(ids, len(dst[d])) {
			dst[d][e].Bytes = f.bytes[d][uint32(e)]
		}
	}
	return nil
}
func (f *fakeDataPath) BindConns(b []maps.Binding) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.faults.hit("BindConns") {
		for _, x := range b[:len(b)/2] {
			f.bindings[x.Conn] = x
		}
		return errPartway
	}
	for _, x := range b {
		f.bindings[x.Conn] = x
	}
	return nil
}
func (f *fakeDataPath) EachBinding(fn func(maps.Binding)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.bindings {
		fn(b)
	}
	return nil
}
func (f *fakeDataPath) ForgetConns(conns []maps.ConnKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.faults.hit("ForgetConns") {
		for _, c := range conns[:len(conns)/2] {
			delete(f.bindings, c)
		}
		return errPartway
	}
	for _, c := range conns {
		delete(f.bindings, c)
	}
	return nil
}
func (f *fakeDataPath) ResetCounters(ids []uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		delete(f.bytes[0], id)
		delete(f.bytes[1], id)
	}
	f.resets = append(f.resets, ids...)
	return nil
}
func (f *fakeDataPath) Heartbeat(now time.Duration) error {
	f.heartbeats = append(f.heartbeats, now)
	return nil
}
func (f *fakeDataPath) SetSettings(s maps.Settings) error {
	if f.failSettings != nil {
		return f.failSettings
	}
	if f.faults.hit("SetSettings") {
		return errPartway
	}
	f.settings = s
	return nil
}
func (f *fakeDataPath) ReadSettings() (maps.Settings, error) { return f.settings, nil }
func (f *fakeDataPath) SetListeners(p []uint16) error {
	if f.faults.hit("SetListeners") { // the new ports added, the old not yet removed
		f.listeners = append(slices.Clone(f.listeners), p...)
		return errPartway
	}
	f.listeners = p
	return nil
}
func (f *fakeDataPath) SetExempt(p []netip.Prefix) error { f.exempt = p; return nil }
func (f *fakeDataPath) SetExemptTable(p []netip.Prefix) (added, removed []netip.Prefix, err error) {
	if f.faults.hit("SetExemptTable") { // the new ranges added, the old not yet removed
		for _, x := range p {
			if !slices.Contains(f.exempt, x) {
				f.exempt = append(slices.Clone(f.exempt), x)
			}
		}
		return nil, nil, errPartway
	}
	for _, x := range p {
		if !slices.Contains(f.exempt, x) {
			added = append(added, x)
		}
	}
	for _, x := range f.exempt {
		if !slices.Contains(p, x) {
			removed = append(removed, x)
		}
	}
	f.exempt = p
	return added, removed, nil
}
func (f *fakeDataPath) Stats() (maps.Stats, error) { return maps.Stats{}, nil }
func (f *fakeDataPath) SetPeerEntities(e []maps.PeerEntity) error {
	if f.faults.hit("SetPeerEntities") {
		f.peers = e[:len(e)/2]
		return errPartway
	}
	f.peers = e
	return nil
}

type fakeShaper struct {
	faults     *writeFaults
	kind       shaping.Kind // "" reads as htb
	closed     bool
	failWrite  bool
	failRemove bool
	failHeld   bool
	rates      [2]map[uint32]float64
	guaranteed [2]map[uint32]float64
	capacity   [2]float64
	writes     int
	throttled  [2]map[uint32]bool
	// stats, when set for an entity, is what Held says of it besides
	// Throttled (queue, drops, bytes sent).
	stats   [2]map[uint32]shaping.Held
	removed []uint32
}

func newFakeShaper() *fakeShaper {
	return &fakeShaper{rates: [2]map[uint32]float64{{}, {}}, guaranteed: [2]map[uint32]float64{{}, {}}, throttled: [2]map[uint32]bool{{}, {}}}
}

func (s *fakeShaper) Kind() shaping.Kind {
	if s.kind == "" {
		return shaping.KindHTB
	}
	return s.kind
}
func (s *fakeShaper) SetRates(dir maps.Direction, rates []shaping.Rate) (err error) {
	if s.failWrite {
		return errors.New("netlink: no buffer space available")
	}
	if s.faults.hit("SetRates") {
		rates = rates[:len(rates)/2]
		defer func() { err = errPartway }()
	}
	for _, r := range rates {
		s.rates[dir][r.Entity] = r.BytesPerSecond
		s.guaranteed[dir][r.Entity] = r.Guaranteed
		s.writes++
	}
	return nil
}
func (s *fakeShaper) SetCapacity(dir maps.Direction, bps float64) error {
	if s.faults.hit("SetCapacity") {
		return errPartway
	}
	s.capacity[dir] = bps
	return nil
}
func (s *fakeShaper) Remove(dir maps.Direction, e uint32) error {
	if s.failRemove {
		return errors.New("netlink: device or resource busy")
	}
	if s.faults.hit("Remove") {
		return errPartway
	}
	delete(s.rates[dir], e)
	delete(s.guaranteed[dir], e)
	s.removed = append(s.removed, e)
	return nil
}
func (s *fakeShaper) Held(dir maps.Direction) ([]shaping.Held, error) {
	if s.failHeld {
		return nil, errors.New("netlink: no buffer space available")
	}
	// Sized up front as htb's is: grown by append, this fake's slice was a
	// sixth of BenchmarkControlCycle's time and most of its allocations.
	out := make([]shaping.Held, 0, len(s.rates[dir]))
	for e := range s.rates[dir] {
		h := s.stats[dir][e]
		h.Entity, h.Throttled = e, s.throttled[dir][e]
		out = append(out, h)
	}
	return out, nil
}
func (s *fakeShaper) Close() error {
	s.closed = true
	if s.faults.hit("Close") { // closed all the same: a tree half torn down is gone
		return errPartway
	}
	return nil
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time           { return c.t }
func (c *fakeClock) Monotonic() time.Duration { return time.Duration(c.t.UnixNano()) }
func (c *fakeClock) advance(d time.Duration)  { c.t = c.t.Add(d) }

// storingDataPath is a fake data path that also keeps the registry, as the
// pinned entity-name map does (names over maps.EntityNameMax are not kept).
type storingDataPath struct {
	*fakeDataPath
	names map[uint32]savedEntity
}

type savedEntity struct {
	kind uint8
	name string
}

func newStoringDataPath() *storingDataPath {
	return &storingDataPath{fakeDataPath: newFakeDataPath(), names: map[uint32]savedEntity{}}
}

func (s *storingDataPath) SaveEntity(id uint32, kind uint8, name string) (bool, error) {
	if s.faults.hit("SaveEntity") {
		return false, errPartway
	}
	if len(name) > maps.EntityNameMax {
		return false, nil
	}
	s.names[id] = savedEntity{kind, name}
	return true, nil
}

func (s *storingDataPath) DeleteEntity(id uint32) error {
	if s.faults.hit("DeleteEntity") {
		return errPartway
	}
	delete(s.names, id)
	return nil
}

func (s *storingDataPath) EachEntity(fn func(id uint32, kind uint8, name string)) error {
	for id, e := range s.names {
		fn(id, e.kind, e.name)
	}
	return nil
}
