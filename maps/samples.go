package maps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// Sample is the first bytes of one Kafka request on a connection, stitched
// from the data path's fragments.
type Sample struct {
	Conn ConnKey
	// Seq is the TCP sequence number of the request's first byte.
	Seq uint32
	// Time is the data path's CLOCK_MONOTONIC when the request started.
	Time time.Duration
	// Data is the request's first bytes, from its size field on: up to the
	// configured sample size, or the whole request if shorter.
	Data []byte
	// Complete is false when fragments went missing (ring buffer full,
	// segments out of order): Data is then a shorter prefix.
	Complete bool
	// Born tells connections on one 4-tuple apart: the data path's time of
	// entering the connection. A new Born is a new connection.
	Born uint64
	// Bound is what the connection's entry held when the request started
	// (produce, fetch): the agent re-binds a connection whose entry lost
	// its binding (evicted, or re-entered).
	Bound [2]uint32
}

// Layout of struct sample (bpf/types.h), checked against the generated
// type in tests.
const (
	sampleOffKey     = 0
	sampleOffReqSeq  = 36
	sampleOffFragOff = 40
	sampleOffReqLen  = 44
	sampleOffLen     = 48
	sampleOffTime    = 56
	sampleOffBorn    = 64
	sampleOffBound   = 72
	sampleOffData    = 80
	sampleSize       = sampleOffData + SampleMax
)

// fragment is one ring buffer record.
type fragment struct {
	key     ConnKey
	reqSeq  uint32
	fragOff uint32
	reqLen  uint32
	time    time.Duration
	born    uint64
	bound   [2]uint32
	data    []byte
}

func decodeFragment(raw []byte) (fragment, error) {
	if len(raw) < sampleSize {
		return fragment{}, fmt.Errorf("sample record of %d bytes, want %d", len(raw), sampleSize)
	}
	le := binary.LittleEndian
	var k sluiceConnKey
	copy(k.PeerAddr[:], raw[0:16])
	copy(k.LocalAddr[:], raw[16:32])
	k.PeerPort = le.Uint16(raw[32:])
	k.LocalPort = le.Uint16(raw[34:])
	n := int(le.Uint16(raw[sampleOffLen:]))
	if n > SampleMax {
		return fragment{}, fmt.Errorf("sample record claims %d bytes", n)
	}
	return fragment{
		key:     fromRaw(k),
		reqSeq:  le.Uint32(raw[sampleOffReqSeq:]),
		fragOff: le.Uint32(raw[sampleOffFragOff:]),
		reqLen:  le.Uint32(raw[sampleOffReqLen:]),
		time:    time.Duration(le.Uint64(raw[sampleOffTime:])),
		born:    le.Uint64(raw[sampleOffBorn:]),
		bound:   [2]uint32{le.Uint32(raw[sampleOffBound:]), le.Uint32(raw[sampleOffBound+4:])},
		data:    raw[sampleOffData : sampleOffData+n],
	}, nil
}

// assembler stitches fragments into samples per connection.
type assembler struct {
	sampleBytes int
	pending     map[ConnKey]*pendingSample
}

type pendingSample struct {
	sample Sample
	want   int // bytes that complete it: the sample size, or the request if shorter
}

func newAssembler(sampleBytes int) *assembler {
	return &assembler{sampleBytes: sampleBytes, pending: map[ConnKey]*pendingSample{}}
}

// add takes a fragment and returns the samples it completes: the
// connection's previous sample if it was left incomplete, and this one.
func (a *assembler) add(f fragment) []Sample {
	var out []Sample
	p := a.pending[f.key]
	switch {
	case f.fragOff == 0:
		if p != nil { // a new request started before the last one's bytes arrived
			out = append(out, p.sample)
		}
		p = &pendingSample{
			sample: Sample{Conn: f.key, Seq: f.reqSeq, Time: f.time, Born: f.born, Bound: f.bound,
				Data: append(make([]byte, 0, a.sampleBytes), f.data...)},
			want: a.sampleBytes,
		}
		a.pending[f.key] = p
	case p == nil || p.sample.Seq != f.reqSeq || int(f.fragOff) != len(p.sample.Data):
		return nil // a continuation of a sample we do not hold: drop it
	default:
		p.sample.Data = append(p.sample.Data, f.data...)
	}
	if f.reqLen != 0 && int(f.reqLen) < p.want {
		p.want = int(f.reqLen)
	}
	if len(p.sample.Data) >= p.want {
		p.sample.Data = p.sample.Data[:p.want]
		p.sample.Complete = true
		out = append(out, p.sample)
		delete(a.pending, f.key)
	}
	return out
}

// flush returns every incomplete sample older than age (by the data
// path's clock at now) and forgets them.
func (a *assembler) flush(now, age time.Duration) []Sample {
	var out []Sample
	for k, p := range a.pending {
		if now-p.sample.Time >= age {
			out = append(out, p.sample)
			delete(a.pending, k)
		}
	}
	return out
}

// SampleReader reads samples from the ring buffer. Not safe for concurrent use.
type SampleReader struct {
	rd    *ringbuf.Reader
	asm   *assembler
	ready []Sample
	rec   ringbuf.Record
	// Malformed counts records that could not be decoded.
	Malformed uint64
}

// ErrClosed is returned by Read after Close.
var ErrClosed = errors.New("sample reader closed")

// incompleteAfter: a sample whose continuation has not come within this
// time is delivered as it is.
const incompleteAfter = time.Second

// NewSampleReader opens the sample ring buffer.
func (d *Datapath) NewSampleReader() (*SampleReader, error) {
	rd, err := ringbuf.NewReader(d.objs.Samples)
	if err != nil {
		return nil, fmt.Errorf("open sample ring buffer: %w", err)
	}
	return &SampleReader{rd: rd, asm: newAssembler(d.opts.SampleBytes)}, nil
}

// SetDeadline makes Read return os.ErrDeadlineExceeded after t.
func (r *SampleReader) SetDeadline(t time.Time) { r.rd.SetDeadline(t) }

// Read blocks until a sample is complete (or given up on) and returns it.
func (r *SampleReader) Read() (Sample, error) {
	for len(r.ready) == 0 {
		err := r.rd.ReadInto(&r.rec)
		if errors.Is(err, ringbuf.ErrClosed) {
			return Sample{}, ErrClosed
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			r.ready = append(r.ready, r.asm.flush(MonotonicNow(), 0)...)
			if len(r.ready) == 0 {
				return Sample{}, err
			}
			break
		}
		if err != nil {
			return Sample{}, fmt.Errorf("read sample: %w", err)
		}
		f, err := decodeFragment(r.rec.RawSample)
		if err != nil {
			r.Malformed++
			continue
		}
		// Copy: the record buffer is reused by the next read.
		f.data = append([]byte(nil), f.data...)
		r.ready = append(r.ready, r.asm.add(f)...)
		r.ready = append(r.ready, r.asm.flush(f.time, incompleteAfter)...)
	}
	s := r.ready[0]
	r.ready = r.ready[1:]
	return s, nil
}

// Close stops the reader; a blocked Read returns ErrClosed.
func (r *SampleReader) Close() error { return r.rd.Close() }
