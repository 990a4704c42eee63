package maps

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/entity"
	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
	"github.com/sluice-dev/sluice/agent/learner"
)

// These tests run the data path's samples through the agent's learner: a
// request is decided correctly however the client cuts its stream into
// segments, or packs requests into one.

const splitPolicy = `
entities:
  clients:
    <default>: {producer_byte_rate: 50MiB}
  users:
    alice: {producer_byte_rate: 5MiB, consumer_byte_rate: 5MiB}
`

func splitLearner(t testing.TB, sasl bool) *learner.Learner[ConnKey] {
	t.Helper()
	cfg, err := configfile.Parse([]byte("interfaces: [eth0]\nlisteners: [9092]\nproduce: {capacity: 1GiB}\nfetch: {capacity: 1GiB}\n" + splitPolicy))
	if err != nil {
		t.Fatal(err)
	}
	l := learner.New[ConnKey](entity.NewPolicy(cfg.Entities), nil)
	l.SetSASLListeners(func(ConnKey) bool { return sasl })
	return l
}

// learnSamples feeds samples to l as the agent does and returns the last
// decision of each connection.
func learnSamples(t testing.TB, l *learner.Learner[ConnKey], got []Sample) map[ConnKey]learner.Decision {
	t.Helper()
	out := map[ConnKey]learner.Decision{}
	for _, s := range got {
		d, _, err := l.LearnSample(s.Conn, s.Born, learnerSample(s))
		if err != nil {
			t.Fatalf("sample at %d of %v: %v", s.Seq, s.Conn, err)
		}
		out[s.Conn] = d
	}
	return out
}

func learnerSample(s Sample) learner.Sample {
	return learner.Sample{Data: s.Data, Whole: s.Complete, ClientIDCut: s.ClientIDCut, ClientIDHash: s.ClientIDHash, ClientIDHashed: s.ClientIDHashed}
}

func saslHandshake(mechanism string) kmsg.Request {
	r := kmsg.NewPtrSASLHandshakeRequest()
	r.SetVersion(1)
	r.Mechanism = mechanism
	return r
}

func apiVersionsRequest() kmsg.Request {
	r := kmsg.NewPtrApiVersionsRequest()
	r.SetVersion(3)
	r.ClientSoftwareName, r.ClientSoftwareVersion = "sluice-test", "1.0"
	return r
}

// saslLogin is a SASL_PLAINTEXT client's opening: ApiVersions, a PLAIN
// handshake and alice's login, each with client-id id.
func saslLogin(id string) [][]byte {
	return [][]byte{
		kt.Frame(apiVersionsRequest(), 0, &id),
		kt.Frame(saslHandshake("PLAIN"), 1, &id),
		kt.Frame(saslPlain("alice"), 2, &id),
	}
}

var aliceKey = entity.Key{Kind: entity.KindUser, Name: "alice"}

func decidedAs(d learner.Decision, k entity.Key) bool {
	return d.Decided == [2]bool{true, true} && d.Produce.Key == k && d.Fetch.Key == k
}

// A request header split at any byte of its first 300 bytes, for every
// request of a SASL login and a Produce after it, with client-ids of every
// length around the sample's cut (a 256-byte sample holds the header and
// 242 bytes of client-id): every sample is what the unsplit request gives,
// and the connection is alice's. Before, a first segment shorter than the
// client-id's length field (< 14 bytes) sent the request's first 256
// bytes: with a client-id of 243 bytes or more the header never fit, and
// the connection was never decided.
func TestSplitHeaderDecidesAtEveryOffset(t *testing.T) {
	opts := testOptions()
	opts.SampleSlotsPerCPU = 1 << 14 // every connection's fragments, drained once
	for _, n := range []int{0, 100, 128, 129, 136, 137, 242, 243, 300, 1000} {
		t.Run(fmt.Sprintf("client-id-%d", n), func(t *testing.T) {
			h := newHarness(t, opts)
			r, err := h.d.NewSampleReader()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			id := strings.Repeat("s", n)
			reqs := append(saslLogin(id), kt.Frame(kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{3}}), 3, &id))
			// The samples of the requests each in one segment: what every
			// split must give.
			whole := h.connect(client4, 20000, 1000)
			for _, req := range reqs {
				whole.send(req, len(req))
			}
			want := drain(t, r)
			if len(want) != len(reqs) {
				t.Fatalf("%d samples of %d whole requests", len(want), len(reqs))
			}
			streams := map[ConnKey]int{}
			for k := 1; k <= 300; k++ {
				s := h.connect(client4, uint16(20000+k), 1000)
				streams[s.key()] = k
				for _, req := range reqs {
					at := min(k, len(req)-1)
					s.send(req[:at], at)
					s.send(req[at:], len(req))
				}
			}
			for key, got := range byConn(drain(t, r)) {
				k := streams[key]
				if len(got) != len(reqs) {
					t.Fatalf("split at %d: %d samples, want %d", k, len(got), len(reqs))
				}
				for i := range got {
					if !bytes.Equal(got[i].Data, want[i].Data) || got[i].ClientIDCut != want[i].ClientIDCut || !got[i].Complete {
						t.Fatalf("split at %d: request %d sampled as %d bytes (cut %v, complete %v), want %d bytes (cut %v)",
							k, i, len(got[i].Data), got[i].ClientIDCut, got[i].Complete, len(want[i].Data), want[i].ClientIDCut)
					}
				}
				if d := learnSamples(t, splitLearner(t, true), got)[key]; !decidedAs(d, aliceKey) {
					t.Fatalf("split at %d: decided %+v, want alice both ways", k, d)
				}
				delete(streams, key)
			}
			if len(streams) != 0 {
				t.Fatalf("%d connections sent no sample", len(streams))
			}
			if st, _ := h.d.Stats(); st.Desyncs != 0 || st.RingBufferDrops != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// byConn groups samples by connection, in the order they came.
func byConn(samples []Sample) map[ConnKey][]Sample {
	out := map[ConnKey][]Sample{}
	for _, s := range samples {
		out[s.Conn] = append(out[s.Conn], s)
	}
	return out
}

func (s *clientStream) key() ConnKey { return connKey(s.client, broker4, s.port) }

// tinyRequest is a 14-byte request: ApiVersions v0, null client-id.
func tinyRequest(corr int32) []byte {
	r := kmsg.NewPtrApiVersionsRequest()
	r.SetVersion(0)
	return kt.Frame(r, corr, nil)
}

// loginThenTiny is a SASL login with 300-byte client-ids, then small
// requests: 100 requests, of which 64 fit one test frame (BPF_PROG_TEST_RUN
// takes a frame of at most a page).
func loginThenTiny() [][]byte {
	reqs := saslLogin(strings.Repeat("p", 300))
	for len(reqs) < 100 {
		reqs = append(reqs, tinyRequest(int32(len(reqs))))
	}
	return reqs
}

// One to 64 requests per segment, the first three a SASL login with
// client-ids of 300 bytes, pipelined: the first MAX_REQUESTS_PER_SEGMENT
// (16) requests starting in a segment are sampled, the rest followed, and
// the login decides. Before, a sample whose client-id was cut kept its
// rest pending in the segment, and no request after it in the segment was
// sampled: a SaslAuthenticate pipelined behind a SaslHandshake never was.
func TestRequestsPerSegmentDecide(t *testing.T) {
	h := newHarness(t, testOptions())
	r, err := h.d.NewSampleReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	reqs := loginThenTiny()
	for k := 1; k <= 64; k++ {
		s := h.connect(client4, uint16(21000+k), 5000)
		var wantSeqs []uint32
		start, seq := s.seq, s.seq
		for i := 0; i < len(reqs); i += k {
			seg := bytes.Join(reqs[i:min(i+k, len(reqs))], nil)
			for j := i; j < min(i+k, len(reqs)); j++ {
				if j-i < 16 {
					wantSeqs = append(wantSeqs, seq)
				}
				seq += uint32(len(reqs[j]))
			}
			s.send(seg, len(seg))
		}
		got := drain(t, r)
		if len(got) != len(wantSeqs) {
			t.Fatalf("%d requests a segment: %d samples, want %d", k, len(got), len(wantSeqs))
		}
		for i, g := range got {
			long := g.Seq-start < uint32(len(reqs[0])+len(reqs[1])+len(reqs[2])) // the login's
			if g.Seq != wantSeqs[i] || !g.Complete || g.ClientIDCut != long {
				t.Fatalf("%d requests a segment: sample %d at %d (complete %v, cut %v), want at %d, complete, cut %v", k, i, g.Seq, g.Complete, g.ClientIDCut, wantSeqs[i], long)
			}
		}
		if d := learnSamples(t, splitLearner(t, true), got)[s.key()]; !decidedAs(d, aliceKey) {
			t.Fatalf("%d requests a segment: decided %+v, want alice", k, d)
		}
	}
	if st, _ := h.d.Stats(); st.Desyncs != 0 || st.RingBufferDrops != 0 {
		t.Errorf("stats %+v", st)
	}
}

// SaslAuthenticate pipelined behind SaslHandshake in one segment, and
// split there at every byte (its rest in the next segment), client-ids of
// 300 bytes: the login is read and the connection is alice's.
func TestSASLAuthenticatePipelinedAndSplit(t *testing.T) {
	opts := testOptions()
	opts.SampleSlotsPerCPU = 1 << 14 // every connection's fragments, drained once
	h := newHarness(t, opts)
	r, err := h.d.NewSampleReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	login := saslLogin(strings.Repeat("a", 300))
	auth := login[2]
	splits := map[ConnKey]int{}
	for k := 0; k <= len(auth); k++ {
		s := h.connect(client4, uint16(22000+k), 7000)
		splits[s.key()] = k
		s.send(login[0], len(login[0]))
		first := append(append([]byte{}, login[1]...), auth[:k]...)
		s.send(first, len(first))
		if k < len(auth) {
			s.send(auth[k:], len(auth))
		}
	}
	for key, got := range byConn(drain(t, r)) {
		k := splits[key]
		if len(got) != 3 {
			t.Fatalf("authentication split at %d: %d samples, want 3", k, len(got))
		}
		if d := learnSamples(t, splitLearner(t, true), got)[key]; !decidedAs(d, aliceKey) {
			t.Fatalf("authentication split at %d: decided %+v, want alice", k, d)
		}
		delete(splits, key)
	}
	if len(splits) != 0 {
		t.Fatalf("%d connections sent no sample", len(splits))
	}
}

// Client-ids longer than a sample keeps, sharing their first 128 bytes:
// each keeps an entity of its own, the same however its requests are cut
// into segments, and none is the unresolved entity. Before, every
// client-id over 128 bytes went to the one unresolved entity.
func TestLongClientIDsStayDistinct(t *testing.T) {
	h := newHarness(t, testOptions())
	r, err := h.d.NewSampleReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	prefix := strings.Repeat("L", 128)
	var ids []string
	for _, n := range []int{129, 130, 136, 137, 138, 144, 145, 200, 300, 1000, 32000} {
		ids = append(ids, prefix+strings.Repeat("x", n-128))
		// The same length, one byte apart: at the start of the cut bytes,
		// and at the end.
		ids = append(ids, prefix+"y"+strings.Repeat("x", n-129))
		if n > 129 {
			ids = append(ids, prefix+strings.Repeat("x", n-129)+"y")
		}
	}
	seen := map[entity.Key]string{}
	port := uint16(23000)
	for _, id := range ids {
		req := kt.Frame(kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{3}}), 1, &id)
		var key entity.Key
		for _, segSize := range []int{1448, 577, 100, 13, 7} {
			l := splitLearner(t, false)
			port++
			s := h.connect(client4, port, 9000)
			s.send(req, segSize)
			got := drain(t, r)
			if len(got) != 1 {
				t.Fatalf("client-id of %d bytes in segments of %d: %d samples", len(id), segSize, len(got))
			}
			if cut := len(id) > ClientIDKept+ClientIDHashBytes; got[0].ClientIDCut != cut || got[0].ClientIDHashed != cut {
				t.Fatalf("client-id of %d bytes in segments of %d: cut %v, hashed %v; want %v", len(id), segSize, got[0].ClientIDCut, got[0].ClientIDHashed, cut)
			} else if cut && got[0].ClientIDHash != entity.LongClientHash([]byte(id[ClientIDKept:])) {
				t.Fatalf("client-id of %d bytes in segments of %d: the data path's hash %x, Go's %x", len(id), segSize, got[0].ClientIDHash, entity.LongClientHash([]byte(id[ClientIDKept:])))
			}
			d := learnSamples(t, l, got)[s.key()]
			if !d.Decided[entity.Produce] || d.Produce.Key.Kind != entity.KindClient {
				t.Fatalf("client-id of %d bytes in segments of %d: decided %+v, want a client entity", len(id), segSize, d)
			}
			if key == (entity.Key{}) {
				key = d.Produce.Key
			} else if d.Produce.Key != key {
				t.Fatalf("client-id of %d bytes: %v in segments of %d, %v in segments of 1448", len(id), d.Produce.Key, segSize, key)
			}
		}
		if other, dup := seen[key]; dup {
			t.Errorf("client-ids of %d and %d bytes share entity %v", len(other), len(id), key)
		}
		seen[key] = id
	}
}

// The data path's hash of a cut client-id is entity.LongClientHash of its
// cut bytes however segments cut them (words carried across segment ends,
// chunks of the hash's loop, a length split between two segments), and
// so is the rest of its sample: client-ids of 137 to 3000 bytes in
// segments of random sizes, 1 to 1448 bytes.
func TestClientIDHashUnderAnySegmentation(t *testing.T) {
	opts := testOptions()
	opts.SampleSlotsPerCPU = 1 << 14
	h := newHarness(t, opts)
	r, err := h.d.NewSampleReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rng := rand.New(rand.NewPCG(46, 6))
	want := map[ConnKey][]byte{}
	for i := range 400 {
		id := make([]byte, 137+rng.IntN(3000-137))
		for j := range id {
			id[j] = 'a' + byte(rng.IntN(26))
		}
		sid := string(id)
		req := kt.Frame(kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{3}}), int32(i), &sid)
		s := h.connect(client4, uint16(24000+i), rng.Uint32())
		want[s.key()] = req
		maxSeg := []int{3, 9, 20, 70, 300, 1448}[i%6]
		for data := req; len(data) > 0; {
			n := min(len(data), 1+rng.IntN(maxSeg))
			s.send(data[:n], n)
			data = data[n:]
		}
	}
	for key, got := range byConn(drain(t, r)) {
		req := want[key]
		data, cut, hash := cutSample(req, 256)
		if len(got) != 1 || !cut || !got[0].ClientIDHashed || got[0].ClientIDHash != hash || !bytes.Equal(got[0].Data, data) || !got[0].Complete {
			t.Fatalf("client-id of %d bytes: %d samples; first hashed %v, hash %x, want %x; data equal %v", len(req)-80, len(got),
				got[0].ClientIDHashed, got[0].ClientIDHash, hash, bytes.Equal(got[0].Data, data))
		}
		delete(want, key)
	}
	if len(want) != 0 {
		t.Fatalf("%d connections sent no sample", len(want))
	}
	if st, _ := h.d.Stats(); st.Desyncs != 0 || st.RingBufferDrops != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Bad input: client-id lengths at their extremes and lying (null, negative,
// longer than the request, the longest a client may send), in segments of
// one byte and whole: every request is sampled (cut only where the length
// is plausible), none loses the stream's position, and the learner takes
// each without failing.
func TestCutSampleBadLengths(t *testing.T) {
	opts := testOptions()
	opts.SampleSlotsPerCPU = 1 << 14 // a fragment per byte
	h := newHarness(t, opts)
	r, err := h.d.NewSampleReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	body := bytes.Repeat([]byte{0xab}, 400)
	var reqs [][]byte
	for _, n := range []uint16{0, 136, 137, 0x7fff, 0x8000, 0xfffe, 0xffff, 300, 410, 411} {
		// size, api key 18 (ApiVersions) v3, correlation id, client-id length, body
		req := binary.BigEndian.AppendUint32(nil, uint32(10+len(body)))
		req = append(req, 0, 18, 0, 3, 0, 0, 0, 7)
		req = binary.BigEndian.AppendUint16(req, n)
		reqs = append(reqs, append(req, body...))
	}
	stream := bytes.Join(reqs, nil)
	for i, seg := range []int{1, 13, 14, len(stream)} {
		s := h.connect(client4, uint16(25000+i), 100)
		s.send(stream, min(seg, 3000))
		got := drain(t, r)
		if len(got) != len(reqs) {
			t.Fatalf("segments of %d: %d samples, want %d", seg, len(got), len(reqs))
		}
		l := splitLearner(t, false)
		for j, g := range got {
			n := binary.BigEndian.Uint16(reqs[j][12:14])
			if want := n > ClientIDKept+ClientIDHashBytes && n <= 0x7fff && int(n)+10 <= 10+len(body); g.ClientIDCut != want {
				t.Errorf("segments of %d: client-id length %#x cut %v, want %v", seg, n, g.ClientIDCut, want)
			}
			l.LearnSample(g.Conn, g.Born, learnerSample(g)) // an error is fine, a panic is not
		}
	}
	if st, _ := h.d.Stats(); st.Desyncs != 0 {
		t.Errorf("stats %+v", st)
	}
}
