package maps

import (
	"testing"

	"github.com/cilium/ebpf"
)

// The reader reads the entities below the ids it is given, in both
// directions (the fetch half starts at MaxEntities: a walk from key 0
// would not get there without reading the produce half), in batches of
// any size, and leaves every entry at or past ids as it was.
func TestCounterReaderReadsOnlyTheIDsHandedOut(t *testing.T) {
	h := newHarness(t, testOptions())
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	max := h.d.MaxEntities()
	put := func(dir Direction, entity uint32, bytes uint64) {
		perCPU := make([]sluiceEntityCounters, cpus)
		perCPU[cpus-1].Bytes = bytes // on the last CPU: the sum is read, not CPU 0
		if err := h.d.objs.Counters.Put(uint32(int(dir)*max)+entity, perCPU); err != nil {
			t.Fatal(err)
		}
	}
	for e := uint32(0); e < uint32(max); e++ {
		put(Produce, e, 1000+uint64(e))
		put(Fetch, e, 2000+uint64(e))
	}
	const untouched = 7777777
	for _, batch := range []int{counterBatch, 5, 1} {
		for _, ids := range []int{0, 1, 10, max, max + 100} {
			reader, err := h.d.NewCounterReader()
			if err != nil {
				t.Fatal(err)
			}
			reader.keys = reader.keys[:batch]
			var got [2][]Counters
			for dir := range got {
				got[dir] = make([]Counters, max)
				for e := range got[dir] {
					got[dir][e].Bytes = untouched
				}
			}
			if err := reader.Read(&got, ids); err != nil {
				t.Fatalf("batch %d, ids %d: %v", batch, ids, err)
			}
			for e := range max {
				wantProduce, wantFetch := uint64(untouched), uint64(untouched)
				if e < ids {
					wantProduce, wantFetch = 1000+uint64(e), 2000+uint64(e)
				}
				if got[Produce][e].Bytes != wantProduce || got[Fetch][e].Bytes != wantFetch {
					t.Fatalf("batch %d, ids %d, entity %d: produce %d fetch %d, want %d %d", batch, ids, e,
						got[Produce][e].Bytes, got[Fetch][e].Bytes, wantProduce, wantFetch)
				}
			}
		}
	}
}

// A dst shorter than MaxEntities is refused before anything is read.
func TestCounterReaderRefusesShortRoom(t *testing.T) {
	h := newHarness(t, testOptions())
	reader, err := h.d.NewCounterReader()
	if err != nil {
		t.Fatal(err)
	}
	var got [2][]Counters
	got[0], got[1] = make([]Counters, h.d.MaxEntities()), make([]Counters, h.d.MaxEntities()-1)
	if err := reader.Read(&got, 1); err == nil {
		t.Fatal("a short dst was read into")
	}
}

// BenchmarkCounterRead reads the counters of a data path of the default
// size (65538 entities a direction): every slot (the agent's first
// reading, and what every cycle read before) beside the few ids a small
// registry handed out and a large one's 10k.
func BenchmarkCounterRead(b *testing.B) {
	opts := DefaultOptions()
	h := newHarness(b, opts)
	reader, err := h.d.NewCounterReader()
	if err != nil {
		b.Fatal(err)
	}
	var dst [2][]Counters
	dst[0], dst[1] = make([]Counters, opts.MaxEntities), make([]Counters, opts.MaxEntities)
	for _, c := range []struct {
		name string
		ids  int
	}{{"ids=16", 16}, {"ids=10k", 10000}, {"every-slot", opts.MaxEntities}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := reader.Read(&dst, c.ids); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
