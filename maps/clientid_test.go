package maps

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/agent/entity"
	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
)

// cutSample is what a sample of req holds: its first sampleBytes bytes,
// or, when its client-id is longer than ClientIDKept + ClientIDHashBytes,
// the header, ClientIDKept bytes of the client-id and the bytes after it,
// with the size and length fields rewritten to match; the data path sends
// the hash of the cut bytes in ClientIDHashBytes of the sample, which the
// reader takes out. hash is that hash (cut: the client-id was cut).
func cutSample(req []byte, sampleBytes int) (data []byte, cut bool, hash uint64) {
	n := int(binary.BigEndian.Uint16(req[12:14]))
	if n == 0xffff || n <= ClientIDKept+ClientIDHashBytes {
		return req[:min(len(req), sampleBytes)], false, 0
	}
	gap := n - ClientIDKept
	kept := append(append([]byte{}, req[:14+ClientIDKept]...), req[14+n:]...)
	binary.BigEndian.PutUint32(kept[0:4], uint32(len(req)-4-gap))
	binary.BigEndian.PutUint16(kept[12:14], ClientIDKept)
	return kept[:min(len(kept), sampleBytes-ClientIDHashBytes)], true, entity.LongClientHash(req[14+ClientIDKept : 14+n])
}

func saslPlain(user string) kmsg.Request {
	r := kmsg.NewPtrSASLAuthenticateRequest()
	r.SetVersion(2)
	r.SASLAuthBytes = []byte("\x00" + user + "\x00pw")
	return r
}

// longClientIDRequests: a Produce, a Fetch and a SASL login whose
// client-ids are 0 to 32000 bytes long (a client chooses up to 32767).
func longClientIDRequests() [][]byte {
	var reqs [][]byte
	for i, n := range []int{0, 128, 129, 200, 240, 1000, 32000} {
		id := strings.Repeat("c", n)
		reqs = append(reqs,
			kt.Frame(kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{3}}), int32(3*i), &id),
			kt.Frame(kt.Fetch(12, 0, 0, []kt.TP{{Topic: "clicks", Partitions: []int32{1}}}, nil), int32(3*i+1), &id),
			kt.Frame(saslPlain("alice"), int32(3*i+2), &id))
	}
	return reqs
}

// No client-id length hides what decides a request's entity: a sample of
// a request whose client-id is longer than ClientIDKept + ClientIDHashBytes
// keeps the header, the client-id's first ClientIDKept bytes, the hash of
// the rest and then what follows it (the topics, the login), however the
// stream is cut into segments: one shorter than the client-id's length
// field (< 14 bytes) too, cut once the length comes.
func TestSampleCutsLongClientIDs(t *testing.T) {
	reqs := longClientIDRequests()
	for i, segSize := range []int{1, 7, 13, 14, 20, 100, 143, 1448, 3000} {
		t.Run(fmt.Sprintf("segments-of-%d", segSize), func(t *testing.T) {
			h := newHarness(t, testOptions())
			r, err := h.d.NewSampleReader()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			s := h.connect(client4, uint16(45000+i), 1000)
			var got []Sample
			for _, req := range reqs {
				s.send(req, segSize)
				got = append(got, drain(t, r)...)
			}
			if len(got) != len(reqs) {
				t.Fatalf("%d samples, want %d", len(got), len(reqs))
			}
			for j, req := range reqs {
				want, cut, hash := cutSample(req, 256)
				if !bytes.Equal(got[j].Data, want) || got[j].ClientIDCut != cut || got[j].ClientIDHashed != cut || got[j].ClientIDHash != hash || !got[j].Complete {
					t.Errorf("request %d (client-id %d bytes): sample of %d bytes, cut %v, hash %x (%v), complete %v; want %d bytes, cut %v, hash %x",
						j, binary.BigEndian.Uint16(req[12:14]), len(got[j].Data), got[j].ClientIDCut, got[j].ClientIDHash, got[j].ClientIDHashed, got[j].Complete, len(want), cut, hash)
				}
			}
			if st, _ := h.d.Stats(); st.Desyncs != 0 || st.RingBufferDrops != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// A cut request followed by others in one segment: the cut sample is
// sent whole from the segment (head, hash, rest) before the next request
// starts, so the requests after it in the segment are sampled too. A cut
// request that starts 20 bytes before a segment's end continues its kept
// client-id head in the next segment, then the hash and what follows.
func TestSampleCutMidSegment(t *testing.T) {
	h := newHarness(t, testOptions())
	r, err := h.d.NewSampleReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	short := kt.Frame(kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{0}}), 1, kt.Str("app"))
	long := kt.Frame(kt.Produce(9, kt.TP{Topic: "orders", Partitions: []int32{1}}), 2, kt.Str(strings.Repeat("x", 1000)))
	s := h.connect(client4, 45100, 5000)
	s.send(bytes.Join([][]byte{short, long, short}, nil), 3000) // one segment
	s.send(short, 3000)
	got := drain(t, r)
	wantLong, _, hash := cutSample(long, 256)
	if len(got) != 4 || !bytes.Equal(got[0].Data, short) || !bytes.Equal(got[1].Data, wantLong) || !got[1].ClientIDCut || got[1].ClientIDHash != hash ||
		!bytes.Equal(got[2].Data, short) || !bytes.Equal(got[3].Data, short) || got[3].Seq != s.seq-uint32(len(short)) {
		t.Fatalf("samples %d; want short, long cut, short, and the next segment's short", len(got))
	}
	// Padding that puts the long request's start 20 bytes before the end
	// of a 1448-byte segment.
	// Its client-id is short (it is not cut itself): partitions fill it.
	padFrame := func(parts, idLen int) []byte {
		ps := make([]int32, parts)
		for i := range ps {
			ps[i] = int32(i)
		}
		return kt.Frame(kt.Produce(9, kt.TP{Topic: "pad", Partitions: ps}), 3, kt.Str(strings.Repeat("p", idLen)))
	}
	parts := 1
	for len(padFrame(parts+1, 0)) <= 1448-20 {
		parts++
	}
	pad := padFrame(parts, 1448-20-len(padFrame(parts, 0)))
	stream := append(append([]byte{}, pad...), long...)
	if len(pad) != 1448-20 {
		t.Fatalf("padding request of %d bytes, want %d", len(pad), 1448-20)
	}
	s.send(stream, 1448)
	got = drain(t, r)
	if len(got) != 2 || !bytes.Equal(got[1].Data, wantLong) || !got[1].ClientIDCut || got[1].ClientIDHash != hash || !got[1].Complete {
		t.Errorf("a cut request starting 20 bytes before a segment's end: %d samples; second %d bytes cut %v complete %v",
			len(got), len(got[len(got)-1].Data), got[len(got)-1].ClientIDCut, got[len(got)-1].Complete)
	}
	if st, _ := h.d.Stats(); st.Desyncs != 0 {
		t.Errorf("stats %+v", st)
	}
}
