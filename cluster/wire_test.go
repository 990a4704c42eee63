package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
)

// sameReport compares two reports field by field, floats by their bits, so
// that a NaN equals itself and −0 differs from +0: the wire must carry both
// exactly. An empty and a nil entity list are the same report.
func sameReport(a, b *Report) error {
	if a.Cluster != b.Cluster || a.Broker != b.Broker || a.Epoch != b.Epoch || a.Instance != b.Instance ||
		a.Boot != b.Boot || a.SentAt != b.SentAt || a.Seq != b.Seq || a.Round != b.Round ||
		a.Processed != b.Processed || a.Ack != b.Ack || len(a.Entities) != len(b.Entities) || version(a) != version(b) ||
		a.Digest != b.Digest || a.Members != b.Members || a.Echo != b.Echo || a.EchoSent != b.EchoSent {
		ha, hb := *a, *b
		ha.Entities, hb.Entities = nil, nil
		return fmt.Errorf("header %+v (%d entities) != %+v (%d entities)", ha, len(a.Entities), hb, len(b.Entities))
	}
	for i := range a.Entities {
		x, y := &a.Entities[i], &b.Entities[i]
		if x.Entity != y.Entity || math.Float64bits(x.Usage) != math.Float64bits(y.Usage) || x.HeldBack != y.HeldBack ||
			math.Float64bits(x.Applied) != math.Float64bits(y.Applied) || x.Led != y.Led ||
			math.Float64bits(x.Limit) != math.Float64bits(y.Limit) || math.Float64bits(x.Reservation) != math.Float64bits(y.Reservation) {
			return fmt.Errorf("entities[%d]: %+v != %+v", i, *x, *y)
		}
	}
	return nil
}

// randomFloat draws the values a report may carry, the odd ones often: NaN
// with payload bits, infinities, signed zeros, subnormals, any bit pattern.
func randomFloat(rng *rand.Rand) float64 {
	switch rng.IntN(8) {
	case 0:
		return math.Float64frombits(0x7ff0_0000_0000_0001 | rng.Uint64()&0x000f_ffff_ffff_ffff | rng.Uint64()&(1<<63)) // NaN, any payload and sign
	case 1:
		return math.Inf(1 - 2*rng.IntN(2))
	case 2:
		return math.Copysign(0, float64(1-2*rng.IntN(2)))
	case 3:
		return math.Float64frombits(rng.Uint64() & 0x000f_ffff_ffff_ffff) // subnormal
	case 4:
		return math.Float64frombits(rng.Uint64())
	default:
		return rng.Float64() * 1e9
	}
}

// randomInt draws uint64s across every varint length.
func randomInt(rng *rand.Rand) uint64 {
	return rng.Uint64() >> rng.IntN(65)
}

func randomBytes(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32()) // any bytes, valid UTF-8 or not
	}
	return string(b)
}

func randomReport(rng *rand.Rand, maxEntities int) *Report {
	r := &Report{
		Cluster:   randomBytes(rng, rng.IntN(MaxWireClusterName+1)),
		Broker:    BrokerID(int32(rng.Uint32())),
		Epoch:     randomInt(rng),
		Instance:  rng.Uint64(),
		Boot:      rng.Uint64(),
		SentAt:    time.Duration(int64(randomInt(rng))),
		Seq:       randomInt(rng),
		Round:     randomInt(rng),
		Processed: randomInt(rng),
		Ack:       rng.IntN(2) == 1,
		Version:   uint8(rng.IntN(WireVersion + 1)), // 0: the newest
	}
	if r.Version == 0 || r.Version >= 3 {
		r.Digest, r.Members, r.Echo, r.EchoSent = rng.Uint64(), uint32(randomInt(rng)), randomInt(rng), time.Duration(int64(randomInt(rng)))
	}
	if n := rng.IntN(maxEntities + 1); n > 0 {
		r.Entities = make([]EntityReport, n)
		for i := range r.Entities {
			r.Entities[i] = EntityReport{
				Entity:   randomBytes(rng, rng.IntN(MaxWireEntityID+1)),
				Usage:    randomFloat(rng),
				HeldBack: rng.IntN(2) == 1,
				Applied:  randomFloat(rng),
				Led:      uint32(randomInt(rng)),
			}
			if r.Version != 1 {
				r.Entities[i].Limit, r.Entities[i].Reservation = randomFloat(rng), randomFloat(rng)
			}
		}
	}
	return r
}

// TestWireRoundTrip: any report within the limits decodes to itself, bit
// for bit, and its encoding is the only one: re-encoding gives the same
// bytes.
func TestWireRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 1))
	for i := range 3000 {
		r := randomReport(rng, 40)
		if i%3 == 0 {
			r.Broker = -r.Broker // negative ids too: BrokerID is an int32
			r.SentAt = -r.SentAt // a monotonic reading before the clock's origin
		}
		b, err := MarshalReport(r)
		if err != nil {
			t.Fatalf("case %d: marshal: %v", i, err)
		}
		got, err := UnmarshalReport(b)
		if err != nil {
			t.Fatalf("case %d: unmarshal: %v", i, err)
		}
		if err := sameReport(r, got); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		again, err := MarshalReport(got)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("case %d: re-encoding differs (%v)", i, err)
		}
	}
}

func TestWireExtremes(t *testing.T) {
	r := &Report{
		Cluster: strings.Repeat("c", MaxWireClusterName), Broker: math.MinInt32,
		Epoch: math.MaxUint64, Instance: math.MaxUint64, Boot: math.MaxUint64, SentAt: math.MinInt64,
		Seq: math.MaxUint64, Round: math.MaxUint64, Processed: math.MaxUint64, Ack: true,
		Entities: []EntityReport{
			{Entity: strings.Repeat("e", MaxWireEntityID), Usage: math.NaN(), Applied: math.Inf(1), Led: math.MaxUint32, HeldBack: true},
			{Entity: "", Usage: math.Copysign(0, -1), Applied: math.SmallestNonzeroFloat64},
		},
	}
	for _, r := range []*Report{r, {Broker: math.MaxInt32, SentAt: math.MaxInt64}, {}} {
		b, err := MarshalReport(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := UnmarshalReport(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameReport(r, got); err != nil {
			t.Error(err)
		}
	}
}

// The largest report the limits allow by count decodes; one with more bytes
// than MaxWireReport does not encode.
func TestWireMarshalLimits(t *testing.T) {
	many := func(n, idLen int) *Report {
		r := &Report{Cluster: "prod", Entities: make([]EntityReport, n)}
		for i := range r.Entities {
			r.Entities[i].Entity = strings.Repeat("x", idLen)
		}
		return r
	}
	full := many(MaxWireEntities, 200) // ~910 KB
	b, err := MarshalReport(full)
	if err != nil {
		t.Fatalf("4096 entities with 200-byte ids: %v", err)
	}
	if _, err := UnmarshalReport(b); err != nil {
		t.Fatalf("4096 entities with 200-byte ids: %v", err)
	}
	for _, c := range []struct {
		name string
		r    *Report
		want string
	}{
		{"nil", nil, "nil"},
		{"cluster name", &Report{Cluster: strings.Repeat("c", MaxWireClusterName+1)}, "cluster name of 256 bytes"},
		{"entity id", &Report{Entities: []EntityReport{{Entity: "a"}, {Entity: strings.Repeat("e", MaxWireEntityID+1)}}}, "entities[1].id of 256 bytes"},
		{"entity count", many(MaxWireEntities+1, 0), "4097 entities"},
		{"total size", many(MaxWireEntities, MaxWireEntityID), "bytes (at most 1048576)"},
	} {
		_, err := MarshalReport(c.r)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// wireBuilder writes a version-1 report field by field, so that a test can
// put one bad value where a field belongs.
type wireBuilder []byte

func header() wireBuilder { return wireBuilder(wireMagic + "\x01") }

func (w wireBuilder) uv(v uint64) wireBuilder { return binary.AppendUvarint(w, v) }
func (w wireBuilder) sv(v int64) wireBuilder  { return binary.AppendVarint(w, v) }
func (w wireBuilder) raw(b ...byte) wireBuilder {
	return append(w, b...)
}
func (w wireBuilder) str(s string) wireBuilder { return append(w.uv(uint64(len(s))), s...) }
func (w wireBuilder) f64(v float64) wireBuilder {
	return binary.LittleEndian.AppendUint64(w, math.Float64bits(v))
}

// v2 marks a builder's report as version 2 (its header is version 1's).
func v2(w wireBuilder) []byte {
	b := bytes.Clone(w)
	b[len(wireMagic)] = 2
	return b
}

// upTo writes a valid header up to (not including) the named field.
func upTo(field string) wireBuilder {
	w := header()
	steps := []struct {
		name  string
		write func(wireBuilder) wireBuilder
	}{
		{"cluster", func(w wireBuilder) wireBuilder { return w.str("prod") }},
		{"broker", func(w wireBuilder) wireBuilder { return w.sv(3) }},
		{"epoch", func(w wireBuilder) wireBuilder { return w.uv(2) }},
		{"instance", func(w wireBuilder) wireBuilder { return w.uv(77) }},
		{"boot", func(w wireBuilder) wireBuilder { return w.uv(5) }},
		{"sent_at", func(w wireBuilder) wireBuilder { return w.sv(int64(time.Hour)) }},
		{"seq", func(w wireBuilder) wireBuilder { return w.uv(9) }},
		{"round", func(w wireBuilder) wireBuilder { return w.uv(10) }},
		{"processed", func(w wireBuilder) wireBuilder { return w.uv(9) }},
		{"ack", func(w wireBuilder) wireBuilder { return w.raw(0) }},
		{"entities", nil},
	}
	for _, s := range steps {
		if s.name == field {
			return w
		}
		w = s.write(w)
	}
	panic("no field " + field)
}

// entity writes one valid entity up to (not including) the named field;
// "" writes all of it.
func (w wireBuilder) entity(field string) wireBuilder {
	steps := []struct {
		name  string
		write func(wireBuilder) wireBuilder
	}{
		{"id", func(w wireBuilder) wireBuilder { return w.str("orders") }},
		{"usage", func(w wireBuilder) wireBuilder { return w.f64(1e6) }},
		{"held_back", func(w wireBuilder) wireBuilder { return w.raw(1) }},
		{"applied", func(w wireBuilder) wireBuilder { return w.f64(2e6) }},
		{"led", func(w wireBuilder) wireBuilder { return w.uv(4) }},
	}
	for _, s := range steps {
		if s.name == field {
			return w
		}
		w = s.write(w)
	}
	return w
}

// TestWireMalformed: each kind of bad input is refused with an error that
// wraps ErrUndecodable and names the field.
func TestWireMalformed(t *testing.T) {
	good := upTo("entities").uv(2).entity("").entity("")
	if _, err := UnmarshalReport(good); err != nil {
		t.Fatalf("the builder's own report: %v", err)
	}
	overflow := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f} // 70 bits
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "magic: not a sluice report"},
		{"another format", []byte(`{"broker":1}`), "magic: not a sluice report"},
		{"magic cut short", []byte("SLC"), "magic"},
		{"no version", []byte(wireMagic), "version: truncated"},
		{"unknown version", []byte(wireMagic + "\x04rest"), "version: format version 4 (this build reads versions 1 to 3)"},
		{"version 0", []byte(wireMagic + "\x00"), "format version 0"},
		{"cluster missing", header(), "cluster: truncated varint"},
		{"cluster too long", header().str(strings.Repeat("c", 256)), "cluster: length 256 (at most 255)"},
		{"cluster cut short", header().uv(10).raw('a', 'b'), "cluster: truncated: needs 10 bytes"},
		{"cluster length overflows", header().raw(overflow...), "cluster: varint at offset 5 overflows 64 bits"},
		{"broker beyond int32", upTo("broker").sv(math.MaxInt32 + 1), "broker: 2147483648 is not an int32"},
		{"broker below int32", upTo("broker").sv(math.MinInt32 - 1), "broker: -2147483649 is not an int32"},
		{"epoch truncated", upTo("epoch").raw(0x80), "epoch: truncated varint"},
		{"epoch overflows", upTo("epoch").raw(overflow...), "epoch: varint at offset 11 overflows 64 bits"},
		{"instance not minimal", upTo("instance").raw(0x81, 0x00), "instance: varint at offset 12 is not minimal"},
		{"boot missing", upTo("boot"), "boot: truncated"},
		{"sent_at not minimal", upTo("sent_at").raw(0x80, 0x80, 0x00), "sent_at: varint at offset 14 is not minimal"},
		{"seq missing", upTo("seq"), "seq: truncated"},
		{"round missing", upTo("round"), "round: truncated"},
		{"processed missing", upTo("processed"), "processed: truncated"},
		{"ack missing", upTo("ack"), "ack: truncated"},
		{"ack not a bool", upTo("ack").raw(2), "ack: bool byte 2"},
		{"count missing", upTo("entities"), "entities: truncated varint"},
		{"count over the limit", upTo("entities").uv(MaxWireEntities + 1), "entities: count 4097 (at most 4096)"},
		{"count over the bytes", upTo("entities").uv(1000).entity(""), "entities: count 1000 needs at least 19000 bytes"},
		{"count huge", upTo("entities").uv(math.MaxUint64), "entities: count 18446744073709551615 (at most 4096)"},
		{"id too long", upTo("entities").uv(1).str(strings.Repeat("e", 256)).raw(make([]byte, 18)...), "entities[0].id: length 256 (at most 255)"},
		{"id cut short", upTo("entities").uv(1).uv(200).raw(make([]byte, 30)...), "entities[0].id: truncated: needs 200 bytes"},
		{"usage cut short", upTo("entities").uv(2).str(strings.Repeat("a", 20)).f64(0).raw(0).f64(0).uv(0).str("b").raw(1, 2, 3), "entities[1].usage: truncated: needs 8 bytes"},
		{"held_back not a bool", upTo("entities").uv(1).entity("held_back").raw(7).f64(0).uv(0), "entities[0].held_back: bool byte 7"},
		{"applied cut short", upTo("entities").uv(1).entity("applied").raw(0, 0, 0), "entities[0].applied: truncated: needs 8 bytes"},
		{"led beyond uint32", upTo("entities").uv(1).entity("led").uv(math.MaxUint32 + 1), "entities[0].led: 4294967296 is not a uint32"},
		{"led missing", upTo("entities").uv(1).entity("led"), "entities[0].led: truncated varint"},
		{"trailing byte", append(bytes.Clone(good), 0), "trailing: 1 bytes after the last entity"},
		{"version 2 without the budget", v2(upTo("entities").uv(1).entity("")), "entities: count 1 needs at least 35 bytes"},
		{"version 2 reservation missing", v2(upTo("entities").uv(2).entity("").f64(1e6).f64(0).entity("").f64(1e6)), "entities[1].reservation: truncated: needs 8 bytes"},
		{"over 1 MiB", append([]byte(wireMagic+"\x01"), make([]byte, MaxWireReport)...), "1048581 bytes (at most 1048576)"},
	} {
		r, err := UnmarshalReport(c.b)
		if err == nil {
			t.Errorf("%s: decoded %+v, want an error", c.name, r)
			continue
		}
		if !errors.Is(err, ErrUndecodable) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %q, want ErrUndecodable with %q", c.name, err, c.want)
		}
		if r != nil {
			t.Errorf("%s: a report came back with the error", c.name)
		}
	}
}

// TestWireDecodeAllocationBound: decoding allocates at most a small multiple
// of the input, also for the densest input (many entities with empty ids,
// where the decoded struct is largest relative to its bytes).
func TestWireDecodeAllocationBound(t *testing.T) {
	dense := upTo("entities").uv(MaxWireEntities)
	for range MaxWireEntities {
		dense = dense.str("").f64(0).raw(0).f64(0).uv(0)
	}
	long := randomReport(rand.New(rand.NewPCG(1, 2)), 300)
	longBytes, err := MarshalReport(long)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{dense, longBytes} {
		var before, after runtime.MemStats
		const runs = 20
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range runs {
			if _, err := UnmarshalReport(b); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		perRun := float64(after.TotalAlloc-before.TotalAlloc) / runs
		t.Logf("%d bytes in: %.0f bytes allocated per decode (%.2f×)", len(b), perRun, perRun/float64(len(b)))
		if perRun > 3*float64(len(b))+4096 {
			t.Errorf("%d bytes in: %.0f bytes allocated per decode, want at most 3× the input", len(b), perRun)
		}
	}
}

// wireSeeds are real encodings: the fuzzer's starting points and, with
// their truncations, its seed corpus.
func wireSeeds() [][]byte {
	rng := rand.New(rand.NewPCG(7, 7))
	var seeds [][]byte
	reports := []*Report{
		{},
		{Cluster: "prod", Broker: 1, Epoch: 1, Instance: 42, Boot: 9, SentAt: 1500 * time.Millisecond, Seq: 1, Round: 1,
			Entities: []EntityReport{{Entity: "orders", Usage: 1e6, Applied: 3e7, Led: 16}, {Entity: "audit", HeldBack: true, Usage: math.NaN(), Applied: math.Inf(1)}}},
		randomReport(rng, 3),
		randomReport(rng, 8),
	}
	for _, r := range reports {
		b, err := MarshalReport(r)
		if err != nil {
			panic(err)
		}
		seeds = append(seeds, b)
	}
	return seeds
}

// FuzzUnmarshalReport: no input panics the decoder, and whatever decodes
// encodes back to the same bytes and decodes to the same report.
func FuzzUnmarshalReport(f *testing.F) {
	for i, b := range wireSeeds() {
		f.Add(b)
		if i == 1 { // the realistic one: every truncation of it
			for n := range len(b) {
				f.Add(b[:n])
			}
		}
	}
	f.Add([]byte("SLCB\x02"))
	f.Add([]byte("not a report"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := UnmarshalReport(b)
		if err != nil {
			if r != nil || !errors.Is(err, ErrUndecodable) {
				t.Fatalf("error %v with report %v: want ErrUndecodable and no report", err, r)
			}
			return
		}
		again, err := MarshalReport(r)
		if err != nil {
			t.Fatalf("a decoded report does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", b, again)
		}
		r2, err := UnmarshalReport(again)
		if err != nil {
			t.Fatalf("re-encoded report does not decode: %v", err)
		}
		if err := sameReport(r, r2); err != nil {
			t.Fatal(err)
		}
	})
}

// BenchmarkWire100Entities encodes and decodes a report with 100 entities,
// the size docs/cluster-budgets.md plans for (~4 KB).
func BenchmarkWire100Entities(b *testing.B) {
	r := &Report{Cluster: "prod", Broker: 3, Epoch: 2, Instance: 1 << 60, Boot: 1 << 40, SentAt: time.Hour, Seq: 3600, Round: 3600, Processed: 3599,
		Entities: make([]EntityReport, 100)}
	for e := range r.Entities {
		r.Entities[e] = EntityReport{Entity: fmt.Sprintf("tenant-%03d", e), Usage: float64(e) * 1e5, Applied: 3e7, Led: uint32(e % 7), HeldBack: e%5 == 0}
	}
	b.ReportAllocs()
	var size int
	for b.Loop() {
		buf, err := MarshalReport(r)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := UnmarshalReport(buf); err != nil {
			b.Fatal(err)
		}
		size = len(buf)
	}
	b.ReportMetric(float64(size), "bytes/report")
}
