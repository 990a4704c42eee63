package maps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"
)

// Sample is the first bytes of one Kafka request on a connection, stitched
// from the data path's fragments.
type Sample struct {
	Conn ConnKey
	// Seq is the TCP sequence number of the request's first byte.
	Seq uint32
	// Time is when the reader took the request's first fragment from its
	// ring, on the data path's clock (CLOCK_MONOTONIC): within a poll of
	// the request's start.
	Time time.Duration
	// Data is the request's first bytes, from its size field on: up to the
	// configured sample size, or the whole request if shorter.
	Data []byte
	// Complete is false when fragments went missing (a sample ring full,
	// segments out of order): Data is then a shorter prefix.
	Complete bool
	// ClientIDCut: the request's client-id was longer than ClientIDKept +
	// ClientIDHashBytes, and Data holds its first ClientIDKept bytes and
	// then the bytes after it, with the size and client-id length fields
	// rewritten to match: a well-formed request whose client-id is a
	// prefix of the real one. The hash of the bytes cut took
	// ClientIDHashBytes of the sample, so Data is that much shorter than
	// the sample size.
	ClientIDCut bool
	// ClientIDHash is a cut client-id's hash of its bytes past the first
	// ClientIDKept (entity.LongClientHash of them), which the data path
	// sends in their place; ClientIDHashed says it came (a sample that
	// lost fragments may end before it).
	ClientIDHash   uint64
	ClientIDHashed bool
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
	sampleOffReqLen  = 40
	sampleOffFragOff = 44
	sampleOffLen     = 46
	sampleOffBorn    = 48
	sampleOffBound   = 56
	sampleOffData    = 64
	sampleSize       = sampleOffData + SampleMax
)

// ClientIDKept is how many bytes of a longer client-id a sample keeps
// (CLIENT_ID_KEPT in bpf/types.h): no client-chosen length pushes a
// request's topics or login out of its sample. ClientIDHashBytes
// (CLIENT_ID_HASH_BYTES) follow them in a cut sample: the hash of the
// client-id's other bytes, so that long client-ids stay apart.
const (
	ClientIDKept      = 128
	ClientIDHashBytes = 8
)

// fragOffClientIDCut marks the fragments of a cut sample's header and kept
// client-id bytes (SAMPLE_CLIENT_ID_CUT); the rest of frag_off is the
// offset.
const fragOffClientIDCut = 0x8000

// fragment is one sample slot's record.
type fragment struct {
	key     ConnKey
	reqSeq  uint32
	fragOff uint32
	// clientIDCut: a fragment of the header of a sample whose client-id
	// was cut (the first, or a later one when the client-id's length came
	// in a later segment than the request's start).
	clientIDCut bool
	reqLen      uint32
	time        time.Duration // when the reader took it
	born        uint64
	bound       [2]uint32
	data        []byte
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
	fragOff := le.Uint16(raw[sampleOffFragOff:])
	return fragment{
		key:         fromRaw(k),
		reqSeq:      le.Uint32(raw[sampleOffReqSeq:]),
		fragOff:     uint32(fragOff &^ fragOffClientIDCut),
		clientIDCut: fragOff&fragOffClientIDCut != 0,
		reqLen:      le.Uint32(raw[sampleOffReqLen:]),
		born:        le.Uint64(raw[sampleOffBorn:]),
		bound:       [2]uint32{le.Uint32(raw[sampleOffBound:]), le.Uint32(raw[sampleOffBound+4:])},
		data:        raw[sampleOffData : sampleOffData+n],
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
			out = append(out, p.sample.mended())
		}
		p = &pendingSample{
			sample: Sample{Conn: f.key, Seq: f.reqSeq, Time: f.time, Born: f.born, Bound: f.bound,
				Data: append(make([]byte, 0, a.sampleBytes), f.data...), ClientIDCut: f.clientIDCut},
			want: a.sampleBytes,
		}
		a.pending[f.key] = p
	case p == nil || p.sample.Seq != f.reqSeq || int(f.fragOff) != len(p.sample.Data):
		return nil // a continuation of a sample we do not hold: drop it
	default:
		p.sample.Data = append(p.sample.Data, f.data...)
		if f.clientIDCut && !p.sample.ClientIDCut {
			// Cut once its client-id's length came: the request is now
			// counted as the sample keeps it.
			p.sample.ClientIDCut, p.want = true, a.sampleBytes
		}
	}
	if f.reqLen != 0 && int(f.reqLen) < p.want {
		p.want = int(f.reqLen)
	}
	if len(p.sample.Data) >= p.want {
		p.sample.Data = p.sample.Data[:p.want]
		p.sample.Complete = true
		out = append(out, p.sample.mended())
		delete(a.pending, f.key)
	}
	return out
}

// mended returns the sample with a cut client-id's hash taken out of Data
// (into ClientIDHash) and its size and length fields rewritten to the
// bytes it keeps (the request minus the bytes cut out), so that it parses
// as a request whose client-id is the kept prefix. reqLen, as the data
// path reports it, counts the kept bytes and the hash.
func (s Sample) mended() Sample {
	if !s.ClientIDCut || len(s.Data) < 14 {
		return s
	}
	n := int(binary.BigEndian.Uint16(s.Data[12:14]))
	if n <= ClientIDKept+ClientIDHashBytes || n > 0x7fff {
		s.ClientIDCut = false // not what the data path cuts: leave it as sent
		return s
	}
	head := 14 + ClientIDKept
	if len(s.Data) >= head+ClientIDHashBytes {
		s.ClientIDHash, s.ClientIDHashed = binary.LittleEndian.Uint64(s.Data[head:]), true
	}
	if len(s.Data) > head {
		s.Data = append(s.Data[:head], s.Data[min(len(s.Data), head+ClientIDHashBytes):]...)
	}
	size := binary.BigEndian.Uint32(s.Data[0:4])
	binary.BigEndian.PutUint32(s.Data[0:4], size-uint32(n-ClientIDKept))
	binary.BigEndian.PutUint16(s.Data[12:14], ClientIDKept)
	return s
}

// flush returns every incomplete sample older than age (by the data
// path's clock at now) and forgets them.
func (a *assembler) flush(now, age time.Duration) []Sample {
	var out []Sample
	for k, p := range a.pending {
		if now-p.sample.Time >= age {
			out = append(out, p.sample.mended())
			delete(a.pending, k)
		}
	}
	return out
}

// stitcher orders fragments read from the CPUs' rings and feeds them to
// the assembler. Rings are drained one CPU after another, so one poll can
// find a request's continuation (written on one CPU) without its first
// fragment (written earlier on another CPU, whose ring was read before that
// fragment was published). It cannot miss it for two polls: a fragment is
// published before the connection's tracking state moves on, and a later
// fragment of the connection is written only after that. So the stitcher
// holds what a poll read until the next poll, then stitches each
// connection's fragments in stream order: by connection (born), request
// (sequence number) and offset.
type stitcher struct {
	asm  *assembler
	held map[ConnKey][]heldFragment
}

type heldFragment struct {
	fragment
	fresh bool // read by the current poll
}

func newStitcher(sampleBytes int) *stitcher {
	return &stitcher{asm: newAssembler(sampleBytes), held: map[ConnKey][]heldFragment{}}
}

// take adds one poll's fragments and returns the samples complete (or
// given up on: older than incompleteAfter at now). It stitches every
// fragment an earlier poll read, and those of this poll that come before
// one of them in the stream; the rest wait for the next poll, or are
// stitched now too when final (the caller stops waiting) and every
// incomplete sample is delivered as it is.
func (s *stitcher) take(fresh []fragment, now time.Duration, final bool) []Sample {
	for _, f := range fresh {
		s.held[f.key] = append(s.held[f.key], heldFragment{fragment: f, fresh: true})
	}
	var out []Sample
	for key, group := range s.held {
		sort.SliceStable(group, func(i, j int) bool { return streamBefore(group[i].fragment, group[j].fragment) })
		stitch := len(group)
		if !final {
			stitch = 0
			for i, f := range group {
				if !f.fresh {
					stitch = i + 1
				}
			}
		}
		for _, f := range group[:stitch] {
			out = append(out, s.asm.add(f.fragment)...)
		}
		rest := group[stitch:]
		if len(rest) == 0 {
			delete(s.held, key)
			continue
		}
		for i := range rest {
			rest[i].fresh = false
		}
		s.held[key] = rest
	}
	age := incompleteAfter
	if final {
		age = 0
	}
	return append(out, s.asm.flush(now, age)...)
}

// streamBefore orders two fragments of one 4-tuple as the stream carried
// them: an older connection first, then by request (sequence numbers
// compared as TCP does, across a wrap), then by offset.
func streamBefore(a, b fragment) bool {
	if a.born != b.born {
		return a.born < b.born
	}
	if a.reqSeq != b.reqSeq {
		return int32(a.reqSeq-b.reqSeq) < 0
	}
	return a.fragOff < b.fragOff
}

// SampleReader reads samples from the data path's per-CPU sample rings,
// memory-mapped, polling them every pollInterval. Read is not safe for
// concurrent use; Close may be called from any goroutine.
type SampleReader struct {
	polledReader[Sample] // sample_slots (struct sample) and sample_rings
	d                    *Datapath
	st                   *stitcher
	// fresh is the current poll's fragments (reused between polls).
	fresh []fragment
	// Malformed counts records that could not be decoded.
	Malformed uint64
}

// ErrClosed is returned by a reader's Read after Close.
var ErrClosed = errors.New("reader closed")

// incompleteAfter: a sample whose continuation has not come within this
// time is delivered as it is.
const incompleteAfter = time.Second

// NewSampleReader maps the sample rings. One reader at a time: the rings'
// tails are its.
func (d *Datapath) NewSampleReader() (*SampleReader, error) {
	if !d.sampleReaderOpen.CompareAndSwap(false, true) {
		return nil, errors.New("a sample reader is already open on this data path")
	}
	rings, err := mapRings(d.objs.SampleSlots, d.objs.SampleRings, d.opts.SampleSlotsPerCPU)
	if err != nil {
		d.sampleReaderOpen.Store(false)
		return nil, fmt.Errorf("sample rings: %w", err)
	}
	return &SampleReader{polledReader: newPolledReader[Sample](rings, &d.sampleReaderOpen), d: d, st: newStitcher(d.opts.SampleBytes)}, nil
}

// Read blocks until a sample is complete (or given up on) and returns it.
func (r *SampleReader) Read() (Sample, error) { return r.next(r.poll) }

// poll reads every CPU's published fragments, hands their slots back to
// the data path, and stitches.
func (r *SampleReader) poll(final bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.mapped() {
		return ErrClosed
	}
	r.fresh = r.fresh[:0]
	now := MonotonicNow()
	r.drain(func(slot []byte) {
		f, err := decodeFragment(slot)
		if err != nil {
			r.Malformed++
			return
		}
		// Copy: the slot is the data path's again once tail moves.
		f.data = append([]byte(nil), f.data...)
		f.time = now
		r.fresh = append(r.fresh, f)
	})
	r.ready = append(r.ready, r.st.take(r.fresh, now, final)...)
	return nil
}
