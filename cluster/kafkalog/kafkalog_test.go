package kafkalog

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cluster"
)

// The Log's bookkeeping without a client: what Drain delivers and the
// catch-up time it may claim. The Kafka side runs against kfake in
// test/clusterlog.

func offline() *Log {
	return &Log{
		opts: Options{Topic: "t", MaxDelivery: time.Second, Now: func() time.Duration { return time.Hour }},
		log:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		room: make(chan struct{}, 1),
	}
}

func encoded(t *testing.T, seq uint64) []byte {
	t.Helper()
	b, err := cluster.MarshalReport(&cluster.Report{Cluster: "c", Broker: 1, Epoch: 1, Seq: seq, Round: seq})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (l *Log) drainAll() (seqs []uint64, offsets []int64, at time.Duration, ok bool) {
	at, ok = l.Drain(func(r *cluster.Report, offset int64) {
		seqs = append(seqs, r.Seq)
		offsets = append(offsets, offset)
	})
	return
}

// A check is retired only once Drain has delivered every offset below its
// end; the catch-up time is the newest retired check's t0.
func TestCatchUpOnlyAfterDelivery(t *testing.T) {
	l := offline()
	if _, _, _, ok := l.drainAll(); ok {
		t.Fatal("caught up before any measurement")
	}
	l.take(kgo.FetchPartition{Records: []*kgo.Record{
		{Offset: 0, Value: encoded(t, 1)}, {Offset: 1, Value: encoded(t, 2)},
	}})
	l.mu.Lock()
	l.addCheck(check{t0: 10, end: 2}) // both records received, not yet delivered
	l.addCheck(check{t0: 20, end: 3}) // a third record in the log, not yet received
	l.mu.Unlock()
	if s := l.Stats(); s.CaughtUp || s.Lag != 3 {
		t.Errorf("before Drain: %+v, want not caught up, lag 3", s)
	}
	seqs, offsets, at, ok := l.drainAll()
	if len(seqs) != 2 || seqs[0] != 1 || seqs[1] != 2 || offsets[0] != 0 || offsets[1] != 1 {
		t.Fatalf("delivered seqs %v at %v, want 1, 2 at 0, 1", seqs, offsets)
	}
	if !ok || at != 10 {
		t.Fatalf("caught up at %v (%v), want 10: the check at 20 saw a record not delivered", at, ok)
	}
	if s := l.Stats(); s.CaughtUp || s.Lag != 1 || s.Delivered != 2 {
		t.Errorf("after Drain: %+v, want lag 1, not caught up", s)
	}
	// Received but not drained does not count.
	l.take(kgo.FetchPartition{Records: []*kgo.Record{{Offset: 2, Value: encoded(t, 3)}}})
	l.mu.Lock()
	l.resolveChecks()
	pending := len(l.checks)
	l.mu.Unlock()
	if pending != 1 {
		t.Fatalf("%d checks pending after a receive without Drain, want 1", pending)
	}
	seqs, _, at, ok = l.drainAll()
	if len(seqs) != 1 || !ok || at != 20 {
		t.Fatalf("delivered %v, caught up at %v (%v), want seq 3 and 20", seqs, at, ok)
	}
	if s := l.Stats(); !s.CaughtUp || s.Lag != 0 {
		t.Errorf("%+v, want caught up with no lag", s)
	}
	// A later measurement that finds nothing new retires at once and moves
	// the time on; an empty Drain still returns it.
	l.mu.Lock()
	l.addCheck(check{t0: 30, end: 3})
	l.mu.Unlock()
	if _, _, at, ok := l.drainAll(); !ok || at != 30 {
		t.Errorf("caught up at %v (%v), want 30", at, ok)
	}
}

// Records deleted before the reader reached them (below a log start
// measured before t0) are not owed: an empty log whose offsets begin at 100
// is caught up at once, but a start measured at 50 does not excuse 50..99.
func TestCatchUpOverDeletedRecords(t *testing.T) {
	l := offline()
	l.mu.Lock()
	l.addCheck(check{t0: 5, start: 50, end: 100})
	l.mu.Unlock()
	if _, _, _, ok := l.drainAll(); ok {
		t.Fatal("caught up with offsets 50..99 unread")
	}
	l.mu.Lock()
	l.addCheck(check{t0: 6, start: 100, end: 100})
	l.mu.Unlock()
	_, _, at, ok := l.drainAll()
	if !ok || at != 6 {
		t.Fatalf("caught up at %v (%v), want 6", at, ok)
	}
}

// A reader far behind keeps at most maxPendingChecks measurements, the
// oldest ones and the newest, and still reports progress through them.
func TestPendingChecksBounded(t *testing.T) {
	l := offline()
	l.mu.Lock()
	for i := range 3 * maxPendingChecks {
		l.addCheck(check{t0: time.Duration(i + 1), end: int64(i + 1)})
	}
	n, last := len(l.checks), l.checks[len(l.checks)-1]
	l.mu.Unlock()
	if n != maxPendingChecks || last.end != 3*maxPendingChecks {
		t.Fatalf("%d pending, newest ends at %d; want %d, the newest measurement last", n, last.end, maxPendingChecks)
	}
	var recs []*kgo.Record
	for i := range 3 * maxPendingChecks {
		recs = append(recs, &kgo.Record{Offset: int64(i), Value: encoded(t, uint64(i+1))})
	}
	l.take(kgo.FetchPartition{Records: recs[:5]})
	if _, _, at, ok := l.drainAll(); !ok || at != 5 {
		t.Fatalf("caught up at %v (%v), want 5", at, ok)
	}
	l.take(kgo.FetchPartition{Records: recs[5:]})
	if _, _, at, ok := l.drainAll(); !ok || at != 3*maxPendingChecks {
		t.Fatalf("caught up at %v (%v), want %d", at, ok, 3*maxPendingChecks)
	}
}

// Records that are not reports are skipped and counted, and their offsets
// are passed: they do not hold back the catch-up.
func TestUndecodableSkippedAndPassed(t *testing.T) {
	l := offline()
	bad := encoded(t, 2)
	bad[4] = 9 // another format version
	l.take(kgo.FetchPartition{HighWatermark: 4, Records: []*kgo.Record{
		{Offset: 0, Value: encoded(t, 1)}, {Offset: 1, Value: []byte("{}")}, {Offset: 2, Value: bad}, {Offset: 3, Value: encoded(t, 3)},
	}})
	l.mu.Lock()
	l.addCheck(check{t0: 9, end: 4})
	l.mu.Unlock()
	seqs, offsets, at, ok := l.drainAll()
	if len(seqs) != 2 || offsets[0] != 0 || offsets[1] != 3 || !ok || at != 9 {
		t.Fatalf("delivered %v at %v, caught up at %v (%v); want seqs 1 and 3 at 0 and 3, caught up at 9", seqs, offsets, at, ok)
	}
	s := l.Stats()
	if s.Undecodable != 2 || !strings.Contains(s.LastError, "format version 9") {
		t.Errorf("%+v, want 2 undecodable, the last naming its version", s)
	}
}

// A full queue makes the reader wait for Drain; Drain signals the room.
func TestDrainSignalsRoom(t *testing.T) {
	l := offline()
	l.take(kgo.FetchPartition{Records: []*kgo.Record{{Offset: 0, Value: encoded(t, 1)}}})
	l.drainAll()
	select {
	case <-l.room:
	default:
		t.Fatal("a Drain that took reports did not signal room")
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{Topic: "x", ReplicationFactor: 3, MaxDelivery: 5 * time.Second, Now: func() time.Duration { return 0 }}
	if err := validate(&o); err != nil {
		t.Fatal(err)
	}
	if o.Retention != DefaultRetention {
		t.Errorf("retention %v, want the default %v", o.Retention, DefaultRetention)
	}
}
