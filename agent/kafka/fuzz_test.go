package kafka

import (
	"reflect"
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func seedRequests(f *testing.F) {
	for v := int16(3); v <= 13; v++ {
		f.Add(frame(produceRequest(v), 1, str("p")))
	}
	for v := int16(0); v <= 18; v++ {
		f.Add(frame(fetchRequest(v, -1), 1, str("c")))
		f.Add(frame(fetchRequest(v, 1), 1, str("broker-1-fetcher-0")))
	}
	for v := int16(0); v <= (&kmsg.ShareFetchRequest{}).MaxVersion(); v++ {
		f.Add(frame(shareFetchRequest(v), 1, str("s")))
	}
	for v := int16(0); v <= 2; v++ {
		f.Add(authenticate(v, []byte("\x00alice\x00"+secret)))
		f.Add(authenticate(v, []byte("n,,n=b=2Cob,r=nonce")))
	}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = MechanismScramSHA256
	f.Add(frame(hs, 1, str("h")))
}

// FuzzParse: arbitrary bytes never panic; the parse is the same with a fresh
// Request and with a reused one; nothing reached is more than the bytes hold.
func FuzzParse(f *testing.F) {
	seedRequests(f)
	f.Add([]byte{0, 0, 0, 8, 0, 1, 0, 4})
	p := NewParser()
	var reused Request
	f.Fuzz(func(t *testing.T, sample []byte) {
		var fresh Request
		err1 := p.Parse(sample, &fresh)
		err2 := p.Parse(sample, &reused)
		if (err1 == nil) != (err2 == nil) || !sameParse(&fresh, &reused) {
			t.Fatalf("reused Request parses differently: %+v vs %+v", fresh, reused)
		}
		if n := partitions(&fresh); n > len(sample)/4 {
			t.Fatalf("%d partitions from %d bytes", n, len(sample))
		}
	})
}

// FuzzParseBody keeps the header valid and fuzzes Produce and Fetch bodies,
// which arbitrary bytes rarely reach.
func FuzzParseBody(f *testing.F) {
	f.Add(true, int16(9), []byte{0, 0, 0xff, 0xff, 0, 0, 0x75, 0x30, 2, 7, 'o', 'r', 'd', 'e', 'r', 's', 2, 0, 0, 0, 1, 0, 0, 0})
	f.Add(false, int16(12), []byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 42, 0, 0, 0, 3, 1, 1, 1, 0})
	f.Add(false, int16(4), make([]byte, 40))
	p := NewParser()
	var r Request
	f.Fuzz(func(t *testing.T, produce bool, version int16, body []byte) {
		key := KeyFetch
		if produce {
			key = KeyProduce
		}
		b := kbin.AppendInt16(nil, key)
		b = kbin.AppendInt16(b, version)
		b = kbin.AppendInt32(b, 1)
		b = kbin.AppendInt16(b, 1)
		b = append(b, 'c')
		if version >= 9 && produce || version >= 12 && !produce {
			b = append(b, 0)
		}
		b = append(b, body...)
		sample := append(kbin.AppendInt32(nil, int32(len(b))), b...)
		_ = p.Parse(sample, &r)
		if n := partitions(&r); n > len(sample)/4 {
			t.Fatalf("%d partitions from %d bytes", n, len(sample))
		}
		// Any prefix must parse without panic too.
		_ = p.Parse(sample[:len(sample)/2], &r)
	})
}

func partitions(r *Request) (n int) {
	for _, l := range [][]TopicPartitions{r.Topics, r.Forgotten} {
		for _, tp := range l {
			n += len(tp.Partitions) + 1
		}
	}
	return n
}

func sameParse(a, b *Request) bool {
	norm := func(r *Request) Request {
		c := *r
		c.Topics, c.Forgotten = clone(r.Topics), clone(r.Forgotten)
		if len(c.Topics) == 0 {
			c.Topics = nil
		}
		if len(c.Forgotten) == 0 {
			c.Forgotten = nil
		}
		return c
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// Hostile counts (2^31−1 topics, partitions, forgotten topics) cost memory in
// proportion to the bytes present, not to the counts.
func TestParseHostileLengthsAllocateLittle(t *testing.T) {
	body := []byte{}
	body = kbin.AppendInt32(body, -1)         // replica id
	body = kbin.AppendInt32(body, 0)          // max wait
	body = kbin.AppendInt32(body, 0)          // min bytes
	body = kbin.AppendInt32(body, 0)          // max bytes
	body = append(body, 0)                    // isolation
	body = kbin.AppendInt32(body, 0)          // session
	body = kbin.AppendInt32(body, 0)          // epoch
	body = kbin.AppendInt32(body, 0x7fffffff) // topics
	body = kbin.AppendString(body, "t")
	body = kbin.AppendInt32(body, 0x7fffffff) // partitions
	for i := 0; i < 10; i++ {
		body = kbin.AppendInt32(body, int32(i))
		body = append(body, make([]byte, 8+8+4)...)
	}
	b := kbin.AppendInt16(nil, KeyFetch)
	b = kbin.AppendInt16(b, 7)
	b = kbin.AppendInt32(b, 1)
	b = kbin.AppendInt16(b, -1)
	b = append(b, body...)
	// The size field claims 100 MiB: the sample is a prefix of a huge request.
	sample := append(kbin.AppendInt32(nil, MaxRequestSize), b...)

	p := NewParser()
	var r Request
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := p.Parse(sample, &r)
	runtime.ReadMemStats(&after)
	if err != nil || !r.Truncated || len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 10 {
		t.Fatalf("hostile fetch: %+v %v", r, err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<10 {
		t.Errorf("parse of a %d-byte sample allocated %d bytes", len(sample), grew)
	}
}

// FuzzParseResponseStart: arbitrary bytes never panic; what is accepted has
// a size a response can have and the correlation id at bytes 4-7; a real
// response's start (franz-go encodes it) is read back exactly.
func FuzzParseResponseStart(f *testing.F) {
	for _, resp := range []kmsg.Response{kmsg.NewPtrProduceResponse(), kmsg.NewPtrFetchResponse(), kmsg.NewPtrMetadataResponse()} {
		for _, v := range []int16{0, resp.MaxVersion()} {
			resp.SetVersion(v)
			body := resp.AppendTo(nil)
			f.Add(responseFrame(int32(v)+7, resp.IsFlexible(), body))
		}
	}
	f.Add([]byte{0, 0, 0, 3, 0, 0, 0, 1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseResponseStart(b)
		if err != nil {
			return
		}
		if r.Size < 4 || r.Size > MaxResponseBytes || len(b) < 8 || r.CorrelationID != int32(uint32(b[4])<<24|uint32(b[5])<<16|uint32(b[6])<<8|uint32(b[7])) {
			t.Fatalf("accepted %+v from %x", r, b[:min(len(b), 16)])
		}
	})
}

// responseFrame is a response as a broker writes it: size, correlation id,
// an empty tag section when the header is flexible, the body.
func responseFrame(correlationID int32, flexible bool, body []byte) []byte {
	var h []byte
	h = kbin.AppendInt32(h, correlationID)
	if flexible {
		h = append(h, 0)
	}
	out := kbin.AppendInt32(nil, int32(len(h)+len(body)))
	return append(append(out, h...), body...)
}
