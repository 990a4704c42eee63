package maps

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// LatencyEvent is one request the data path measured at the NIC: from its
// arrival at the broker's interface to the first byte of its response
// leaving it, matched by connection and correlation id (bpf/latency.h).
type LatencyEvent struct {
	Conn ConnKey
	// Bound is the connection's entities (produce, fetch) when it was
	// answered; Born tells connections on one 4-tuple apart.
	Bound [2]uint32
	Born  uint64
	// APIKey and CorrelationID are the request's, as the client wrote them.
	APIKey        uint16
	CorrelationID int32
	// FirstByte and LastByte are when the request's first and last bytes
	// arrived, Response when its response's first byte left, on
	// CLOCK_MONOTONIC. LastByte is 0 when the data path did not see it.
	FirstByte, LastByte, Response time.Duration
}

// FromFirstByte is the time from the request's first byte to its response.
func (e LatencyEvent) FromFirstByte() time.Duration { return e.Response - e.FirstByte }

// FromLastByte is the time from the request's last byte (the broker could
// start on it) to its response; ok is false when the last byte was not seen.
func (e LatencyEvent) FromLastByte() (d time.Duration, ok bool) {
	if e.LastByte == 0 || e.LastByte > e.Response {
		return 0, false
	}
	return e.Response - e.LastByte, true
}

// LatencyReader reads the data path's latency measurements. One reader at
// a time.
type LatencyReader struct {
	r *ringbuf.Reader
}

// NewLatencyReader opens the latency_events ring buffer.
func (d *Datapath) NewLatencyReader() (*LatencyReader, error) {
	r, err := ringbuf.NewReader(d.objs.LatencyEvents)
	if err != nil {
		return nil, fmt.Errorf("open latency events: %w", err)
	}
	return &LatencyReader{r: r}, nil
}

// SetDeadline bounds the next Read's wait (os.ErrDeadlineExceeded).
func (r *LatencyReader) SetDeadline(t time.Time) { r.r.SetDeadline(t) }

// Read waits for the next measurement. A record that does not decode (it
// cannot, from this build's own data path) is an error naming its size.
func (r *LatencyReader) Read() (LatencyEvent, error) {
	rec, err := r.r.Read()
	if err != nil {
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return LatencyEvent{}, os.ErrDeadlineExceeded
		case errors.Is(err, ringbuf.ErrClosed):
			return LatencyEvent{}, ErrClosed
		}
		return LatencyEvent{}, err
	}
	return decodeLatencyEvent(rec.RawSample)
}

func decodeLatencyEvent(raw []byte) (LatencyEvent, error) {
	var ev sluiceLatencyEvent
	if len(raw) < binary.Size(ev) {
		return LatencyEvent{}, fmt.Errorf("latency event of %d bytes, want %d", len(raw), binary.Size(ev))
	}
	if err := binary.Read(bytes.NewReader(raw), binary.NativeEndian, &ev); err != nil {
		return LatencyEvent{}, err
	}
	return LatencyEvent{
		Conn: fromRaw(ev.Key), Bound: [2]uint32{ev.Bound.Entity[0], ev.Bound.Entity[1]}, Born: ev.ConnBorn,
		APIKey: ev.ApiKey, CorrelationID: ev.CorrId,
		FirstByte: time.Duration(ev.FirstNs), LastByte: time.Duration(ev.LastNs), Response: time.Duration(ev.RespNs),
	}, nil
}

// Close stops the reader (a blocked Read returns ErrClosed).
func (r *LatencyReader) Close() error { return r.r.Close() }
