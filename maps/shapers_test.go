package maps

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

const actShot = 2 // TC_ACT_SHOT

// runFull passes a segment through a program and returns the verdict, the
// departure time it was stamped with and the packet as it left.
func (h *harness) runFull(dir Direction, s segment) (verdict uint32, tstamp uint64, out []byte) {
	h.t.Helper()
	prog := h.d.IngressProgram()
	if dir == Fetch {
		prog = h.d.EgressProgram()
	}
	frame := s.frame()
	var ctx skbContext
	out = make([]byte, len(frame)+256)
	ret, err := prog.Run(&ebpf.RunOptions{Data: frame, DataOut: out, Context: skbContext{}, ContextOut: &ctx})
	if err != nil {
		h.t.Fatalf("test run: %v", err)
	}
	return ret, ctx.Tstamp, out[:len(frame)]
}

func shaped(t *testing.T, shaper Shaper, horizon, ecn time.Duration, burst uint64) *harness {
	h := newHarness(t, testOptions())
	key := connKey(client4, broker4, 40400)
	if err := h.d.BindConns([]Binding{{Conn: key, Produce: 5, Fetch: 5}, {Conn: connKey(client4, broker4, 40401), Produce: 6, Fetch: 6}}); err != nil {
		t.Fatal(err)
	}
	if err := h.d.SetSettings(Settings{Shaper: shaper, IFBIndex: 42, StaleAfter: 10 * time.Second, SamplesPerSecond: 200,
		Horizon: horizon, ECNThreshold: ecn, PoliceBurst: burst}); err != nil {
		t.Fatal(err)
	}
	if err := h.d.Heartbeat(MonotonicNow()); err != nil {
		t.Fatal(err)
	}
	return h
}

// Departure times are monotone per entity and spaced by length / rate; a
// rate write does not reset the clock; entities have their own clocks.
func TestEDTDepartureTimes(t *testing.T) {
	h := shaped(t, ShaperEDT, time.Second, time.Second, 0)
	const rate = 1_000_000 // bytes/s: 1000 bytes leave every millisecond
	if err := h.d.SetEntityRates(Fetch, []EntityRate{{Entity: 5, BytesPerSecond: rate}, {Entity: 6, BytesPerSecond: rate}}); err != nil {
		t.Fatal(err)
	}
	seg := fromBroker(client4, broker4, 40400, 1, make([]byte, 1000))
	start := uint64(MonotonicNow())
	var stamps []uint64
	for i := 0; i < 20; i++ {
		v, ts, _ := h.runFull(Fetch, seg)
		if v != actUnspec {
			t.Fatalf("segment %d: verdict %d", i, v)
		}
		stamps = append(stamps, ts)
	}
	if stamps[0] < start || stamps[0] > start+uint64(50*time.Millisecond) {
		t.Errorf("first departure %d, want about now (%d)", stamps[0], start)
	}
	for i := 1; i < len(stamps); i++ {
		gap := int64(stamps[i] - stamps[i-1])
		if gap != int64(time.Millisecond) {
			t.Fatalf("departures %d and %d are %v apart, want exactly 1ms (1000 bytes at 1 MB/s)", i-1, i, time.Duration(gap))
		}
	}
	// Writing the (same or another) rate does not reset the clock.
	h.d.SetEntityRates(Fetch, []EntityRate{{Entity: 5, BytesPerSecond: 2 * rate}})
	_, ts, _ := h.runFull(Fetch, seg)
	if ts != stamps[len(stamps)-1]+uint64(time.Millisecond) {
		t.Errorf("after a rate write the next departure is %d, want %d (the clock continues)", ts, stamps[len(stamps)-1]+uint64(time.Millisecond))
	}
	_, ts2, _ := h.runFull(Fetch, seg)
	if ts2-ts != uint64(500*time.Microsecond) {
		t.Errorf("at the new rate departures are %v apart, want 500µs", time.Duration(ts2-ts))
	}
	// Another entity has its own clock: it departs now, during its own
	// run, not behind entity 5's queue. (Judged against the clock read
	// around the run: a busy host can take more than a millisecond over
	// the runs above, so "before entity 5's second departure" was a race.)
	before := uint64(MonotonicNow())
	_, other, _ := h.runFull(Fetch, fromBroker(client4, broker4, 40401, 1, make([]byte, 1000)))
	after := uint64(MonotonicNow())
	if other < before || other > after {
		t.Errorf("entity 6 departs at %d, want now (between %d and %d; entity 5's queue ends at %d)", other, before, after, ts2)
	}
	if c := h.counters(Fetch, 5); c.HeldPackets < 20 {
		t.Errorf("delayed segments not counted as held back: %+v", c)
	}
	// Ingress segments are stamped and redirected to the IFB.
	h.d.SetEntityRates(Produce, []EntityRate{{Entity: 5, BytesPerSecond: rate}})
	if v, ts, _ := h.runFull(Produce, toBroker(client4, broker4, 40400, 1, flagACK, make([]byte, 100))); v != actRedirect || ts == 0 {
		t.Errorf("ingress: verdict %d tstamp %d, want a stamped redirect", v, ts)
	}
}

// Each segment adds a second to the entity's clock, so that the real time
// between runs (milliseconds on a busy host, which the virtual clock
// subtracts from every wait) cannot move a segment across a threshold.
func TestEDTHorizonDropAndECNMark(t *testing.T) {
	h := shaped(t, ShaperEDT, 5*time.Second, 2*time.Second, 0)
	h.d.SetEntityRates(Fetch, []EntityRate{{Entity: 5, BytesPerSecond: 1000}})
	seg := fromBroker(client4, broker4, 40400, 1, make([]byte, 1000))
	seg.tos = 0x02 // ECT(0)
	var marked, dropped int
	for i := 0; i < 10; i++ {
		v, _, out := h.runFull(Fetch, seg)
		ecn := out[14+1] & 3
		switch {
		case v == actShot:
			dropped++
		case ecn == 3:
			marked++
			if i < 3 {
				t.Errorf("segment %d waits %d s: marked CE below the 2 s threshold", i, i)
			}
		case i > 2:
			t.Errorf("segment %d waits %d s: not marked above the 2 s threshold (ECN %b)", i, i, ecn)
		}
	}
	// Waits 0..5 s pass (3..5 marked); from 6 s on, beyond the 5 s horizon, drops.
	if marked != 3 || dropped != 4 {
		t.Errorf("marked %d dropped %d, want 3 and 4", marked, dropped)
	}
	if c := h.counters(Fetch, 5); c.HeldPackets != 9 || c.HeldBytes != 9000 {
		t.Errorf("held back %+v, want 5 delayed + 4 dropped segments", c)
	}
}

func TestPoliceDropsBeyondTheBucket(t *testing.T) {
	h := shaped(t, ShaperPolice, 0, 0, 5000)
	h.d.SetEntityRates(Produce, []EntityRate{{Entity: 5, BytesPerSecond: 1000}})
	seg := toBroker(client4, broker4, 40400, 1, flagACK, make([]byte, 1000))
	passed, dropped := h.policeRuns(seg, 10)
	// The bucket starts empty and refills at most 1 s × 1000 B/s, capped at
	// the burst: one segment's worth passes, the rest are dropped.
	if passed != 1 || dropped != 9 {
		t.Errorf("passed %d dropped %d, want 1 and 9", passed, dropped)
	}
	if c := h.counters(Produce, 5); c.HeldPackets != 9 {
		t.Errorf("dropped segments not counted: %+v", c)
	}
	// An entity without a rate is not policed.
	if v, _ := h.run(Produce, toBroker(client4, broker4, 40401, 1, flagACK, make([]byte, 1000))); v != actUnspec {
		t.Errorf("unrated entity: verdict %d", v)
	}
}

// htb+police: fetch segments go to the entity's HTB class and pass as
// under htb; produce segments are never redirected to the IFB (a class
// set for produce is ignored) but policed where they arrive.
func TestHTBPoliceSplitsTheDirections(t *testing.T) {
	h := shaped(t, ShaperHTBPolice, 0, 0, 5000)
	if err := h.d.SetClass(Fetch, 5, 0x00010005); err != nil {
		t.Fatal(err)
	}
	if err := h.d.SetClass(Produce, 5, 0x00010006); err != nil {
		t.Fatal(err)
	}
	if v, p := h.run(Fetch, fromBroker(client4, broker4, 40400, 1, make([]byte, 1000))); v != actUnspec || p != 0x00010005 {
		t.Errorf("fetch: verdict %d priority %#x, want pass in class 0x10005", v, p)
	}
	seg := toBroker(client4, broker4, 40400, 1, flagACK, make([]byte, 1000))
	// No produce rate yet: passes in place, not redirected, not classified.
	if v, p := h.run(Produce, seg); v != actUnspec || p != 0 {
		t.Errorf("produce without a rate: verdict %d priority %#x, want a plain pass", v, p)
	}
	h.d.SetEntityRates(Produce, []EntityRate{{Entity: 5, BytesPerSecond: 1000}})
	passed, dropped := h.policeRuns(seg, 10)
	if passed < 1 || passed > 2 || dropped != 10-passed {
		t.Errorf("produce at 1000 B/s: passed %d dropped %d, want the bucket's one or two segments through and the rest dropped", passed, dropped)
	}
	if c := h.counters(Produce, 5); c.HeldPackets != uint64(dropped) {
		t.Errorf("held produce segments %d, want %d", c.HeldPackets, dropped)
	}
	// A fetch rate in the police table does nothing under htb+police.
	h.d.SetEntityRates(Fetch, []EntityRate{{Entity: 5, BytesPerSecond: 1}})
	for i := 0; i < 3; i++ {
		if v, _ := h.run(Fetch, fromBroker(client4, broker4, 40400, 1, make([]byte, 1000))); v != actUnspec {
			t.Fatalf("fetch under a police rate: verdict %d, want pass (htb's)", v)
		}
	}
}
