package maps

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Direction indexes counters and classes: 0 produce (ingress), 1 fetch (egress).
type Direction int

const (
	Produce Direction = 0
	Fetch   Direction = 1
)

// Counters are an entity's totals in one direction since its slot was last
// reset, summed over CPUs.
type Counters struct {
	Bytes       uint64 // TCP payload bytes
	Packets     uint64 // segments carrying payload
	HeldBytes   uint64 // bytes a BPF shaper held back
	HeldPackets uint64
}

// CounterReader reads the counters of the entities handed out, in
// batches, reusing its buffers from cycle to cycle.
type CounterReader struct {
	d      *Datapath
	cpus   int
	keys   []uint32
	values []sluiceEntityCounters
	// from and next are the batch's in and out cursors (a key each), on the
	// heap beside the buffers the kernel writes.
	from, next uint32
}

const counterBatch = 4096

// NewCounterReader returns a reader for d's counters.
func (d *Datapath) NewCounterReader() (*CounterReader, error) {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("count possible CPUs: %w", err)
	}
	return &CounterReader{
		d:      d,
		cpus:   cpus,
		keys:   make([]uint32, counterBatch),
		values: make([]sluiceEntityCounters, counterBatch*cpus),
	}, nil
}

// Read fills dst[dir][entity] for both directions and every entity below
// ids (the ids handed out so far: the agent's registry's extent); each
// dst[dir] must hold MaxEntities counters, and entries at or past ids are
// left as they were. Reading all 2 × MaxEntities slots, 8 MB on two CPUs,
// cost the broker host 50-60 ms of CPU a second in one burst, seen in the
// tenants' p99; a registry of a few entities now costs a few slots.
func (r *CounterReader) Read(dst *[2][]Counters, ids int) error {
	max := r.d.opts.MaxEntities
	for dir := range dst {
		if len(dst[dir]) < max {
			return fmt.Errorf("read counters: room for %d entities, need %d", len(dst[dir]), max)
		}
	}
	ids = min(ids, max)
	for dir := range dst {
		for done := 0; done < ids; {
			n := min(len(r.keys), ids-done)
			got, end, err := r.lookupFrom(uint32(dir*max+done), n)
			if err != nil {
				return fmt.Errorf("read counters: %w", err)
			}
			for i := range got {
				key := int(r.keys[i])
				dst[key/max][key%max] = sumCPUs(r.values[i*r.cpus : (i+1)*r.cpus])
			}
			done += got
			if end || got == 0 {
				break
			}
		}
	}
	return nil
}

// batchAttr is union bpf_attr's batch member (BPF_MAP_LOOKUP_BATCH); the
// pointers are unsafe.Pointer, 64 bits on the 64-bit hosts sluice runs on,
// so that the collector sees them.
type batchAttr struct {
	inBatch, outBatch, keys, values unsafe.Pointer
	count, mapFD                    uint32
	elemFlags, flags                uint64
}

// The kernel's batch member is 56 bytes, its pointers __aligned_u64: a
// build whose pointers are not 64 bits does not compile (one of these
// lengths would be negative).
var (
	_ [56 - unsafe.Sizeof(batchAttr{})]struct{}
	_ [unsafe.Sizeof(batchAttr{}) - 56]struct{}
)

// lookupFrom reads n counter slots from key start on into r.keys and
// r.values, with one BPF_MAP_LOOKUP_BATCH; end says the map ended first.
// cilium/ebpf's batch cursor starts every walk at key 0 and is opaque, so
// reaching the fetch half (keys from MaxEntities on) would mean copying
// the whole produce half first. An array's batch starts after the key
// in_batch holds: start-1 (none for key 0).
func (r *CounterReader) lookupFrom(start uint32, n int) (got int, end bool, err error) {
	attr := batchAttr{outBatch: unsafe.Pointer(&r.next), keys: unsafe.Pointer(&r.keys[0]),
		values: unsafe.Pointer(&r.values[0]), count: uint32(n), mapFD: uint32(r.d.objs.Counters.FD())}
	if start > 0 {
		r.from = start - 1
		attr.inBatch = unsafe.Pointer(&r.from)
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_LOOKUP_BATCH, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(r)
	switch {
	case errno == unix.ENOENT: // the map's last key was read (or none was left)
		return int(attr.count), true, nil
	case errno != 0:
		return 0, false, errno
	}
	return int(attr.count), false, nil
}

// EntityCounters reads one entity's counters in one direction.
func (d *Datapath) EntityCounters(dir Direction, entity uint32) (Counters, error) {
	var perCPU []sluiceEntityCounters
	key := uint32(int(dir)*d.opts.MaxEntities) + entity
	if err := d.objs.Counters.Lookup(key, &perCPU); err != nil {
		return Counters{}, fmt.Errorf("read counters of entity %d: %w", entity, err)
	}
	return sumCPUs(perCPU), nil
}

// sumCPUs adds one entity's per-CPU counters.
func sumCPUs(perCPU []sluiceEntityCounters) Counters {
	var sum Counters
	for _, v := range perCPU {
		sum.Bytes += v.Bytes
		sum.Packets += v.Packets
		sum.HeldBytes += v.HeldBytes
		sum.HeldPackets += v.HeldPackets
	}
	return sum
}

// ResetCounters zeroes the counters of entities whose ids the registry
// reclaimed, in both directions, before the ids are reused.
func (d *Datapath) ResetCounters(entities []uint32) error {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	zero := make([]sluiceEntityCounters, cpus)
	for _, e := range entities {
		for dir := 0; dir < 2; dir++ {
			key := uint32(dir*d.opts.MaxEntities) + e
			if err := d.objs.Counters.Put(key, zero); err != nil {
				return fmt.Errorf("reset counters of entity %d: %w", e, err)
			}
		}
	}
	return nil
}

// Stats are the data path's own counters.
type Stats struct {
	Samples, Fragments uint64 // sample first fragments and continuations sent
	BudgetDrops        uint64 // request starts not sampled: the connection's budget was spent
	RingBufferDrops    uint64 // fragments not sent: their CPU's sample ring was full
	Desyncs, Resyncs   uint64 // request tracking lost and found again
	ExemptConnections  uint64 // connections marked exempt
	FailOpenPackets    uint64 // governed segments passed because the heartbeat was stale
	// ExemptBytes are the payload bytes of exempt peers per direction
	// (produce, fetch): replication, counted and never held back.
	ExemptBytes [2]uint64
	// Unproven counts segments of connections the broker had not answered
	// yet (a client's first request, or stray and spoofed segments):
	// charged to the unknown entity, never entered in the table.
	Unproven uint64
	// Request latency (LatencyReader): requests measured, measurements
	// lost to a full ring, pending requests given up unanswered, and
	// response tracking lost and found again.
	LatencyEvents, LatencyDrops, LatencyExpired uint64
	ResponseDesyncs, ResponseResyncs            uint64
}

// Stats sums the data path's statistics over CPUs.
func (d *Datapath) Stats() (Stats, error) {
	var s Stats
	fields := []*uint64{&s.Samples, &s.Fragments, &s.BudgetDrops, &s.RingBufferDrops, &s.Desyncs, &s.Resyncs, &s.ExemptConnections, &s.FailOpenPackets,
		&s.ExemptBytes[0], &s.ExemptBytes[1], &s.Unproven, &s.LatencyEvents, &s.LatencyDrops, &s.LatencyExpired, &s.ResponseDesyncs, &s.ResponseResyncs}
	if len(fields) != int(sluiceStatSTAT_MAX) {
		return s, fmt.Errorf("data path has %d statistics, this build knows %d", sluiceStatSTAT_MAX, len(fields))
	}
	for i, f := range fields {
		var perCPU []uint64
		if err := d.objs.Stats.Lookup(uint32(i), &perCPU); err != nil {
			return s, fmt.Errorf("read statistics: %w", err)
		}
		for _, v := range perCPU {
			*f += v
		}
	}
	return s, nil
}
