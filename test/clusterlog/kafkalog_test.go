// Package clusterlog_test runs the cluster protocol's Kafka transport
// (cluster/kafkalog) against kfake, an in-process Kafka.
package clusterlog_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/cluster"
	"github.com/sluice-dev/sluice/cluster/kafkalog"
)

const topic = "__sluice_cluster_budgets"

// clock is one host's monotonic clock, shared by every Log of a test so that
// their times compare.
type clock struct{ origin time.Time }

func newClock() *clock                 { return &clock{origin: time.Now()} }
func (c *clock) Now() time.Duration    { return time.Since(c.origin) }
func quiet() *slog.Logger              { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
func within(d time.Duration) time.Time { return time.Now().Add(d) }

func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func openLog(t *testing.T, seeds []string, clk *clock) *kafkalog.Log {
	t.Helper()
	l, err := kafkalog.Open(kafkalog.Options{
		Topic: topic, ReplicationFactor: -1, MaxDelivery: time.Second,
		Client: []kgo.Opt{kgo.SeedBrokers(seeds...)},
		Now:    clk.Now, Log: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// rawClient is a plain client for the test's own produce and admin calls.
func rawClient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func report(broker cluster.BrokerID, seq uint64) *cluster.Report {
	return &cluster.Report{
		Cluster: "test", Broker: broker, Epoch: 1, Instance: uint64(broker), Seq: seq, Round: seq,
		Entities: []cluster.EntityReport{{Entity: "orders", Usage: float64(seq), Applied: 1e6, Led: 1}},
	}
}

func encode(t *testing.T, r *cluster.Report) []byte {
	t.Helper()
	b, err := cluster.MarshalReport(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, deadline time.Time, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

type delivered struct {
	broker cluster.BrokerID
	seq    uint64
	offset int64
}

// reader drains one Log, keeping everything it was given and the latest
// catch-up time.
type reader struct {
	l     *kafkalog.Log
	got   []delivered
	at    time.Duration
	ok    bool
	calls int
}

func (r *reader) drain() {
	r.at, r.ok = r.l.Drain(func(rep *cluster.Report, offset int64) {
		r.got = append(r.got, delivered{rep.Broker, rep.Seq, offset})
	})
	r.calls++
}

// caughtUpSince drains until the Log is caught up at or after t.
func (r *reader) caughtUpSince(t *testing.T, since time.Duration) {
	t.Helper()
	waitFor(t, within(15*time.Second), "a catch-up", func() bool {
		r.drain()
		return r.ok && r.at >= since
	})
}

func checkLogOrder(t *testing.T, name string, got []delivered) {
	t.Helper()
	for i := range got {
		if got[i].offset != int64(i) {
			t.Fatalf("%s: delivery %d has offset %d: not the log's order without gaps", name, i, got[i].offset)
		}
	}
}

// (a) Three agents publish interleaved reports: each reads all of them in
// the one order of the log, and is caught up, at a time after the last
// report was acknowledged, only once it has delivered every one.
func TestThreeLogsReadOneOrder(t *testing.T) {
	c := newCluster(t)
	clk := newClock()
	logs := make([]*kafkalog.Log, 3)
	readers := make([]*reader, 3)
	for i := range logs {
		logs[i] = openLog(t, c.ListenAddrs(), clk)
		readers[i] = &reader{l: logs[i]}
	}
	for _, r := range readers {
		r.caughtUpSince(t, 0) // the topic is examined: publishing can begin
	}
	const perLog = 10
	for seq := uint64(1); seq <= perLog; seq++ {
		for i, l := range logs {
			l.Publish(report(cluster.BrokerID(i+1), seq))
		}
		for _, r := range readers {
			r.drain() // reading while others publish
		}
	}
	waitFor(t, within(15*time.Second), "every report acknowledged", func() bool {
		for _, l := range logs {
			if l.Stats().Published != perLog {
				return false
			}
		}
		return true
	})
	acked := clk.Now() // every report is in the log at this time
	for i, r := range readers {
		r.caughtUpSince(t, acked)
		if len(r.got) != 3*perLog {
			t.Fatalf("log %d: caught up at %v (after the last ack at %v) with %d of %d reports delivered", i, r.at, acked, len(r.got), 3*perLog)
		}
		checkLogOrder(t, "log "+string(rune('A'+i)), r.got)
	}
	for i := 1; i < 3; i++ {
		for j := range readers[0].got {
			if readers[i].got[j] != readers[0].got[j] {
				t.Fatalf("log %d's delivery %d is %+v, log 0's is %+v", i, j, readers[i].got[j], readers[0].got[j])
			}
		}
	}
	// Each producer keeps its own reports in order.
	next := map[cluster.BrokerID]uint64{}
	for _, d := range readers[0].got {
		if d.seq != next[d.broker]+1 {
			t.Fatalf("broker %d: seq %d after %d", d.broker, d.seq, next[d.broker])
		}
		next[d.broker] = d.seq
	}
	for i, l := range logs {
		s := l.Stats()
		if s.Delivered != 3*perLog || s.PublishFailed != 0 || s.Undecodable != 0 || s.Lag != 0 || !s.CaughtUp {
			t.Errorf("log %d: stats %+v", i, s)
		}
	}
}

// While reports keep landing, a catch-up time never covers a record the
// Log has not delivered: every record acknowledged at or before the time
// Drain returns has been delivered. Fetches are slowed so that the reader
// trails the acknowledgements, as a loaded network would make it.
func TestCaughtUpNeverAheadOfDelivery(t *testing.T) {
	c := newCluster(t)
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { time.Sleep(60 * time.Millisecond) }) // fetch latency, not a readiness wait
		return nil, nil, false
	})
	clk := newClock()
	l := openLog(t, c.ListenAddrs(), clk)
	producer := rawClient(t, c)
	r := &reader{l: l}
	// Make sure the topic exists before the test's producer writes to it.
	r.caughtUpSince(t, 0)

	type ack struct {
		at     time.Duration
		offset int64
	}
	var (
		mu   sync.Mutex
		acks []ack
	)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		for seq := uint64(1); seq <= 60; seq++ {
			b, err := cluster.MarshalReport(report(9, seq))
			if err != nil {
				done <- err
				return
			}
			res := producer.ProduceSync(ctx, &kgo.Record{Value: b})
			rec, err := res.First()
			if err != nil {
				done <- err
				return
			}
			at := clk.Now()
			mu.Lock()
			acks = append(acks, ack{at, rec.Offset})
			mu.Unlock()
		}
		done <- nil
	}()
	checked, finished := 0, false
	for !finished {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		default:
		}
		r.drain()
		if !r.ok {
			continue
		}
		mu.Lock()
		for _, a := range acks {
			if a.at <= r.at && (len(r.got) == 0 || r.got[len(r.got)-1].offset < a.offset) {
				mu.Unlock()
				t.Fatalf("caught up at %v, but the record at offset %d, acknowledged at %v, was not delivered (%d delivered)", r.at, a.offset, a.at, len(r.got))
			}
			checked++
		}
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // the agent's tick, not a readiness wait
	}
	r.caughtUpSince(t, clk.Now())
	if len(r.got) != 60 {
		t.Fatalf("%d of 60 reports delivered", len(r.got))
	}
	checkLogOrder(t, "reader", r.got)
	if checked == 0 {
		t.Fatal("no catch-up time was checked against an acknowledgement")
	}
	t.Logf("%d drains, %d (catch-up, ack) pairs checked", r.calls, checked)
}

// (b) A Log opened after reports exist reads them all, from the start.
func TestLateLogReadsFromTheStart(t *testing.T) {
	c := newCluster(t)
	clk := newClock()
	first := openLog(t, c.ListenAddrs(), clk)
	(&reader{l: first}).caughtUpSince(t, 0)
	for seq := uint64(1); seq <= 20; seq++ {
		first.Publish(report(1, seq))
	}
	waitFor(t, within(15*time.Second), "20 acknowledgements", func() bool { return first.Stats().Published == 20 })
	first.Close()

	opened := clk.Now()
	late := &reader{l: openLog(t, c.ListenAddrs(), clk)}
	late.caughtUpSince(t, opened)
	if len(late.got) != 20 {
		t.Fatalf("%d of 20 reports read", len(late.got))
	}
	checkLogOrder(t, "late log", late.got)
	for i, d := range late.got {
		if d.broker != 1 || d.seq != uint64(i+1) {
			t.Fatalf("delivery %d is %+v, want broker 1 seq %d", i, d, i+1)
		}
	}
}

// (c) Records that are not reports are counted and skipped; the reports
// around them are delivered, and a transaction's marker (an offset with no
// record to deliver) does not keep the Log from catching up.
func TestForeignRecordsSkipped(t *testing.T) {
	c := newCluster(t)
	clk := newClock()
	l := openLog(t, c.ListenAddrs(), clk)
	r := &reader{l: l}
	r.caughtUpSince(t, 0) // the Log has created the topic

	producer := rawClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wrongVersion := encode(t, report(2, 2))
	wrongVersion[4] = 9
	values := [][]byte{
		encode(t, report(2, 1)),
		[]byte("garbage bytes"),
		wrongVersion,
		nil,
	}
	for _, v := range values {
		if err := producer.ProduceSync(ctx, &kgo.Record{Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	txn := rawClient(t, c, kgo.TransactionalID("foreign-writer"))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, &kgo.Record{Value: []byte("transactional garbage")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := producer.ProduceSync(ctx, &kgo.Record{Value: encode(t, report(2, 3))}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	written := clk.Now()
	r.caughtUpSince(t, written)
	if len(r.got) != 2 || r.got[0] != (delivered{2, 1, 0}) || r.got[1].broker != 2 || r.got[1].seq != 3 || r.got[1].offset != 6 {
		t.Fatalf("delivered %+v, want broker 2's seq 1 at offset 0 and seq 3 at offset 6 (after a commit marker at 5)", r.got)
	}
	s := l.Stats()
	if s.Undecodable != 4 || s.Delivered != 2 {
		t.Errorf("stats %+v, want 4 undecodable (garbage, version 9, empty, transactional) and 2 delivered", s)
	}
	if !strings.Contains(s.LastError, "undecodable report") {
		t.Errorf("last error %q, want the decoder's", s.LastError)
	}
}

// (d) A topic with 3 partitions is never consumed nor written: the error
// names the topic and the count, and Publish neither blocks nor writes.
func TestTopicWithThreePartitionsRefused(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(3, topic))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	producer := rawClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for p := range int32(3) {
		if err := producer.ProduceSync(ctx, &kgo.Record{Partition: p, Value: encode(t, report(1, uint64(p+1)))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	clk := newClock()
	l := openLog(t, c.ListenAddrs(), clk)
	waitFor(t, within(15*time.Second), "a topic error", func() bool { return l.Stats().TopicErrors > 0 })
	s := l.Stats()
	if !strings.Contains(s.LastError, `topic "`+topic+`" has 3 partitions, want 1`) {
		t.Errorf("last error %q, want it to name the topic and its 3 partitions", s.LastError)
	}
	began := time.Now()
	for seq := uint64(1); seq <= 5; seq++ {
		l.Publish(report(2, seq))
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("5 publishes took %v", took)
	}
	if s := l.Stats(); s.PublishFailed != 5 {
		t.Errorf("stats %+v, want 5 failed publishes", s)
	}
	r := &reader{l: l}
	r.drain()
	if len(r.got) != 0 || r.ok {
		t.Errorf("drained %+v (caught up %v), want nothing from a topic that is not consumed", r.got, r.ok)
	}
	ends, err := kadm.NewClient(producer).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset != 1 {
			t.Errorf("partition %d ends at %d, want 1: only the test's own record", o.Partition, o.Offset)
		}
	})
}

// (e) With Kafka unreachable, nothing the agent calls blocks, and the
// failures are counted.
func TestUnreachableKafkaNeverBlocks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().String()
	ln.Close()
	clk := newClock()
	began := time.Now()
	l, err := kafkalog.Open(kafkalog.Options{
		Topic: topic, ReplicationFactor: -1, MaxDelivery: time.Second,
		Client: []kgo.Opt{kgo.SeedBrokers(closedPort)}, Now: clk.Now, Log: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if took := time.Since(began); took > time.Second {
		t.Errorf("Open took %v", took)
	}
	r := &reader{l: l}
	waitFor(t, within(20*time.Second), "failed publishes and topic errors", func() bool {
		began := time.Now()
		l.Publish(report(1, uint64(r.calls+1)))
		r.drain()
		s := l.Stats()
		if took := time.Since(began); took > 500*time.Millisecond {
			t.Fatalf("Publish, Drain and Stats took %v", took)
		}
		return s.PublishFailed >= 3 && s.TopicErrors >= 1
	})
	s := l.Stats()
	if s.Published != 0 || r.ok || len(r.got) != 0 || s.LastError == "" {
		t.Errorf("stats %+v, drained %d (caught up %v): want nothing published or read, and an error", s, len(r.got), r.ok)
	}
	began = time.Now()
	l.Close()
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("Close took %v", took)
	}
}

// (e, continued) Kafka lost after the Log has started: reports handed to
// the producer fail within about MaxDelivery, nothing blocks, and Close
// stays bounded with reports still buffered.
func TestKafkaLostAfterStart(t *testing.T) {
	c := newCluster(t)
	clk := newClock()
	l := openLog(t, c.ListenAddrs(), clk)
	r := &reader{l: l}
	r.caughtUpSince(t, 0)
	c.Close()
	began := time.Now()
	for seq := uint64(1); seq <= 3; seq++ {
		l.Publish(report(1, seq))
		r.drain()
		l.Stats()
	}
	if took := time.Since(began); took > 500*time.Millisecond {
		t.Errorf("3 × Publish, Drain and Stats took %v", took)
	}
	waitFor(t, within(15*time.Second), "the 3 reports counted failed", func() bool { return l.Stats().PublishFailed == 3 })
	t.Logf("failed after %v: %q", time.Since(began), l.Stats().LastError)
	l.Publish(report(1, 4)) // still buffered when Close begins
	began = time.Now()
	l.Close()
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("Close took %v", took)
	}
	if s := l.Stats(); s.Published != 0 || s.PublishFailed != 4 {
		t.Errorf("stats %+v, want the 4 reports failed", s)
	}
}

// (f) Close is idempotent, bounded, safe alongside Publish and Drain, and
// leaves no goroutine behind.
func TestCloseIdempotentNoGoroutinesLeft(t *testing.T) {
	c := newCluster(t)
	clk := newClock()
	before := runtime.NumGoroutine()
	l, err := kafkalog.Open(kafkalog.Options{
		Topic: topic, ReplicationFactor: -1, MaxDelivery: time.Second,
		Client: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, Now: clk.Now, Log: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &reader{l: l}
	r.caughtUpSince(t, 0)
	l.Publish(report(1, 1))
	waitFor(t, within(15*time.Second), "the report read back", func() bool { r.drain(); return len(r.got) == 1 })

	// Publishers and a drainer keep going while Close runs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(2); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				l.Publish(report(1, seq))
				l.Drain(func(*cluster.Report, int64) {})
				l.Stats()
			}
		}()
	}
	began := time.Now()
	var closers sync.WaitGroup
	for range 3 {
		closers.Add(1)
		go func() { defer closers.Done(); l.Close() }()
	}
	closers.Wait()
	l.Close()
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("Close took %v", took)
	}
	close(stop)
	wg.Wait()
	failedBefore := l.Stats().PublishFailed
	l.Publish(report(1, 1000))
	if s := l.Stats(); s.PublishFailed != failedBefore+1 || !strings.Contains(s.LastError, "closed") {
		t.Errorf("a publish after Close: stats %+v, want one more failure saying closed", s)
	}
	waitFor(t, within(10*time.Second), "goroutines back to their number before Open", func() bool {
		return runtime.NumGoroutine() <= before
	})
}

// A report whose produce request goes unanswered past MaxDelivery is counted
// failed at about MaxDelivery, and the producer never writes it again: once the broker answers
// again, the next report lands and the failed one is not in the log. (An
// idempotent producer that may not cancel in-flight records would retry the
// first report until it landed, late.)
func TestUnansweredReportFailsAndNeverLands(t *testing.T) {
	c := newCluster(t)
	var blackhole atomic.Bool
	var swallowed atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if blackhole.Load() {
			swallowed.Add(1)
			return nil, nil, true // read, never answered, never appended
		}
		return nil, nil, false
	})
	clk := newClock()
	l := openLog(t, c.ListenAddrs(), clk)
	r := &reader{l: l}
	r.caughtUpSince(t, 0)

	blackhole.Store(true)
	began := time.Now()
	l.Publish(report(1, 1))
	waitFor(t, within(30*time.Second), "the unanswered report counted failed", func() bool { return l.Stats().PublishFailed == 1 })
	took := time.Since(began)
	t.Logf("failed after %v; %d produce requests went unanswered", took, swallowed.Load())
	// The record's deadline cancels the hung request at MaxDelivery (1 s);
	// without it the failure would wait for the connection's read deadline,
	// the produce timeout plus franz-go's 10 s overhead.
	if took > 6*time.Second {
		t.Errorf("the failure was reported after %v, want about MaxDelivery", took)
	}
	if swallowed.Load() == 0 {
		t.Fatal("no produce request reached the broker: the in-flight case was not exercised")
	}
	blackhole.Store(false)
	l.Publish(report(1, 2))
	waitFor(t, within(15*time.Second), "the next report acknowledged", func() bool { return l.Stats().Published == 1 })
	r.caughtUpSince(t, clk.Now())
	// Records of one partition land in order: had the first report been
	// retried, it would be in the log before the second.
	if len(r.got) != 1 || r.got[0].seq != 2 {
		t.Fatalf("the log holds %+v, want only seq 2", r.got)
	}
	if s := l.Stats(); s.LateAcks != 0 || s.PublishFailed != 1 {
		t.Errorf("stats %+v, want one failure and no late acknowledgement", s)
	}
}

// Open refuses bad options by name and starts nothing.
func TestOpenRejectsBadOptions(t *testing.T) {
	clk := newClock()
	good := kafkalog.Options{Topic: topic, ReplicationFactor: -1, MaxDelivery: 5 * time.Second, Now: clk.Now}
	for _, c := range []struct {
		name string
		edit func(*kafkalog.Options)
		want string
	}{
		{"empty topic", func(o *kafkalog.Options) { o.Topic = "" }, "topic: must not be empty"},
		{"topic character", func(o *kafkalog.Options) { o.Topic = "a/b" }, `topic: character '/'`},
		{"topic length", func(o *kafkalog.Options) { o.Topic = strings.Repeat("t", 250) }, "topic: must be at most 249"},
		{"replication 0", func(o *kafkalog.Options) { o.ReplicationFactor = 0 }, "replication_factor"},
		{"negative retention", func(o *kafkalog.Options) { o.Retention = -time.Second }, "retention: must be > 0"},
		{"retention under delivery", func(o *kafkalog.Options) { o.Retention = 2 * time.Second }, "retention: must be at least max_delivery"},
		{"delivery under 1s", func(o *kafkalog.Options) { o.MaxDelivery = 500 * time.Millisecond }, "max_delivery: must be at least 1s"},
		{"no clock", func(o *kafkalog.Options) { o.Now = nil }, "now: a clock is required"},
	} {
		o := good
		c.edit(&o)
		l, err := kafkalog.Open(o)
		if err == nil {
			l.Close()
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !errors.Is(err, kafkalog.ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %q, want ErrInvalidOptions with %q", c.name, err, c.want)
		}
	}
}
