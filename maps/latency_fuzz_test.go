package maps

import (
	"encoding/binary"
	"testing"
	"time"
)

// FuzzLatencyStreams plays a connection whose client and broker streams
// the input writes (#34, bad input): requests pipelined at will, responses
// to ids nobody sent, out of order, cut anywhere, raw bytes where a
// response should start, and connections closed with requests in flight.
// Whatever the broker side says, every measurement names a request the
// client sent, with its api, never ends before it began, and is not
// absurd; the program never fails a run. The data path keeps at most one
// request per connection, so nothing else can grow.
//
// The input is a program of one-byte operations and their operands:
//
//	0, 1  a request: api (1 byte, 0-3), correlation id (2), body/8 (1)
//	2, 3  a response: correlation id (2), body/8 (1)
//	4     raw bytes on the response stream: a length (1, at most 31), the bytes
//	5, 6  send what the client, or the broker, has written, in segments of
//	      at most (1 byte)*6+1 bytes
//	7     close the connection (client FIN, broker FIN, client RST) and
//	      open another: what was in flight is left unanswered
func FuzzLatencyStreams(f *testing.F) {
	req := func(api byte, corr uint16, size byte) []byte {
		return []byte{0, api, byte(corr >> 8), byte(corr), size}
	}
	resp := func(corr uint16, size byte) []byte { return []byte{2, byte(corr >> 8), byte(corr), size} }
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	flushReq, flushResp := []byte{5, 200}, []byte{6, 200}
	f.Add(cat(req(0, 1, 4), flushReq, resp(1, 2), flushResp))                                                     // one, answered
	f.Add(cat(req(0, 1, 4), req(1, 2, 9), req(3, 3, 0), flushReq, resp(1, 2), resp(2, 0), resp(3, 1), flushResp)) // pipelined
	f.Add(cat(req(0, 7, 4), flushReq, resp(9, 2), resp(7, 1), flushResp))                                         // an id nobody sent first
	f.Add(cat(req(0, 1, 4), req(0, 2, 4), flushReq, resp(2, 2), resp(1, 2), flushResp))                           // out of order
	f.Add(cat(req(0, 1, 4), flushReq, []byte{4, 8, 0x80, 0, 0, 0, 0, 0, 0, 1}, resp(1, 2), flushResp))            // an implausible size
	f.Add(cat(req(0, 1, 250), []byte{5, 0}, resp(1, 250), []byte{6, 0}))                                          // cut at every byte
	f.Add(cat(req(0, 1, 4), flushReq, []byte{7}, resp(1, 2), flushResp))                                          // closed in flight
	f.Add(cat(req(0, 1, 4), req(0, 2, 4), req(0, 3, 4), flushReq))                                                // never answered
	h := newHarness(f, testOptions())
	r, err := h.d.NewLatencyReader()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { r.Close() })
	port := uint16(20000)
	f.Fuzz(func(t *testing.T, program []byte) {
		h.t = t // the harness outlives an input; its checks report to this one
		sent := map[int32]map[uint16]bool{}
		var c *latencyConn
		open := func() {
			port = 20000 + (port-20000+1)%20000
			c = newLatencyConn(h, int(port%2), port)
		}
		closeConn := func() {
			fam := families[c.fam]
			h.run(Produce, toBroker(fam.client, fam.broker, c.port, c.reqSeq, flagFIN|flagACK, nil))
			h.run(Fetch, segment{src: netipPort(fam.broker, brokerPort), dst: netipPort(fam.client, c.port), seq: c.respSeq, ack: c.reqSeq + 1, flags: flagFIN | flagACK})
			h.run(Produce, toBroker(fam.client, fam.broker, c.port, c.reqSeq+1, flagRST, nil))
		}
		open()
		var toBrokerBuf, toClientBuf []byte
		i := 0
		next := func() byte {
			if i >= len(program) {
				return 0
			}
			i++
			return program[i-1]
		}
		send := func(buf *[]byte, max int, to func([]byte)) {
			for b := *buf; len(b) > 0; {
				n := min(len(b), max)
				to(b[:n])
				b = b[n:]
			}
			*buf = nil
		}
		for ops := 0; i < len(program) && ops < 256; ops++ {
			switch next() % 8 {
			case 0, 1:
				api := uint16(next() % 4)
				corr := int32(binary.BigEndian.Uint16([]byte{next(), next()}))
				if sent[corr] == nil {
					sent[corr] = map[uint16]bool{}
				}
				sent[corr][api] = true
				toBrokerBuf = append(toBrokerBuf, kafkaReq(api, corr, int(next())*8)...)
			case 2, 3:
				corr := int32(binary.BigEndian.Uint16([]byte{next(), next()}))
				toClientBuf = append(toClientBuf, kafkaResp(corr, int(next())*8)...)
			case 4:
				for n := next() % 32; n > 0; n-- {
					toClientBuf = append(toClientBuf, next())
				}
			case 5:
				send(&toBrokerBuf, int(next())*6+1, c.send)
			case 6:
				send(&toClientBuf, int(next())*6+1, c.answer)
			case 7:
				closeConn()
				toBrokerBuf, toClientBuf = nil, nil
				open()
			}
		}
		send(&toBrokerBuf, 1400, c.send)
		send(&toClientBuf, 1400, c.answer)
		closeConn()
		evs := drainLatency(t, r)
		t.Logf("%d requests sent, %d measured", len(sent), len(evs))
		for _, ev := range evs {
			apis := sent[ev.CorrelationID]
			switch {
			case !apis[ev.APIKey]:
				t.Errorf("a measurement of correlation id %d api %d, which no request carried (sent: %v)", ev.CorrelationID, ev.APIKey, apis)
			case ev.Response < ev.FirstByte || (ev.LastByte != 0 && (ev.LastByte < ev.FirstByte || ev.LastByte > ev.Response)):
				t.Errorf("id %d: first %v last %v response %v", ev.CorrelationID, ev.FirstByte, ev.LastByte, ev.Response)
			case ev.Response-ev.FirstByte > 10*time.Second:
				t.Errorf("id %d: %v from first byte to response, in a test run of milliseconds", ev.CorrelationID, ev.Response-ev.FirstByte)
			}
		}
	})
}
