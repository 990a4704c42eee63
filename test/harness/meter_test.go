package harness

import (
	"testing"
	"time"
)

func TestMeterRates(t *testing.T) {
	t0 := time.Unix(100, 0)
	first := MeterReading{at: t0, socks: map[uint16]SocketCounts{1: {Received: 1000}, 2: {Received: 50}},
		owner: map[uint16]int{1: 10, 2: 20}}
	last := MeterReading{at: t0.Add(2 * time.Second),
		socks: map[uint16]SocketCounts{1: {Received: 5000}, 2: {Received: 50}, 3: {Received: 600}},
		owner: map[uint16]int{1: 10, 2: 30, 3: 10}}
	got := MeterRates(0, first, last, []int{10, 20, 30})
	// pid 10: (5000-1000) + 600 (new) over 2 s; pid 20's port moved to pid
	// 30, which counts it from zero.
	want := []float64{2300, 0, 25}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("pid %d: %v, want %v", []int{10, 20, 30}[i], got[i], want[i])
		}
	}
}

// A connection that closes between readings keeps what it moved up to the
// last reading that saw it; one there before the first reading counts from
// it; a new connection on a closed one's port adds to it.
func TestConnTallyKeepsClosedConnections(t *testing.T) {
	reading := func(socks map[uint16]uint64, owner map[uint16]int) MeterReading {
		r := MeterReading{socks: map[uint16]SocketCounts{}, owner: owner}
		for p, v := range socks {
			r.socks[p] = SocketCounts{Acked: v}
		}
		return r
	}
	tally := newConnTally(1)
	tally.add(reading(map[uint16]uint64{1: 1000, 2: 70}, map[uint16]int{1: 10, 2: 20}))
	// Port 1 closes after this reading; pid 10 opens port 3.
	tally.add(reading(map[uint16]uint64{1: 4000, 2: 90}, map[uint16]int{1: 10, 2: 20}))
	tally.add(reading(map[uint16]uint64{3: 500, 2: 100}, map[uint16]int{3: 10, 2: 20}))
	// Port 2 closes; a new connection of pid 20 takes the port again.
	tally.add(reading(map[uint16]uint64{3: 800, 2: 25}, map[uint16]int{3: 10, 2: 20}))
	if got, want := tally.bytes(10), uint64(3000+800); got != want {
		t.Errorf("pid 10: %d bytes, want %d (3000 on the closed port 1, 800 on port 3)", got, want)
	}
	if got, want := tally.bytes(20), uint64(30+25); got != want {
		t.Errorf("pid 20: %d bytes, want %d (30 before the port was reused, 25 after)", got, want)
	}
	if got := tally.bytes(30); got != 0 {
		t.Errorf("pid 30 owns nothing: %d bytes", got)
	}
}

func TestTCPCounter(t *testing.T) {
	snmp := []byte("Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm RtoMin RetransSegs InErrs\nTcp: 1 200 17 0\n")
	if v, err := tcpCounter(snmp, "RetransSegs"); err != nil || v != 17 {
		t.Fatalf("RetransSegs = %d, %v", v, err)
	}
	if _, err := tcpCounter(snmp, "Nope"); err == nil {
		t.Error("a missing field was found")
	}
}

func TestTraceRates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// 1 MB/s, then a 500 ms burst of 4 MB, then 1 MB/s again.
	points := []MeterPoint{{at(0), 0}, {at(500), 500e3}, {at(1000), 1e6}, {at(1500), 5e6}, {at(2000), 5.5e6}, {at(2500), 6e6}}
	if r := TraceRate(points, at(0), at(1000)); r != 1e6 {
		t.Errorf("TraceRate over the first second: %v, want 1e6", r)
	}
	if r := TraceRate(points, at(2600), at(3000)); r != 0 {
		t.Errorf("TraceRate with no points: %v, want 0", r)
	}
	peak, start := PeakRate(points, time.Second, at(0), at(2500))
	if peak != 4.5e6 || !start.Equal(at(500)) && !start.Equal(at(1000)) {
		t.Errorf("PeakRate: %v at %v, want 4.5e6 from 500 or 1000 ms", peak, start.Sub(t0))
	}
}
