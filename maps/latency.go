package maps

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
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
	// RequestSize and ResponseSize are the request's and its response's
	// Kafka size fields (the bytes after each one's 4-byte size): what
	// tells a fetch that returned records from an empty long poll.
	// RequestSize is 0 for a request made pending before the agent's
	// upgrade (an earlier data path did not keep it).
	RequestSize, ResponseSize uint32
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

// LatencyReader reads the data path's latency measurements from its
// per-CPU latency rings, memory-mapped, polling them every pollInterval
// (the data path publishes a measurement with a store, and wakes nobody).
// Read is not safe for concurrent use; Close may be called from any
// goroutine. One reader at a time: the rings' tails are its.
type LatencyReader struct {
	polledReader[LatencyEvent] // latency_slots (struct latency_event) and latency_rings
	d                          *Datapath
	// Malformed counts slots that could not be decoded (none can, from
	// this build's own data path).
	Malformed uint64
}

// NewLatencyReader maps the latency rings.
func (d *Datapath) NewLatencyReader() (*LatencyReader, error) {
	if !d.latencyReaderOpen.CompareAndSwap(false, true) {
		return nil, errors.New("a latency reader is already open on this data path")
	}
	rings, err := mapRings(d.objs.LatencySlots, d.objs.LatencyRings, d.opts.latencySlots())
	if err == nil && rings.slotSize < binary.Size(sluiceLatencyEvent{}) {
		rings.unmap()
		err = fmt.Errorf("slots of %d bytes hold no latency event (%d)", rings.slotSize, binary.Size(sluiceLatencyEvent{}))
	}
	if err != nil {
		d.latencyReaderOpen.Store(false)
		return nil, fmt.Errorf("latency rings: %w", err)
	}
	return &LatencyReader{polledReader: newPolledReader[LatencyEvent](rings, &d.latencyReaderOpen), d: d}, nil
}

// Read waits for the next measurement.
func (r *LatencyReader) Read() (LatencyEvent, error) {
	return r.next(func(bool) error { return r.poll() })
}

// poll decodes every CPU's published measurements and hands their slots
// back to the data path.
func (r *LatencyReader) poll() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.mapped() {
		return ErrClosed
	}
	r.drain(func(slot []byte) {
		ev, err := decodeLatencyEvent(slot)
		if err != nil {
			r.Malformed++
			return
		}
		r.ready = append(r.ready, ev)
	})
	return nil
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
		RequestSize: ev.ReqSize, ResponseSize: ev.RespSize,
	}, nil
}
