package maps

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
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

// latencyReader opens the data path's latency ring, closed with the test.
func latencyReader(t *testing.T, h *harness) *LatencyReader {
	t.Helper()
	r, err := h.d.NewLatencyReader()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
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
			r := latencyReader(t, h)
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

// Each measurement carries its request's and its response's Kafka size
// fields, what the agent tells a fetch that returned data from an empty
// long poll by: (a) an incremental session's fetch answered by an empty
// response, the first on the connection (its sync); (b) a full fetch
// spanning two segments, answered by a response carrying a record batch,
// behind another request's larger response in the same segment and with
// its header cut by the segment end. The size is the answering
// response's, never the one before it.
func TestLatencyCarriesKafkaSizes(t *testing.T) {
	sizeField := func(m []byte) uint32 { return binary.BigEndian.Uint32(m) }
	for fam, f := range families {
		t.Run(f.name, func(t *testing.T) {
			h := newHarness(t, testOptions())
			r := latencyReader(t, h)
			c := newLatencyConn(h, fam, 40520)

			// (a) 60 bytes asked, 18 back: no partition in the response.
			poll := kafkaReq(1, 31, 49)
			empty := kafkaResp(31, 14)
			c.send(poll)
			c.answer(empty)
			evs := drainLatency(t, r)
			if len(evs) != 1 || evs[0].CorrelationID != 31 {
				t.Fatalf("long poll: %+v, want one measurement of fetch 31", evs)
			}
			if got := evs[0]; got.RequestSize != sizeField(poll) || got.ResponseSize != sizeField(empty) {
				t.Errorf("long poll: sizes %d/%d, want %d/%d", got.RequestSize, got.ResponseSize, sizeField(poll), sizeField(empty))
			}

			// (b) A 3,360-byte fetch in two segments; a 600-byte response to
			// an unmeasured request, then the fetch's, with one 61-byte
			// batch header and 70 bytes of records, its header cut after 6
			// bytes.
			full := kafkaReq(1, 32, 3349)
			c.send(full[:1000])
			c.send(full[1000:])
			records := kafkaResp(32, 14+61+70)
			c.answer(append(kafkaResp(98, 596), records[:6]...))
			c.answer(records[6:])
			evs = drainLatency(t, r)
			if len(evs) != 1 || evs[0].CorrelationID != 32 {
				t.Fatalf("fetch with records: %+v, want one measurement of fetch 32", evs)
			}
			if got := evs[0]; got.RequestSize != sizeField(full) || got.ResponseSize != sizeField(records) {
				t.Errorf("fetch with records: sizes %d/%d, want %d/%d", got.RequestSize, got.ResponseSize, sizeField(full), sizeField(records))
			}
			if _, ok := evs[0].FromLastByte(); !ok {
				t.Errorf("fetch with records: its last byte was not seen: %+v", evs[0])
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
	r := latencyReader(t, h)
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

// Pipelined requests and their responses cut at random points (headers
// split at every offset, several in one segment), with now and then a
// response stream the data path cannot follow (an implausible size): every
// measurement names a request that was sent, once, with its api, and never
// a response before its request; the stream is found again after each
// loss. Seeded: a failure is reproducible.
func TestLatencyUnderRandomCuts(t *testing.T) {
	h := newHarness(t, testOptions())
	r := latencyReader(t, h)
	rng := rand.New(rand.NewPCG(34, 1))
	// cut splits b into segments of at most 1400 bytes, each cut at a
	// random point half the time (a test run takes at most a page).
	cut := func(b []byte) [][]byte {
		var out [][]byte
		for len(b) > 0 {
			n := min(len(b), 1400)
			if rng.IntN(2) == 0 && n > 1 {
				n = 1 + rng.IntN(n-1)
			}
			out = append(out, b[:n])
			b = b[n:]
		}
		return out
	}
	apis := map[int32]uint16{}
	seen := map[int32]bool{}
	measured := 0
	for round := 0; round < 20; round++ {
		c := newLatencyConn(h, 0, uint16(41000+round))
		// Batches of pipelined requests, each answered before the next
		// batch: each batch's first request is the pending one.
		for batch := 0; batch < 3; batch++ {
			var reqs, resps []byte
			n := 1 + rng.IntN(5)
			for i := 0; i < n; i++ {
				corr := int32(round*100 + batch*10 + i)
				api := uint16(rng.IntN(3))
				apis[corr] = api
				reqs = append(reqs, kafkaReq(api, corr, rng.IntN(3000))...)
				resps = append(resps, kafkaResp(corr, rng.IntN(2000))...)
			}
			for _, seg := range cut(reqs) {
				c.send(seg)
			}
			if round%5 == 4 && batch == 1 { // a stream it cannot follow: an implausible size where a response starts
				c.answer([]byte{0x80, 0, 0, 0, 1, 2, 3, 4})
			}
			for _, seg := range cut(resps) {
				c.answer(seg)
			}
		}
		for _, ev := range drainLatency(t, r) {
			api, sent := apis[ev.CorrelationID]
			switch {
			case !sent:
				t.Errorf("round %d: a measurement of correlation id %d, which no request carried", round, ev.CorrelationID)
			case seen[ev.CorrelationID]:
				t.Errorf("round %d: correlation id %d measured twice", round, ev.CorrelationID)
			case api != ev.APIKey:
				t.Errorf("round %d: id %d measured as api %d, sent as %d", round, ev.CorrelationID, ev.APIKey, api)
			case ev.Response < ev.FirstByte || (ev.LastByte != 0 && (ev.LastByte < ev.FirstByte || ev.LastByte > ev.Response)):
				t.Errorf("round %d: id %d: first %v last %v response %v", round, ev.CorrelationID, ev.FirstByte, ev.LastByte, ev.Response)
			}
			seen[ev.CorrelationID] = true
			measured++
		}
	}
	st, _ := h.d.Stats()
	t.Logf("measured %d requests over 20 connections; %+v", measured, st)
	// Every batch's first request is pending and answered: 60, less the
	// ones whose header a request segment cut (not measured) or whose
	// response starts mid-segment on a stream not yet, or no longer,
	// followed. An implausible size on a followed stream loses it (a stream
	// not followed yet ignores it).
	if measured < 40 || st.ResponseDesyncs == 0 {
		t.Errorf("measured %d requests (want most of 60), %d desyncs (want the unfollowable streams')", measured, st.ResponseDesyncs)
	}
}

// A pending request whose response started mid-segment on a stream not
// followed yet (so no sync was found) gives its place, after
// latency_unsynced_wait_ns, to a newer request, whose response then
// synchronises the stream; on a followed stream a pending request keeps
// its place however long it waits.
func TestLatencyUnsyncedPendingGivesWay(t *testing.T) {
	opts := testOptions()
	opts.latencyUnsyncedWait = 30 * time.Millisecond
	h := newHarness(t, opts)
	r := latencyReader(t, h)
	c := newLatencyConn(h, 0, 40600)
	c.send(kafkaReq(0, 31, 10)) // pending
	// Its response after another's in one segment: no sync, no measurement.
	c.answer(append(kafkaResp(30, 20), kafkaResp(31, 5)...))
	c.send(kafkaReq(0, 32, 10)) // too soon: 31 keeps its place
	c.answer(kafkaResp(32, 5))
	if evs := drainLatency(t, r); len(evs) != 0 {
		t.Fatalf("%+v: nothing can be measured yet", evs)
	}
	time.Sleep(40 * time.Millisecond) // the wait is what is tested
	c.send(kafkaReq(0, 33, 10))       // takes 31's place
	c.answer(kafkaResp(33, 5))
	evs := drainLatency(t, r)
	if len(evs) != 1 || evs[0].CorrelationID != 33 {
		t.Fatalf("%+v, want 33 measured", evs)
	}
	// Followed now: a pending request keeps its place past the wait.
	c.send(kafkaReq(0, 34, 10))
	time.Sleep(40 * time.Millisecond)
	c.send(kafkaReq(0, 35, 10))
	c.answer(append(kafkaResp(34, 5), kafkaResp(35, 5)...))
	if evs := drainLatency(t, r); len(evs) != 1 || evs[0].CorrelationID != 34 {
		t.Fatalf("%+v, want 34 measured (pending on a followed stream)", evs)
	}
}

// measureOnEachCPU measures a request answered on each CPU, so through
// each CPU's latency ring, and reads both measurements.
func measureOnEachCPU(t *testing.T, h *harness) {
	t.Helper()
	r := latencyReader(t, h)
	c := newLatencyConn(h, 0, 42900)
	for i, cpu := range []int{1, 0} {
		corr := int32(50 + i)
		onCPU(t, cpu, func() {
			c.send(kafkaReq(0, corr, 10))
			c.answer(kafkaResp(corr, 5))
		})
	}
	got := map[int32]bool{}
	for _, ev := range drainLatency(t, r) {
		got[ev.CorrelationID] = true
	}
	if len(got) != 2 || !got[50] || !got[51] {
		t.Fatalf("measured %v, want 50 (answered on CPU 1) and 51 (CPU 0)", got)
	}
}

// A CPU's latency ring never overwrites what the agent has not read: when
// it is full the data path drops the new measurement and counts it, and
// once the reader has read the ring, measurements flow again.
func TestLatencyRingFullDropsNewest(t *testing.T) {
	opts := testOptions()
	opts.latencySlotsPerCPU = 4
	opts.FirstRequestsSampled = 100
	h := newHarness(t, opts)
	r := latencyReader(t, h)
	c := newLatencyConn(h, 0, 42950)
	exchange := func(corrs ...int32) {
		onCPU(t, 0, func() {
			for _, corr := range corrs {
				c.send(kafkaReq(0, corr, 10))
				c.answer(kafkaResp(corr, 5))
			}
		})
	}
	ids := func(evs []LatencyEvent) []int32 {
		var out []int32
		for _, ev := range evs {
			out = append(out, ev.CorrelationID)
		}
		return out
	}
	exchange(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	if got := ids(drainLatency(t, r)); !slices.Equal(got, []int32{1, 2, 3, 4}) {
		t.Fatalf("measured %v, want the first four (the ring's slots)", got)
	}
	if st, _ := h.d.Stats(); st.LatencyEvents != 4 || st.LatencyDrops != 6 {
		t.Errorf("measured %d, dropped %d; want 4 and 6", st.LatencyEvents, st.LatencyDrops)
	}
	exchange(11, 12)
	if got := ids(drainLatency(t, r)); !slices.Equal(got, []int32{11, 12}) {
		t.Fatalf("after the read: measured %v, want 11 and 12", got)
	}
}

// One reader owns the latency rings' tails: a second is refused until the
// first closes, and a closed reader's Read says so.
func TestLatencyReaderIsExclusive(t *testing.T) {
	h := newHarness(t, testOptions())
	readerIsExclusive(t, h.d.NewLatencyReader, func(r *LatencyReader) error { _, err := r.Read(); return err })
}
