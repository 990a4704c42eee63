package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// The wire format of a Report, the value of one record of the coordination
// topic (version 3; version 1 lacks limit and reservation, versions 1 and 2
// lack digest, members, echo and echo_sent):
//
//	magic      4 bytes "SLCB"
//	version    1 byte  (1 or 2)
//	cluster    uvarint length ≤ 255, bytes
//	broker     varint (zigzag): BrokerID is an int32, carried whole
//	epoch      uvarint
//	instance   uvarint
//	boot       uvarint
//	sent_at    varint, nanoseconds of the sender's monotonic clock
//	seq        uvarint
//	round      uvarint
//	processed  uvarint
//	ack        1 byte, 0 or 1
//	digest     8 bytes, little-endian (version 3)
//	members    uvarint ≤ 2^32−1 (version 3)
//	echo       uvarint (version 3)
//	echo_sent  varint, nanoseconds (version 3)
//	entities   uvarint count ≤ 4096, then per entity:
//	  id        uvarint length ≤ 255, bytes
//	  usage     8 bytes, IEEE 754 bits little-endian
//	  held_back 1 byte, 0 or 1
//	  applied   8 bytes, IEEE 754 bits little-endian
//	  led       uvarint ≤ 2^32−1
//	  limit       8 bytes, IEEE 754 bits little-endian (version 2)
//	  reservation 8 bytes, IEEE 754 bits little-endian (version 2)
//
// The whole value is at most MaxWireReport bytes and nothing follows the
// last entity. Every value has exactly one encoding (varints must be
// minimal, bools 0 or 1, no trailing bytes), so a value that decodes
// re-encodes to the same bytes. Floats travel as their bits: NaN, ±Inf and
// −0 arrive as sent, and the View, not the decoder, judges them.
//
// The magic keeps records that are not reports (another tool writing to the
// topic) from being read as one; the version lets a later format be told
// apart and refused by name rather than misread.
const (
	wireMagic = "SLCB"
	// WireVersion is the newest format this build writes; it reads every
	// version from 1 to it.
	WireVersion = 3

	// MaxWireClusterName is the longest cluster name a report carries.
	MaxWireClusterName = 255
	// MaxWireEntityID is the longest entity id a report carries.
	MaxWireEntityID = 255
	// MaxWireEntities is the most entities one report carries.
	MaxWireEntities = 4096
	// MaxWireReport is the largest encoded report, in bytes: below Kafka's
	// default max.message.bytes with room for the record batch around it.
	MaxWireReport = 1 << 20

	// minWireEntity is the fewest bytes one entity takes (empty id, version
	// 1): a count is checked against it before anything is allocated.
	minWireEntity = 1 + 8 + 1 + 8 + 1
	// wireBudgetBytes: version 2's limit and reservation.
	wireBudgetBytes = 16
)

// ErrUndecodable wraps every error of UnmarshalReport.
var ErrUndecodable = errors.New("undecodable report")

// MarshalReport encodes r for the coordination topic. It fails only for a
// report the format cannot carry: a name, id or count over the limits above,
// or an encoding over MaxWireReport.
func MarshalReport(r *Report) ([]byte, error) {
	if r == nil {
		return nil, errors.New("cannot encode report: nil")
	}
	if len(r.Cluster) > MaxWireClusterName {
		return nil, fmt.Errorf("cannot encode report: cluster name of %d bytes (at most %d)", len(r.Cluster), MaxWireClusterName)
	}
	if len(r.Entities) > MaxWireEntities {
		return nil, fmt.Errorf("cannot encode report: %d entities (at most %d)", len(r.Entities), MaxWireEntities)
	}
	version := r.Version
	if version == 0 {
		version = WireVersion
	}
	if version > WireVersion {
		return nil, fmt.Errorf("cannot encode report: format version %d (this build writes 1 to %d)", version, WireVersion)
	}
	size := len(wireMagic) + 1 + binary.MaxVarintLen16 + len(r.Cluster) + 12*binary.MaxVarintLen64 + 1 + 8
	for i := range r.Entities {
		if n := len(r.Entities[i].Entity); n > MaxWireEntityID {
			return nil, fmt.Errorf("cannot encode report: entities[%d].id of %d bytes (at most %d)", i, n, MaxWireEntityID)
		}
		size += binary.MaxVarintLen16 + len(r.Entities[i].Entity) + 8 + 1 + 8 + binary.MaxVarintLen32 + wireBudgetBytes
	}
	b := make([]byte, 0, size)
	b = append(b, wireMagic...)
	b = append(b, version)
	b = appendString(b, r.Cluster)
	b = binary.AppendVarint(b, int64(r.Broker))
	b = binary.AppendUvarint(b, r.Epoch)
	b = binary.AppendUvarint(b, r.Instance)
	b = binary.AppendUvarint(b, r.Boot)
	b = binary.AppendVarint(b, int64(r.SentAt))
	b = binary.AppendUvarint(b, r.Seq)
	b = binary.AppendUvarint(b, r.Round)
	b = binary.AppendUvarint(b, r.Processed)
	b = appendBool(b, r.Ack)
	if version >= 3 {
		b = binary.LittleEndian.AppendUint64(b, r.Digest)
		b = binary.AppendUvarint(b, uint64(r.Members))
		b = binary.AppendUvarint(b, r.Echo)
		b = binary.AppendVarint(b, int64(r.EchoSent))
	}
	b = binary.AppendUvarint(b, uint64(len(r.Entities)))
	for i := range r.Entities {
		e := &r.Entities[i]
		b = appendString(b, e.Entity)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e.Usage))
		b = appendBool(b, e.HeldBack)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e.Applied))
		b = binary.AppendUvarint(b, uint64(e.Led))
		if version >= 2 {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e.Limit))
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e.Reservation))
		}
	}
	if len(b) > MaxWireReport {
		return nil, fmt.Errorf("cannot encode report: %d bytes (at most %d)", len(b), MaxWireReport)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// UnmarshalReport decodes one record value. Malformed input of any kind
// returns an error that wraps ErrUndecodable and names the field; it never
// panics, and it allocates at most a small multiple of len(b): every length
// and count is checked against the bytes that remain before anything is
// allocated for it.
func UnmarshalReport(b []byte) (*Report, error) {
	if len(b) > MaxWireReport {
		return nil, fmt.Errorf("%w: %d bytes (at most %d)", ErrUndecodable, len(b), MaxWireReport)
	}
	if len(b) < len(wireMagic) || string(b[:len(wireMagic)]) != wireMagic {
		return nil, fmt.Errorf("%w: magic: not a sluice report (want %q first)", ErrUndecodable, wireMagic)
	}
	d := decoder{b: b, off: len(wireMagic), entity: -1}
	version := d.byte("version")
	if d.err == nil && (version < 1 || version > WireVersion) {
		return nil, fmt.Errorf("%w: version: format version %d (this build reads versions 1 to %d)", ErrUndecodable, version, WireVersion)
	}
	r := &Report{Version: version}
	r.Cluster = d.str("cluster", MaxWireClusterName)
	broker := d.varint("broker")
	if d.err == nil && (broker < math.MinInt32 || broker > math.MaxInt32) {
		d.fail("broker", "%d is not an int32", broker)
	}
	r.Broker = BrokerID(broker)
	r.Epoch = d.uvarint("epoch")
	r.Instance = d.uvarint("instance")
	r.Boot = d.uvarint("boot")
	r.SentAt = time.Duration(d.varint("sent_at"))
	r.Seq = d.uvarint("seq")
	r.Round = d.uvarint("round")
	r.Processed = d.uvarint("processed")
	r.Ack = d.bool("ack")
	if version >= 3 {
		r.Digest = d.uint64("digest")
		members := d.uvarint("members")
		if d.err == nil && members > math.MaxUint32 {
			d.fail("members", "%d is not a uint32", members)
		}
		r.Members = uint32(members)
		r.Echo = d.uvarint("echo")
		r.EchoSent = time.Duration(d.varint("echo_sent"))
	}
	n := d.uvarint("entities")
	if d.err == nil {
		perEntity := uint64(minWireEntity)
		if version >= 2 {
			perEntity += wireBudgetBytes
		}
		switch left := uint64(len(d.b) - d.off); {
		case n > MaxWireEntities:
			d.fail("entities", "count %d (at most %d)", n, MaxWireEntities)
		case n > left/perEntity:
			d.fail("entities", "count %d needs at least %d bytes, %d left", n, n*perEntity, left)
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if n > 0 {
		r.Entities = make([]EntityReport, n)
	}
	for i := range r.Entities {
		e := &r.Entities[i]
		d.entity = i
		e.Entity = d.str("id", MaxWireEntityID)
		e.Usage = d.float64("usage")
		e.HeldBack = d.bool("held_back")
		e.Applied = d.float64("applied")
		led := d.uvarint("led")
		if d.err == nil && led > math.MaxUint32 {
			d.fail("led", "%d is not a uint32", led)
		}
		e.Led = uint32(led)
		if version >= 2 {
			e.Limit = d.float64("limit")
			e.Reservation = d.float64("reservation")
		}
		if d.err != nil {
			return nil, d.err
		}
	}
	if d.off != len(d.b) {
		return nil, fmt.Errorf("%w: trailing: %d bytes after the last entity", ErrUndecodable, len(d.b)-d.off)
	}
	return r, nil
}

// decoder reads fields in order; after the first error every read returns
// zero and the error stays the first one, so the caller checks once per
// group of fields.
type decoder struct {
	b   []byte
	off int
	err error
	// entity is the index of the entity being read, -1 in the header:
	// errors name entities[i].field.
	entity int
}

func (d *decoder) fail(name, format string, args ...any) {
	if d.err != nil {
		return
	}
	if d.entity >= 0 {
		name = fmt.Sprintf("entities[%d].%s", d.entity, name)
	}
	d.err = fmt.Errorf("%w: %s: %s", ErrUndecodable, name, fmt.Sprintf(format, args...))
}

func (d *decoder) need(name string, n int) bool {
	if d.err != nil {
		return false
	}
	if left := len(d.b) - d.off; left < n {
		d.fail(name, "truncated: needs %d bytes at offset %d, %d left", n, d.off, left)
		return false
	}
	return true
}

func (d *decoder) byte(name string) byte {
	if !d.need(name, 1) {
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) bool(name string) bool {
	if !d.need(name, 1) {
		return false
	}
	switch v := d.b[d.off]; v {
	case 0, 1:
		d.off++
		return v == 1
	default:
		d.fail(name, "bool byte %d at offset %d (want 0 or 1)", v, d.off)
		return false
	}
}

func (d *decoder) float64(name string) float64 {
	return math.Float64frombits(d.uint64(name))
}

func (d *decoder) uint64(name string) uint64 {
	if !d.need(name, 8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

// uvarint reads a minimal unsigned varint.
func (d *decoder) uvarint(name string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	switch {
	case n == 0:
		d.fail(name, "truncated varint at offset %d", d.off)
		return 0
	case n < 0:
		d.fail(name, "varint at offset %d overflows 64 bits", d.off)
		return 0
	case n > 1 && d.b[d.off+n-1] == 0:
		// A final zero group adds nothing: a longer spelling of a
		// shorter varint, which the encoder never writes.
		d.fail(name, "varint at offset %d is not minimal", d.off)
		return 0
	}
	d.off += n
	return v
}

// varint reads a minimal zigzag varint.
func (d *decoder) varint(name string) int64 {
	u := d.uvarint(name)
	return int64(u>>1) ^ -int64(u&1)
}

// str reads a length-prefixed string of at most max bytes.
func (d *decoder) str(name string, max int) string {
	n := d.uvarint(name)
	if d.err != nil {
		return ""
	}
	if n > uint64(max) {
		d.fail(name, "length %d (at most %d)", n, max)
		return ""
	}
	if !d.need(name, int(n)) {
		return ""
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}
