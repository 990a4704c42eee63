package maps

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// cpuRings is one family of the data path's per-CPU rings (the sample
// rings, the latency rings), memory-mapped: per possible CPU a struct
// sample_ring (head, written by the data path on that CPU; tail, by the
// reader) over that CPU's run of perCPU slots of an mmapable array. The
// data path writes a slot, then publishes it by moving head
// (bpf/helpers.h, publish_head); the reader reads the slots up to head and
// hands them back by moving tail. One reader at a time: the tails are its.
type cpuRings struct {
	slots    []byte // CPUs * perCPU slots, read only
	rings    []byte // one struct sample_ring per CPU
	cpus     int
	perCPU   uint64
	slotSize int
}

// Layout of struct sample_ring (bpf/types.h), checked in tests.
const (
	ringOffHead = 0
	ringOffTail = 64
	ringSize    = 128
)

// mapRings maps the slots and rings of one family, each CPU owning
// perCPU slots.
func mapRings(slots, rings *ebpf.Map, perCPU int) (r cpuRings, err error) {
	r = cpuRings{cpus: int(rings.MaxEntries()), perCPU: uint64(perCPU), slotSize: int((slots.ValueSize() + 7) &^ 7)}
	defer func() {
		if err != nil {
			r.unmap()
		}
	}()
	if r.slots, err = mapMemory(slots, unix.PROT_READ); err != nil {
		return r, fmt.Errorf("map slots: %w", err)
	}
	if r.rings, err = mapMemory(rings, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		return r, fmt.Errorf("map rings: %w", err)
	}
	if len(r.slots) < r.cpus*perCPU*r.slotSize || len(r.rings) < r.cpus*ringSize {
		return r, fmt.Errorf("slots and rings are smaller than %d CPUs of %d slots", r.cpus, perCPU)
	}
	return r, nil
}

// mapMemory maps a BPF_F_MMAPABLE array's values (laid out back to back
// from offset 0, each rounded up to 8 bytes). Not the library's
// Map.Memory: it offers only copying reads and writes, and the rings'
// head and tail need atomic loads and stores.
func mapMemory(m *ebpf.Map, prot int) ([]byte, error) {
	size := int(m.MaxEntries()) * int((m.ValueSize()+7)&^7)
	page := os.Getpagesize()
	size = (size + page - 1) / page * page
	return unix.Mmap(m.FD(), 0, size, prot, unix.MAP_SHARED)
}

// mapped tells whether the rings are still mapped (not after unmap).
func (r *cpuRings) mapped() bool { return r.rings != nil }

func (r *cpuRings) unmap() {
	for _, m := range [][]byte{r.slots, r.rings} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.slots, r.rings = nil, nil
}

// ring returns CPU cpu's head and tail in the mapped rings.
func (r *cpuRings) ring(cpu int) (head, tail *uint64) {
	return (*uint64)(unsafe.Pointer(&r.rings[cpu*ringSize+ringOffHead])),
		(*uint64)(unsafe.Pointer(&r.rings[cpu*ringSize+ringOffTail]))
}

// slot returns the bytes of CPU cpu's slot at ring position pos.
func (r *cpuRings) slot(cpu int, pos uint64) []byte {
	off := (cpu*int(r.perCPU) + int(pos%r.perCPU)) * r.slotSize
	return r.slots[off : off+r.slotSize]
}

// drain calls take with every slot published since the last drain, one
// CPU after another and in order on each, and hands the slots back to the
// data path: take must copy what it keeps.
func (r *cpuRings) drain(take func(slot []byte)) {
	for cpu := 0; cpu < r.cpus; cpu++ {
		head, tail := r.ring(cpu)
		// The atomic load of head orders the slot reads after it; the
		// atomic store of tail orders them before the data path may
		// write those slots again.
		end, next := atomic.LoadUint64(head), atomic.LoadUint64(tail)
		if end-next > r.perCPU {
			next = end - r.perCPU // cannot happen while this reader owns tail
		}
		for ; next != end; next++ {
			take(r.slot(cpu, next))
		}
		atomic.StoreUint64(tail, end)
	}
}

// pollInterval is how often a reader looks at its rings when they are
// empty: a sample reaches the learner within two of them (see stitcher), a
// latency measurement within one, and each CPU's ring must hold what it
// publishes in one (Options.SampleSlotsPerCPU, latencySlotsPerCPU).
const pollInterval = 10 * time.Millisecond

// pacer waits between a reader's polls of empty rings.
type pacer struct {
	timer *time.Timer
}

// wait returns after pollInterval, or at deadline if that is sooner (the
// zero time: no deadline), or with ErrClosed once closed is.
func (p *pacer) wait(deadline time.Time, closed <-chan struct{}) error {
	wait := pollInterval
	if !deadline.IsZero() {
		wait = min(wait, time.Until(deadline))
	}
	if p.timer == nil {
		p.timer = time.NewTimer(wait)
	} else {
		p.timer.Reset(wait) // Go ≥ 1.23: no stale tick to drain
	}
	select {
	case <-closed:
		return ErrClosed
	case <-p.timer.C:
		return nil
	}
}

// polledReader is what both ring readers share: the per-CPU rings, the
// items decoded and not yet returned, the deadline, the pacing of polls,
// and closing (which frees the rings for the next reader of owner).
type polledReader[T any] struct {
	cpuRings
	ready    []T
	deadline time.Time
	pace     pacer // paces polls while the rings are empty
	closed   chan struct{}
	once     sync.Once
	mu       sync.Mutex   // keeps Close from unmapping the rings under a poll
	owner    *atomic.Bool // the data path's "a reader is open" flag
}

func newPolledReader[T any](rings cpuRings, owner *atomic.Bool) polledReader[T] {
	return polledReader[T]{cpuRings: rings, closed: make(chan struct{}), owner: owner}
}

// SetDeadline bounds Read: past it, Read returns os.ErrDeadlineExceeded
// once the rings are empty. The zero time waits for ever.
func (r *polledReader[T]) SetDeadline(t time.Time) { r.deadline = t }

// next returns the next item, polling (poll appends to ready; final says
// the deadline has passed) until one is ready, the deadline passes or the
// reader closes.
func (r *polledReader[T]) next(poll func(final bool) error) (T, error) {
	var zero T
	for len(r.ready) == 0 {
		final := !r.deadline.IsZero() && !time.Now().Before(r.deadline)
		if err := poll(final); err != nil {
			return zero, err
		}
		if len(r.ready) > 0 {
			break
		}
		if final {
			return zero, os.ErrDeadlineExceeded
		}
		if err := r.pace.wait(r.deadline, r.closed); err != nil {
			return zero, err
		}
	}
	v := r.ready[0]
	r.ready = r.ready[1:]
	return v, nil
}

// Close ends Read and unmaps the rings; safe from any goroutine, and more
// than once.
func (r *polledReader[T]) Close() error {
	r.once.Do(func() {
		close(r.closed)
		r.mu.Lock()
		r.unmap()
		r.mu.Unlock()
		r.owner.Store(false)
	})
	return nil
}
