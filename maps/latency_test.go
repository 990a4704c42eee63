package maps

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"
)

// kafkaReq is a request of api key api with correlation id corr and n body
// bytes after a one-byte client-id.
func kafkaReq(api uint16, corr int32, n int) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(2+2+4+2+1+n))
	b = binary.BigEndian.AppendUint16(b, api)
	b = binary.BigEndian.AppendUint16(b, 3)
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 1)
	b = append(b, 'c')
	return append(b, make([]byte, n)...)
}

// kafkaResp is a response to correlation id corr with n body bytes.
func kafkaResp(corr int32, n int) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(4+n))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	return append(b, make([]byte, n)...)
}

func drainLatency(t *testing.T, r *LatencyReader) []LatencyEvent {
	t.Helper()
	var out []LatencyEvent
	for {
		r.SetDeadline(time.Now().Add(30 * time.Millisecond))
		ev, err := r.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

// latencyConn plays one connection's client and broker streams.
type latencyConn struct {
	h                *harness
	fam              int
	port             uint16
	reqSeq, respSeq  uint32
	client, brokerIP string
}

func (c *latencyConn) send(b []byte) {
	f := families[c.fam]
	c.h.run(Produce, toBroker(f.client, f.broker, c.port, c.reqSeq, flagACK|flagPSH, b))
	c.reqSeq += uint32(len(b))
}

func (c *latencyConn) answer(b []byte) {
	f := families[c.fam]
	c.h.run(Fetch, fromBroker(f.client, f.broker, c.port, c.respSeq, b))
	c.respSeq += uint32(len(b))
}

func newLatencyConn(h *harness, fam int, port uint16) *latencyConn {
	f := families[fam]
	h.handshake(f.client, f.broker, port, 1000)
	return &latencyConn{h: h, fam: fam, port: port, reqSeq: 1001, respSeq: 8}
}

// One request in flight at a time per connection is measured, from its
// first and last bytes to its response's first byte, matched by
// correlation id through pipelined requests, a request spanning segments,
// a response header cut by a segment end, several responses in one
// segment and a response to an id nobody sent. Nothing else is reported.
func TestLatencyMatchesResponses(t *testing.T) {
	for fam, f := range families {
		t.Run(f.name, func(t *testing.T) {
			h := newHarness(t, testOptions())
			r, err := h.d.NewLatencyReader()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			c := newLatencyConn(h, fam, 40500)

			// A: one segment each way.
			c.send(kafkaReq(0, 11, 40))
			c.answer(kafkaResp(11, 30))
			evs := drainLatency(t, r)
			if len(evs) != 1 || evs[0].APIKey != 0 || evs[0].CorrelationID != 11 || evs[0].Conn != connKey(f.client, f.broker, 40500) {
				t.Fatalf("request A: %+v, want one measurement of produce 11", evs)
			}
			a := evs[0]
			if a.LastByte != a.FirstByte || a.Response < a.FirstByte {
				t.Errorf("A: first %v last %v response %v: want last = first (one segment) and the response after", a.FirstByte, a.LastByte, a.Response)
			}

			// B spans two segments, C follows it while B is pending.
			b := kafkaReq(1, 12, 3000)
			c.send(b[:1000])
			c.send(append(b[1000:], kafkaReq(0, 13, 20)...))
			// B's response header cut after 5 bytes; the rest, then C's
			// response, in the next segment.
			rb := append(kafkaResp(12, 500), kafkaResp(13, 10)...)
			c.answer(rb[:5])
			c.answer(rb[5:])
			evs = drainLatency(t, r)
			if len(evs) != 1 || evs[0].CorrelationID != 12 || evs[0].APIKey != 1 {
				t.Fatalf("B and C: %+v, want one measurement, of fetch 12 (C came while B was pending)", evs)
			}
			if last, ok := evs[0].FromLastByte(); !ok || evs[0].LastByte <= evs[0].FirstByte || last > evs[0].FromFirstByte() {
				t.Errorf("B: first %v last %v response %v: want its last byte after its first, both before the response", evs[0].FirstByte, evs[0].LastByte, evs[0].Response)
			}

			// D pending; a response to an id nobody sent, then D's, in one segment.
			c.send(kafkaReq(3, 14, 10))
			c.answer(append(kafkaResp(99, 7), kafkaResp(14, 7)...))
			evs = drainLatency(t, r)
			if len(evs) != 1 || evs[0].CorrelationID != 14 {
				t.Fatalf("D: %+v, want one measurement of 14", evs)
			}
			st, err := h.d.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.LatencyEvents != 3 || st.ResponseResyncs != 1 || st.ResponseDesyncs != 0 {
				t.Errorf("stats %+v: want 3 measurements, one sync (A's response), no desync", st)
			}
		})
	}
}

// A request never answered (acks=0 produce) is given up after the expiry
// and the next sampled request is measured; a response to the given-up
// one, or an implausible response size, reports nothing; a stream whose
// sync was lost is found again at the next pending request's response.
func TestLatencyExpiresAndResyncs(t *testing.T) {
	opts := testOptions()
	opts.latencyExpire = 40 * time.Millisecond
	h := newHarness(t, opts)
	r, err := h.d.NewLatencyReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := newLatencyConn(h, 0, 40501)
	c.send(kafkaReq(0, 21, 10)) // never answered
	// The expiry is what is tested: time has to pass.
	time.Sleep(60 * time.Millisecond)
	c.send(kafkaReq(0, 22, 10))
	c.answer(kafkaResp(22, 5))
	c.answer(kafkaResp(21, 5)) // late, for the given-up request
	evs := drainLatency(t, r)
	if len(evs) != 1 || evs[0].CorrelationID != 22 {
		t.Fatalf("%+v, want only 22 measured", evs)
	}
	if d := evs[0].FromFirstByte(); d < 0 || d > time.Second {
		t.Errorf("22 measured %v", d)
	}
	// An implausible size where a response starts: sync lost.
	c.answer([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1, 2, 3})
	// The next pending request's response, starting a segment, finds it.
	c.send(kafkaReq(0, 23, 10))
	c.answer(kafkaResp(23, 5))
	evs = drainLatency(t, r)
	if len(evs) != 1 || evs[0].CorrelationID != 23 {
		t.Fatalf("after the lost sync: %+v, want 23 measured", evs)
	}
	st, _ := h.d.Stats()
	if st.LatencyExpired != 1 || st.ResponseDesyncs != 1 || st.ResponseResyncs != 2 {
		t.Errorf("stats %+v: want one request given up, one desync, two syncs", st)
	}
}
