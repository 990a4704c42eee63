package maps

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

// clientStream sends a client's bytes to the broker as ingress segments.
type clientStream struct {
	h      *harness
	client netip.Addr
	port   uint16
	seq    uint32 // next byte's sequence number
}

func (h *harness) connect(client netip.Addr, port uint16, isn uint32) *clientStream {
	h.handshake(client, broker4, port, isn)
	return &clientStream{h: h, client: client, port: port, seq: isn + 1}
}

// send sends data cut into segments of at most segSize bytes.
func (s *clientStream) send(data []byte, segSize int) {
	for len(data) > 0 {
		n := min(segSize, len(data))
		s.h.run(Produce, toBroker(s.client, broker4, s.port, s.seq, flagACK|flagPSH, data[:n]))
		s.seq += uint32(n)
		data = data[n:]
	}
}

// kafkaRequests are real request bytes of several sizes: smaller and larger
// than a sample, header v1 and v2.
func kafkaRequests() [][]byte {
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	av.ClientSoftwareName, av.ClientSoftwareVersion = "sluice-test", "1.0"
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(9)
	return [][]byte{
		kt.Frame(av, 0, kt.Str("orders-service")),
		kt.Frame(kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}), 1, kt.Str("orders-service")),
		kt.Frame(md, 2, kt.Str("orders-service")),
		kt.Frame(kt.Fetch(12, 0, 0, []kt.TP{{Topic: "clicks", Partitions: []int32{0, 1}}}, nil), 3, kt.Str("orders-service")),
		kt.Frame(kt.Produce(3, kt.TP{Topic: "x", Partitions: []int32{0}}), 4, nil),
	}
}

// checkSamples asserts one sample per request, in order, each the
// request's first bytes at the request's sequence number.
func checkSamples(t *testing.T, got []Sample, reqs [][]byte, firstSeq uint32, sampleBytes int) {
	t.Helper()
	if len(got) != len(reqs) {
		t.Fatalf("%d samples, want %d", len(got), len(reqs))
	}
	seq := firstSeq
	for i, req := range reqs {
		want := req[:min(len(req), sampleBytes)]
		if got[i].Seq != seq {
			t.Errorf("sample %d at seq %d, want %d", i, got[i].Seq, seq)
		}
		if !bytes.Equal(got[i].Data, want) || !got[i].Complete {
			t.Errorf("sample %d: %d bytes (complete %v), want the request's first %d bytes", i, len(got[i].Data), got[i].Complete, len(want))
		}
		seq += uint32(len(req))
	}
}

func TestRequestBoundaryEverySegmentation(t *testing.T) {
	reqs := kafkaRequests()
	stream := bytes.Join(reqs, nil)
	// 1-3 byte segments cut every size field; 5, 7, 13 cut headers at every
	// offset; 100 and 1000 carry several requests or parts of one.
	for i, segSize := range []int{1, 2, 3, 5, 7, 13, 100, 1000, len(stream)} {
		t.Run(fmt.Sprintf("segments-of-%d", segSize), func(t *testing.T) {
			h := newHarness(t, testOptions())
			r, err := h.d.NewSampleReader()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			s := h.connect(client4, uint16(42000+i), 1000)
			s.send(stream, segSize)
			checkSamples(t, drain(t, r), reqs, 1001, 256)
			if st, _ := h.d.Stats(); st.Desyncs != 0 || st.RingBufferDrops != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestRequestBoundarySequenceWraps(t *testing.T) {
	h := newHarness(t, testOptions())
	r, _ := h.d.NewSampleReader()
	defer r.Close()
	reqs := kafkaRequests()
	s := h.connect(client4, 42100, 0xffffff00) // the stream wraps 2^32 in the second request
	s.send(bytes.Join(reqs, nil), 97)
	checkSamples(t, drain(t, r), reqs, 0xffffff01, 256)
}

func TestRequestBoundaryRetransmissionSampledOnce(t *testing.T) {
	h := newHarness(t, testOptions())
	r, _ := h.d.NewSampleReader()
	defer r.Close()
	reqs := kafkaRequests()
	s := h.connect(client4, 42200, 5000)
	start := s.seq
	s.send(reqs[0], 1000)
	// Retransmit the whole first request, then part of it.
	h.run(Produce, toBroker(client4, broker4, 42200, start, flagACK|flagPSH, reqs[0]))
	h.run(Produce, toBroker(client4, broker4, 42200, start+3, flagACK|flagPSH, reqs[0][3:20]))
	// A retransmission that overlaps the next request's start: only the new
	// request is sampled.
	next := append(append([]byte{}, reqs[0][len(reqs[0])-10:]...), reqs[2]...)
	h.run(Produce, toBroker(client4, broker4, 42200, s.seq-10, flagACK|flagPSH, next))
	got := drain(t, r)
	checkSamples(t, got, [][]byte{reqs[0], reqs[2]}, start, 256)
}

func TestRequestBoundaryResyncWhenConnectionPredatesAgent(t *testing.T) {
	h := newHarness(t, testOptions())
	rd, _ := h.d.NewSampleReader()
	defer rd.Close()
	reqs := kafkaRequests()
	// No handshake: the agent starts with the connection open, mid-request.
	seq := uint32(777)
	mid := reqs[1][100:] // the tail of a produce request: not a header
	h.run(Produce, toBroker(client4, broker4, 42300, seq, flagACK|flagPSH, mid[:40]))
	// The broker acknowledges part of it: its segment enters the connection
	// with tracking placed at the acknowledged byte, inside a request.
	h.run(Fetch, brokerACK(client4, broker4, 42300, seq+40))
	h.run(Produce, toBroker(client4, broker4, 42300, seq+40, flagACK|flagPSH, mid[40:]))
	seq += uint32(len(mid))
	if got := drain(t, rd); len(got) != 0 {
		t.Fatalf("sampled %d times from the middle of a request", len(got))
	}
	// The next segment starts with a request: tracking locks on.
	rest := bytes.Join(reqs[2:], nil)
	h.run(Produce, toBroker(client4, broker4, 42300, seq, flagACK|flagPSH, rest[:60]))
	h.run(Produce, toBroker(client4, broker4, 42300, seq+60, flagACK|flagPSH, rest[60:]))
	checkSamples(t, drain(t, rd), reqs[2:], seq, 256)
	if st, _ := h.d.Stats(); st.Resyncs != 1 {
		t.Errorf("resyncs %d, want 1", st.Resyncs)
	}
}

func TestRequestBoundaryGapResyncs(t *testing.T) {
	h := newHarness(t, testOptions())
	rd, _ := h.d.NewSampleReader()
	defer rd.Close()
	reqs := kafkaRequests()
	s := h.connect(client4, 42400, 1)
	s.send(reqs[0], 1000)
	// A segment this hook never sees in order: the request after it starts
	// beyond where tracking expected.
	lost := uint32(len(reqs[1]))
	s.seq += lost
	s.send(reqs[2], 1000) // starts with a header: found again
	got := drain(t, rd)
	if len(got) != 2 || !bytes.Equal(got[1].Data, reqs[2][:min(256, len(reqs[2]))]) {
		t.Fatalf("after a gap: %d samples", len(got))
	}
	if st, _ := h.d.Stats(); st.Desyncs != 1 || st.Resyncs != 1 {
		t.Errorf("stats %+v, want one desync and one resync", st)
	}
}

func TestRequestBoundarySampleBudget(t *testing.T) {
	opts := testOptions()
	opts.FirstRequestsSampled = 3
	h := newHarness(t, opts)
	rd, _ := h.d.NewSampleReader()
	defer rd.Close()
	if err := h.d.SetSettings(Settings{StaleAfter: 10 * time.Second, SamplesPerSecond: 0}); err != nil {
		t.Fatal(err)
	}
	reqs := kafkaRequests()
	s := h.connect(client4, 42500, 1)
	for i := 0; i < 10; i++ {
		s.send(reqs[0], 1000)
	}
	if got := drain(t, rd); len(got) != 3 {
		t.Errorf("%d samples with a zero budget, want the first 3", len(got))
	}
	if st, _ := h.d.Stats(); st.BudgetDrops != 7 {
		t.Errorf("budget drops %d, want 7", st.BudgetDrops)
	}
	// With a budget, samples resume.
	h.d.SetSettings(Settings{StaleAfter: 10 * time.Second, SamplesPerSecond: 200})
	s.send(reqs[0], 1000)
	if got := drain(t, rd); len(got) != 1 {
		t.Errorf("%d samples with budget restored, want 1", len(got))
	}
}

func TestRequestBoundarySampleSizeAndV6(t *testing.T) {
	opts := testOptions()
	opts.SampleBytes = 64
	h := newHarness(t, opts)
	rd, _ := h.d.NewSampleReader()
	defer rd.Close()
	reqs := kafkaRequests()
	isn := uint32(9)
	h.handshake(client6, broker6, 43000, isn)
	seq := isn + 1
	for _, seg := range [][]byte{bytes.Join(reqs[:2], nil), bytes.Join(reqs[2:], nil)} {
		h.run(Produce, segment{src: netip.AddrPortFrom(client6, 43000), dst: netip.AddrPortFrom(broker6, brokerPort), seq: seq, flags: flagACK, payload: seg})
		seq += uint32(len(seg))
	}
	got := drain(t, rd)
	checkSamples(t, got, reqs, isn+1, 64)
	if got[0].Conn != connKey(client6, broker6, 43000) {
		t.Errorf("sample connection %v", got[0].Conn)
	}
}

// The agent binds a connection in the middle of a request: the binding
// (sluice_bind) writes only the entities, so tracking carries on.
func TestRequestBoundaryBindingKeepsTracking(t *testing.T) {
	h := newHarness(t, testOptions())
	rd, _ := h.d.NewSampleReader()
	defer rd.Close()
	reqs := kafkaRequests()
	stream := bytes.Join(reqs, nil)
	s := h.connect(client4, 42600, 1)
	start := s.seq
	cut := len(reqs[0]) + 100 // inside the second request
	s.send(stream[:cut], 1000)
	if err := h.d.BindConns([]Binding{{Conn: connKey(client4, broker4, 42600), Produce: 5, Fetch: 6}}); err != nil {
		t.Fatal(err)
	}
	s.send(stream[cut:], 1000)
	got := drain(t, rd)
	checkSamples(t, got, reqs, start, 256)
	if st, _ := h.d.Stats(); st.Desyncs != 0 || st.Resyncs != 0 {
		t.Errorf("binding disturbed tracking: %+v", st)
	}
	// Samples say what the entry held when each request started, and which
	// connection on the 4-tuple they belong to.
	first, last := got[0], got[len(got)-1]
	if first.Bound != [2]uint32{EntityUnknown, EntityUnknown} || last.Bound != [2]uint32{5, 6} {
		t.Errorf("samples' bound entities: first %v, last %v; want unknown, then [5 6]", first.Bound, last.Bound)
	}
	if first.Born == 0 || last.Born != first.Born {
		t.Errorf("samples' connection born %d and %d: want one non-zero value", first.Born, last.Born)
	}
	if c := h.counters(Produce, 5); c.Bytes != uint64(len(stream)-cut) {
		t.Errorf("entity 5 counted %d bytes after the binding, want %d", c.Bytes, len(stream)-cut)
	}
}
