package maps

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

// fragmentsOf cuts a request's first sampleBytes into fragments of the
// given sizes, as the data path sends them.
func fragmentsOf(key ConnKey, born uint64, seq uint32, req []byte, sizes ...int) []fragment {
	var out []fragment
	off := 0
	for _, n := range sizes {
		out = append(out, fragment{key: key, born: born, reqSeq: seq, fragOff: uint32(off), reqLen: uint32(len(req)), data: req[off : off+n]})
		off += n
	}
	return out
}

// A poll can read a request's continuation (on one CPU's ring) before its
// first fragment (on a ring read earlier in that poll, before it was
// published); the next poll has it. The stitcher must deliver the sample
// whole, and the connection's next request after it.
func TestStitcherContinuationReadBeforeItsStart(t *testing.T) {
	reqs := kafkaRequests()
	first, second := reqs[1], reqs[0] // a produce longer than a sample, then a short request
	key := connKey(client4, broker4, 41000)
	a := fragmentsOf(key, 7, 1000, first, 100, 156)
	b := fragmentsOf(key, 7, 1000+uint32(len(first)), second, len(second))
	st := newStitcher(256)
	var got []Sample
	got = append(got, st.take([]fragment{a[1]}, 0, false)...)       // continuation alone
	got = append(got, st.take([]fragment{b[0], a[0]}, 0, false)...) // its start, and the next request
	got = append(got, st.take(nil, 0, false)...)
	checkSamples(t, got, [][]byte{first, second}, 1000, 256)
}

// Stream order holds across a sequence-number wrap and between two
// connections on one 4-tuple (born tells them apart).
func TestStitcherStreamOrder(t *testing.T) {
	reqs := kafkaRequests()
	long := reqs[1]
	key := connKey(client4, broker4, 41001)
	wrapA := fragmentsOf(key, 1, 0xffffff80, long, 200, 56) // its continuation lies past the wrap
	wrapB := fragmentsOf(key, 1, 0xffffff80+uint32(len(long)), reqs[0], len(reqs[0]))
	reborn := fragmentsOf(key, 2, 5, reqs[2], len(reqs[2]))
	st := newStitcher(256)
	got := st.take([]fragment{reborn[0], wrapB[0], wrapA[1], wrapA[0]}, 0, true)
	if len(got) != 3 {
		t.Fatalf("%d samples, want 3", len(got))
	}
	for i, want := range []struct {
		seq  uint32
		born uint64
		data []byte
	}{{0xffffff80, 1, long[:256]}, {0xffffff80 + uint32(len(long)), 1, reqs[0]}, {5, 2, reqs[2]}} {
		if got[i].Seq != want.seq || got[i].Born != want.born || !bytes.Equal(got[i].Data, want.data) || !got[i].Complete {
			t.Errorf("sample %d: seq %#x born %d %d bytes complete %v; want seq %#x born %d %d bytes complete",
				i, got[i].Seq, got[i].Born, len(got[i].Data), got[i].Complete, want.seq, want.born, len(want.data))
		}
	}
}

// A continuation that never comes: held one poll, then the sample waits in
// the assembler until it is older than incompleteAfter, or until the
// reader stops waiting (final), and is delivered incomplete.
func TestStitcherIncompleteDelivered(t *testing.T) {
	long := kafkaRequests()[1]
	key := connKey(client4, broker4, 41002)
	frags := fragmentsOf(key, 1, 50, long, 100)
	frags[0].time = time.Second
	st := newStitcher(256)
	if got := st.take(frags, time.Second, false); len(got) != 0 {
		t.Fatalf("delivered %d samples in the poll that read the fragment", len(got))
	}
	if got := st.take(nil, time.Second+incompleteAfter/2, false); len(got) != 0 {
		t.Fatalf("delivered %d samples before incompleteAfter", len(got))
	}
	got := st.take(nil, time.Second+incompleteAfter, false)
	if len(got) != 1 || got[0].Complete || !bytes.Equal(got[0].Data, long[:100]) {
		t.Fatalf("got %+v, want the first 100 bytes, incomplete", got)
	}
	st.take(fragmentsOf(key, 1, 50+uint32(len(long)), long, 100), time.Second, false)
	if got := st.take(nil, time.Second, true); len(got) != 1 || got[0].Complete {
		t.Fatalf("final poll delivered %+v, want one incomplete sample", got)
	}
}

// A request's first fragment written on CPU 1 and its continuation on
// CPU 0 (whose ring the reader reads first) make one whole sample, and the
// connection's next requests follow it.
func TestSampleRingsStitchAcrossCPUs(t *testing.T) {
	stitchAcrossCPUs(t, newHarness(t, testOptions()))
}

func stitchAcrossCPUs(t *testing.T, h *harness) {
	t.Helper()
	r, err := h.d.NewSampleReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	reqs := kafkaRequests()
	stream := bytes.Join(reqs[1:], nil)
	s := h.connect(client4, 42700, 1)
	start := s.seq
	onCPU(t, 1, func() { s.send(stream[:100], 100) })
	onCPU(t, 0, func() { s.send(stream[100:], 1000) })
	checkSamples(t, drain(t, r), reqs[1:], start, 256)
}

// A CPU's ring never overwrites what the agent has not read: when it is
// full the data path drops the new fragment and counts it, and once the
// reader has read the ring, fragments flow again.
func TestSampleRingFullDropsNewest(t *testing.T) {
	opts := testOptions()
	opts.SampleSlotsPerCPU = 4
	opts.FirstRequestsSampled = 100
	h := newHarness(t, opts)
	r, err := h.d.NewSampleReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	short := kafkaRequests()[0] // one fragment each
	s := h.connect(client4, 42800, 1)
	start := s.seq
	onCPU(t, 0, func() {
		for i := 0; i < 10; i++ {
			s.send(short, 1000)
		}
	})
	got := drain(t, r)
	checkSamples(t, got, [][]byte{short, short, short, short}, start, 256)
	if st, _ := h.d.Stats(); st.RingBufferDrops != 6 || st.Samples != 4 {
		t.Errorf("samples %d, drops %d; want 4 sent and 6 dropped", st.Samples, st.RingBufferDrops)
	}
	next := s.seq
	onCPU(t, 0, func() { s.send(short, 1000); s.send(short, 1000) })
	checkSamples(t, drain(t, r), [][]byte{short, short}, next, 256)
}

// One reader owns the rings' tails: a second is refused until the first
// closes, and a closed reader's Read says so.
func TestSampleReaderIsExclusive(t *testing.T) {
	h := newHarness(t, testOptions())
	readerIsExclusive(t, h.d.NewSampleReader, func(r *SampleReader) error { _, err := r.Read(); return err })
}

// readerIsExclusive opens a reader of some rings, checks that a second is
// refused, that Read on it ends with ErrClosed once it is closed, and that
// the rings can be opened again.
func readerIsExclusive[R interface{ Close() error }](t *testing.T, open func() (R, error), read func(R) error) {
	t.Helper()
	r, err := open()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open(); err == nil {
		t.Fatal("a second reader was opened beside the first")
	}
	done := make(chan error, 1)
	go func() { done <- read(r) }()
	r.Close()
	if err := <-done; err != ErrClosed {
		t.Fatalf("Read on a closed reader: %v, want ErrClosed", err)
	}
	r2, err := open()
	if err != nil {
		t.Fatalf("reopen after close: %v", err)
	}
	r2.Close()
}

// A sample whose client-id's length came after its first fragment: the
// later fragment that says it is cut (and how long the request is as the
// sample keeps it) makes it a cut sample, and the reader takes the hash
// out; one that ends before the hash is delivered cut but not hashed.
func TestAssemblerCutDecidedLate(t *testing.T) {
	id := strings.Repeat("k", 300)
	req := kt.Frame(kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{3}}), 1, &id)
	want, _, hash := cutSample(req, 256)
	// What the data path sends: the header and kept bytes, the hash, then
	// the request's bytes after the client-id.
	var h [8]byte
	binary.LittleEndian.PutUint64(h[:], hash)
	gap := 300 - ClientIDKept
	kept := append(append(append([]byte{}, req[:14+ClientIDKept]...), h[:]...), req[14+300:]...)[:256]
	keptLen := uint32(len(req) - gap + ClientIDHashBytes)
	key := connKey(client4, broker4, 41100)
	frags := []fragment{
		{key: key, reqSeq: 9, fragOff: 0, reqLen: uint32(len(req)), data: kept[:10]},
		{key: key, reqSeq: 9, fragOff: 10, clientIDCut: true, reqLen: keptLen, data: kept[10:142]},
		{key: key, reqSeq: 9, fragOff: 142, reqLen: keptLen, data: kept[142:150]},
		{key: key, reqSeq: 9, fragOff: 150, reqLen: keptLen, data: kept[150:]},
	}
	a := newAssembler(256)
	var got []Sample
	for _, f := range frags {
		got = append(got, a.add(f)...)
	}
	if len(got) != 1 || !got[0].Complete || !got[0].ClientIDCut || !got[0].ClientIDHashed || got[0].ClientIDHash != hash || !bytes.Equal(got[0].Data, want) {
		t.Fatalf("late cut: %d samples %+v", len(got), got)
	}
	a = newAssembler(256)
	for _, f := range frags[:2] {
		a.add(f)
	}
	got = a.flush(time.Hour, 0)
	if len(got) != 1 || got[0].Complete || !got[0].ClientIDCut || got[0].ClientIDHashed || !bytes.Equal(got[0].Data, want[:142]) {
		t.Fatalf("cut before its hash: %+v", got)
	}
}
