package maps

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

// Requests the data path may sample per segment (bpf/kafka.h
// MAX_REQUESTS_PER_SEGMENT); the rest of a segment's requests are
// followed, not sampled.
const requestsSampledPerSegment = 16

// Bytes of a segment a stream that lost its position looks through for a
// request start (bpf/kafka.h PROBE_BYTES).
const probeBytes = 256

// apiVersionsOfSize is an ApiVersions request frame of exactly size bytes
// (its client software name pads it), with correlation id corr.
func apiVersionsOfSize(t *testing.T, corr int32, size int) []byte {
	t.Helper()
	for pad := 0; pad < size; pad++ {
		av := kmsg.NewPtrApiVersionsRequest()
		av.SetVersion(3)
		av.ClientSoftwareName = "sluice-" + string(bytes.Repeat([]byte("x"), pad))
		av.ClientSoftwareVersion = "1.0"
		f := kt.Frame(av, corr, kt.Str("regain"))
		if len(f) == size {
			return f
		}
		if len(f) > size {
			break
		}
	}
	t.Fatalf("no ApiVersions frame of %d bytes", size)
	return nil
}

// sampledAt indexes samples by the sequence number of their request.
func sampledAt(got []Sample) map[uint32]Sample {
	m := map[uint32]Sample{}
	for _, s := range got {
		m[s.Seq] = s
	}
	return m
}

// A segment of many small requests costs their samples past the first
// sixteen, never the stream's position: for 1 to 64 requests in one
// segment (the next request's first bytes cut by its end), the request
// that starts inside the next segment, which begins mid-request, is
// sampled, and no connection loses or regains sync. (An earlier data path
// lost position at the 17th request, and found it again only at a segment
// that began with a request: never, for this stream.)
func TestRequestBoundaryKeptPastTheSegmentCap(t *testing.T) {
	h := newHarness(t, testOptions())
	rd, err := h.d.NewSampleReader()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for n := 1; n <= 64; n++ {
		var reqs [][]byte
		for i := range n {
			reqs = append(reqs, apiVersionsOfSize(t, int32(i), 40+i%7))
		}
		cut := apiVersionsOfSize(t, 1000, 50) // starts in the first segment
		after := apiVersionsOfSize(t, 1001, 60)
		s := h.connect(client4, uint16(44000+n), uint32(n)<<20)
		start := s.seq
		first := append(bytes.Join(reqs, nil), cut[:5]...)
		s.send(first, len(first))
		afterSeq := s.seq + uint32(len(cut)-5)
		s.send(append(append([]byte{}, cut[5:]...), after...), 1<<16)

		got := sampledAt(drain(t, rd))
		seq := start
		for i, req := range reqs {
			_, sampled := got[seq]
			if want := i < requestsSampledPerSegment; sampled != want {
				t.Errorf("%d requests in a segment: request %d sampled %v, want %v", n, i, sampled, want)
			}
			seq += uint32(len(req))
		}
		if s, ok := got[afterSeq]; !ok || !bytes.Equal(s.Data, after) || !s.Complete {
			t.Errorf("%d requests in a segment: the request inside the next segment sampled %v (%q), want all of it", n, ok, s.Data)
		}
	}
	if st, _ := h.d.Stats(); st.Desyncs != 0 || st.Resyncs != 0 {
		t.Errorf("desyncs %d, resyncs %d: want none (position kept through every segment)", st.Desyncs, st.Resyncs)
	}
}

// The bound on what losing position costs (bpf/kafka.h): in a stream of
// requests of at most PROBE_BYTES in segments of at least two requests and
// a header, none of which begins at a request start, a segment the data
// path never sees makes it lose position (one desync) and it finds it again
// (one resync) in the first segment it sees after the gap, at its first
// request start. With smaller segments, a request start's successor is
// confirmed in the later segment that holds it.
func TestRequestBoundaryRegainedInsideSegments(t *testing.T) {
	cases := []struct {
		reqSize, segSize int
		// Which segment after the lost one is the first whose every
		// request start is sampled.
		regainedAfter int
	}{
		{61, 300, 1},                       // a request start and the next header in one segment
		{probeBytes, 2*probeBytes + 14, 1}, // the largest such requests, the smallest such segments
		// Segment 3 holds no request start; segment 4 holds one whose
		// successor segment 5 confirms.
		{201, 150, 3},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("requests-of-%d-segments-of-%d", tc.reqSize, tc.segSize), func(t *testing.T) {
			h := newHarness(t, testOptions())
			rd, err := h.d.NewSampleReader()
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			const requests, lost = 40, 2
			var stream []byte
			for r := range requests {
				stream = append(stream, apiVersionsOfSize(t, int32(r), tc.reqSize)...)
			}
			s := h.connect(client4, uint16(45000+i), 77)
			start := s.seq
			segStart := func(k int) int { return k * tc.segSize }
			segments := len(stream) / tc.segSize
			if (segStart(lost+1)-1)/tc.reqSize == (segStart(lost)-1)/tc.reqSize {
				t.Fatalf("segment %d holds no request start: never seen, it would lose nothing", lost)
			}
			for k := lost + 1; k < segments; k++ {
				if segStart(k)%tc.reqSize == 0 {
					t.Fatalf("segment %d begins with a request: the case must not let a segment start find the stream", k)
				}
			}
			for k := 0; k < segments; k++ {
				if k != lost { // never seen: a gap
					seg := stream[segStart(k):segStart(k+1)]
					h.run(Produce, toBroker(client4, broker4, s.port, start+uint32(segStart(k)), flagACK|flagPSH, seg))
				}
			}

			got := sampledAt(drain(t, rd))
			from := segStart(lost + tc.regainedAfter)
			for off := 0; off+tc.reqSize <= segStart(segments); off += tc.reqSize {
				if off < from {
					continue
				}
				if smp, ok := got[start+uint32(off)]; !ok || !bytes.Equal(smp.Data, stream[off:off+tc.reqSize]) {
					t.Errorf("the request at %d (segment %d), after the stream was found again, not sampled whole", off, off/tc.segSize)
				}
			}
			if st, _ := h.d.Stats(); st.Desyncs != 1 || st.Resyncs != 1 {
				t.Errorf("desyncs %d, resyncs %d: want one each", st.Desyncs, st.Resyncs)
			}
		})
	}
}

// A stream that lost its position finds it only in bytes at least as new
// as any it has seen since: an old retransmission that begins with a
// request would place tracking behind bytes already gone by (and the next
// new segment would lose it again).
func TestRequestBoundaryRegainsOnlyInNewestBytes(t *testing.T) {
	h := newHarness(t, testOptions())
	rd, err := h.d.NewSampleReader()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	// Requests larger than a segment, whose padding holds no header: only
	// a segment that begins with a request finds the stream.
	const reqSize, segSize = 2000, 500
	var stream []byte
	for r := range 4 {
		stream = append(stream, apiVersionsOfSize(t, int32(r), reqSize)...)
	}
	s := h.connect(client4, 46000, 5)
	send := func(off int) {
		h.run(Produce, toBroker(client4, broker4, s.port, s.seq+uint32(off), flagACK|flagPSH, stream[off:off+segSize]))
	}
	for _, off := range []int{0, 500, 1000, 2500, 3000} { // [1500, 2500) never seen: the second request's start
		send(off)
	}
	send(0) // the first request again: a retransmission of old bytes
	if st, _ := h.d.Stats(); st.Desyncs != 1 || st.Resyncs != 0 {
		t.Fatalf("after a gap and an old retransmission: desyncs %d, resyncs %d, want 1 and 0", st.Desyncs, st.Resyncs)
	}
	send(3500)
	send(2 * reqSize) // new bytes that begin with a request: found there
	if st, _ := h.d.Stats(); st.Resyncs != 1 {
		t.Errorf("at new bytes beginning with a request: resyncs %d, want 1", st.Resyncs)
	}
	if _, ok := sampledAt(drain(t, rd))[s.seq+2*reqSize]; !ok {
		t.Errorf("the request where the stream was found again was not sampled")
	}
}

// Looking for a lost position through a segment (a header check per byte)
// spends a token of the connection's sample budget: with none, a stream of
// small requests whose segments never begin at a request start stays lost
// however many segments go by; with a budget again, the next segment finds
// it. A stream of junk so costs at most samples_per_second probes a second.
func TestRequestBoundaryProbingSpendsSampleBudget(t *testing.T) {
	opts := testOptions()
	opts.FirstRequestsSampled = 0
	h := newHarness(t, opts)
	if err := h.d.SetSettings(Settings{StaleAfter: 10 * time.Second, SamplesPerSecond: 0}); err != nil {
		t.Fatal(err)
	}
	const reqSize, segSize = 61, 300
	var stream []byte
	for r := range 40 {
		stream = append(stream, apiVersionsOfSize(t, int32(r), reqSize)...)
	}
	s := h.connect(client4, 47000, 9)
	send := func(k int) {
		h.run(Produce, toBroker(client4, broker4, s.port, s.seq+uint32(k*segSize), flagACK|flagPSH, stream[k*segSize:(k+1)*segSize]))
	}
	send(0)
	for k := 2; k < 6; k++ { // segment 1 never seen: position lost
		send(k)
	}
	if st, _ := h.d.Stats(); st.Desyncs != 1 || st.Resyncs != 0 {
		t.Fatalf("without a budget: desyncs %d, resyncs %d, want 1 and 0", st.Desyncs, st.Resyncs)
	}
	if err := h.d.SetSettings(Settings{StaleAfter: 10 * time.Second, SamplesPerSecond: 200}); err != nil {
		t.Fatal(err)
	}
	send(6)
	if st, _ := h.d.Stats(); st.Resyncs != 1 {
		t.Errorf("with a budget again: resyncs %d, want 1", st.Resyncs)
	}
}
