// Package kafkalog is the cluster protocol's ordered log on Kafka: one
// single-partition topic that every agent publishes its reports to and reads
// every report from, in log order, from the start of the retained log
// (docs/cluster-budgets.md §1 and §7).
//
// Nothing here blocks the caller on Kafka. Open builds a client and starts a
// goroutine that makes sure the topic exists, consumes it and measures how
// far behind the log's end the reader is; Publish hands a record to the
// producer and returns; Drain hands over what has been read.
//
// # Delivery bound
//
// The protocol assumes that a report lands within MaxDelivery of being sent,
// or never (cluster.Config.MaxDelivery). What franz-go (v1.22) does:
//
//   - With the idempotent producer as configured by default,
//     RecordDeliveryTimeout is "only enforced if it is safe to do so without
//     creating invalid sequence numbers" (kgo/config.go): a batch is failed
//     only if it was never sent, or was sent and answered. A batch whose
//     request went unanswered, or was answered REQUEST_TIMED_OUT or
//     NOT_ENOUGH_REPLICAS_AFTER_APPEND, may be in the log, so the client
//     retries it past the timeout (and past RecordRetries) until it lands or
//     fails for certain. A record reported failed has then never landed, but
//     one cut off by the network lands whenever the network heals, long
//     after the timeout. TestUnansweredReportFailsAndNeverLands
//     (test/clusterlog) shows it: without the option below the report is
//     never failed.
//   - The timeout is evaluated only before a request is written and when a
//     response or a connection error comes back; a request that hangs is
//     given up at its read deadline, the produce timeout plus
//     RequestTimeoutOverhead (10 s by default).
//
// So the producer here sets AllowIdempotentProduceCancellation, and gives each
// record a context that ends at MaxDelivery: an unanswered request is then
// abandoned at MaxDelivery (1.0 s in the test above with MaxDelivery 1 s,
// against 2.0 s without the context and a 1 s overhead), its records are
// failed, and the client never writes them again (it bumps the producer
// epoch first). Idempotence still dedupes the client's own retries within
// the window. What no client can prevent: a broker that had already read the
// request may still append it, and the high watermark (hence the record's
// visibility) moves only when the followers have it, so a report counted
// failed may still become readable, late, if a broker or its followers
// stall. A report acknowledged after MaxDelivery is counted in
// Stats.LateAcks, so that a broken bound shows. A report that lands although
// counted failed is read and judged like any other; nothing is re-sent, since
// every report is new (its own sequence number).
package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/cluster"
)

// Options configure a Log.
type Options struct {
	// Topic is the coordination topic, e.g. "__sluice_cluster_budgets":
	// one per Kafka cluster, with exactly one partition.
	Topic string
	// ReplicationFactor is the least the topic must have: -1 means three,
	// or every broker of a smaller cluster; more may be asked, never less
	// (settings.go).
	ReplicationFactor int16
	// Retention is the topic's retention.ms when the Log creates it
	// (default 10 minutes). It must cover the protocol's reclaim window
	// (cluster.Config.ReclaimReports periods and more): a broker's newest
	// report must still be in the log when a restarted agent reads it.
	Retention time.Duration
	// MaxDelivery bounds a report's delivery (cluster.Config.MaxDelivery);
	// at least 1 s, franz-go's smallest record timeout.
	MaxDelivery time.Duration
	// Client carries the connection options: seeds, SASL, TLS, client id.
	// The Log sets its own producer and consumer options after them.
	Client []kgo.Opt
	// SettingsRecheck is how often an accepted topic is examined again
	// (default DefaultSettingsRecheck): its settings can be weakened after
	// it was accepted (kafka-configs --alter, a reassignment to fewer
	// replicas), which loses reports as surely as a topic made so.
	SettingsRecheck time.Duration
	// Now is the host's monotonic clock, the cluster.Agent's time;
	// required.
	Now func() time.Duration
	// Log receives the Log's warnings; nil discards them.
	Log *slog.Logger
}

// DefaultRetention is the topic retention the Log creates the topic with when
// Options.Retention is zero.
const DefaultRetention = 10 * time.Minute

// DefaultSettingsRecheck is how often an accepted topic's partition count
// and settings are examined again when Options.SettingsRecheck is zero: a
// metadata request and a DescribeConfigs a minute.
const DefaultSettingsRecheck = time.Minute

// ErrInvalidOptions wraps every error of Open about its options.
var ErrInvalidOptions = errors.New("invalid kafkalog options")

// Stats are the Log's counters since Open.
type Stats struct {
	// Published counts reports the brokers acknowledged.
	Published uint64
	// PublishFailed counts reports that were not published: the producer's
	// buffer was full, delivery failed or timed out, the report could not
	// be encoded, the topic is unusable or not yet examined, or the Log was
	// closed.
	PublishFailed uint64
	// LateAcks counts reports acknowledged more than MaxDelivery after
	// Publish: the protocol's delivery bound was broken for them.
	LateAcks uint64
	// Delivered counts reports handed to Drain's callback.
	Delivered uint64
	// Undecodable counts records of the topic that are not reports of
	// this format (foreign writers, another version); they are skipped.
	Undecodable uint64
	// TopicErrors counts failed attempts to make sure the topic exists,
	// has one partition and keeps acknowledged reports (settings.go).
	TopicErrors uint64
	// LastError is the latest error of any kind, "" if none.
	LastError string
	// Lag is the number of records known to be in the log and not yet
	// delivered by Drain.
	Lag int64
	// CaughtUp is true when the latest measurement of the log's end has
	// been reached by Drain: everything in the log when it was taken has
	// been delivered.
	CaughtUp bool
}

// Tuning. The poll wait keeps reports prompt (a fetch returns at most this
// long after a record lands); the end of the log is measured often while the
// reader is behind, so that catching up is noticed quickly, and once a second
// otherwise.
const (
	fetchMaxWait      = 150 * time.Millisecond
	checkBehind       = 200 * time.Millisecond
	checkCaughtUp     = time.Second
	requestTimeout    = 5 * time.Second
	topicRetryMin     = 250 * time.Millisecond
	topicRetryMax     = 5 * time.Second
	badTopicRetry     = 10 * time.Second
	closeFlush        = time.Second
	logEvery          = time.Minute
	maxQueued         = 8192 // decoded reports waiting for Drain; the reader pauses beyond
	maxPendingChecks  = 16
	maxBufferedRecs   = 256
	maxBufferedBytes  = 8 << 20
	maxRecordBatch    = cluster.MaxWireReport + 64<<10 // one largest report and its batch header
	topicMaxMsgConfig = maxRecordBatch
)

type topicState uint8

const (
	topicUnknown topicState = iota
	topicOK
	topicBad // ≠ 1 partitions, or settings that lose reports: never consumed, never published to
)

type entry struct {
	r      *cluster.Report
	offset int64
}

// check is one measurement of the log's end: every record in the log at
// local time t0 has an offset below end, and every record below start had
// been deleted by t0 (start was measured before t0).
type check struct {
	t0         time.Duration
	start, end int64
}

// Log is one agent's handle on the coordination topic. Its methods are safe
// for concurrent use and never block on Kafka.
type Log struct {
	opts   Options
	log    *slog.Logger
	client *kgo.Client
	adm    *kadm.Client

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// pubMu orders Publish against Close: a record is never handed to a
	// closed client.
	pubMu  sync.RWMutex
	closed bool
	// inflight counts records whose promise has not run: Close waits for
	// them, so that its caller reads final counters.
	inflight sync.WaitGroup

	closeOnce sync.Once
	drainMu   sync.Mutex    // one Drain at a time, so deliveries stay in log order
	room      chan struct{} // Drain made room in a full queue

	mu          sync.Mutex
	topic       topicState
	queue       []entry
	received    int64 // offset after the last record taken from the partition
	delivered   int64 // received as of the end of the last Drain
	knownStart  int64 // the newest log start measured
	startKnown  bool
	knownEnd    int64 // the highest log end seen (checks and fetches)
	checks      []check
	caughtUpAt  time.Duration
	hasCaughtUp bool
	stats       Stats
	logUndecod  limiter
	logPublish  limiter
	logTopic    limiter
	logFetch    limiter
	suppressed  uint64 // undecodable records not logged since the last line
}

// limiter lets a log line through once per logEvery on the Log's clock.
type limiter struct {
	last time.Duration
	used bool
}

func (l *limiter) allow(now time.Duration) bool {
	if l.used && now-l.last < logEvery {
		return false
	}
	l.last, l.used = now, true
	return true
}

// Open validates opts, builds the client and starts the background work. It
// does not wait for Kafka: an unreachable cluster shows in Stats, not here.
func Open(opts Options) (*Log, error) {
	if err := validate(&opts); err != nil {
		return nil, err
	}
	logger := opts.Log
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	kopts := append([]kgo.Opt(nil), opts.Client...)
	kopts = append(kopts,
		// Producer: every report to partition 0, acknowledged by every
		// in-sync replica, sent at once, and either delivered within
		// MaxDelivery or failed and never re-sent (the package comment).
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordDeliveryTimeout(opts.MaxDelivery),
		kgo.AllowIdempotentProduceCancellation(),
		kgo.ProduceRequestTimeout(opts.MaxDelivery),
		kgo.MaxBufferedRecords(maxBufferedRecs),
		kgo.MaxBufferedBytes(maxBufferedBytes),
		kgo.ProducerBatchMaxBytes(maxRecordBatch),
		// Consumer: partition 0 from the start (added once the topic is
		// known good), prompt fetches, and control records kept so that
		// every offset below the end shows up and the reader can tell
		// it has reached the end.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.KeepControlRecords(),
		// Close must stay bounded; the final KIP-714 telemetry push
		// could hold it for a second more.
		kgo.DisableClientMetrics(),
	)
	client, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("kafkalog: client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Log{
		opts: opts, log: logger, client: client, adm: kadm.NewClient(client),
		ctx: ctx, cancel: cancel, room: make(chan struct{}, 1),
	}
	l.wg.Add(1)
	go l.run()
	return l, nil
}

func validate(o *Options) error {
	bad := func(field, why string, v any) error {
		return fmt.Errorf("%w: %s: %s (got %v)", ErrInvalidOptions, field, why, v)
	}
	if err := validTopic(o.Topic); err != nil {
		return bad("topic", err.Error(), strconv.Quote(o.Topic))
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.SettingsRecheck == 0 {
		o.SettingsRecheck = DefaultSettingsRecheck
	}
	switch {
	case o.SettingsRecheck < time.Second:
		return bad("settings_recheck", "must be at least 1s", o.SettingsRecheck)
	case o.ReplicationFactor == 0 || o.ReplicationFactor < -1:
		return bad("replication_factor", "must be -1 (broker default) or at least 1", o.ReplicationFactor)
	case o.Retention < 0:
		return bad("retention", "must be > 0", o.Retention)
	case o.MaxDelivery < time.Second:
		return bad("max_delivery", "must be at least 1s (the producer's smallest record timeout)", o.MaxDelivery)
	case o.Retention < o.MaxDelivery:
		return bad("retention", "must be at least max_delivery", o.Retention)
	case o.Now == nil:
		return bad("now", "a clock is required", "nil")
	}
	return nil
}

// validTopic applies Kafka's rules for topic names.
func validTopic(t string) error {
	switch {
	case t == "":
		return errors.New("must not be empty")
	case len(t) > 249:
		return errors.New("must be at most 249 characters")
	case t == "." || t == "..":
		return errors.New(`must not be "." or ".."`)
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("character %q is not one of [a-zA-Z0-9._-]", c)
		}
	}
	return nil
}

// Publish hands r to the producer and returns at once. Its outcome shows
// in Stats; the protocol learns that a report landed by reading it back.
func (l *Log) Publish(r *cluster.Report) {
	l.pubMu.RLock()
	defer l.pubMu.RUnlock()
	if l.closed {
		l.publishFailed(errors.New("publish: log closed"))
		return
	}
	l.mu.Lock()
	state := l.topic
	l.mu.Unlock()
	switch state {
	case topicUnknown:
		// Until the topic is known to have one partition a report could
		// land in a topic nobody reads; the next period's report goes.
		l.publishFailed(fmt.Errorf("publish: topic %q not yet examined", l.opts.Topic))
		return
	case topicBad:
		l.publishFailed(fmt.Errorf("publish: topic %q is not usable", l.opts.Topic))
		return
	}
	b, err := cluster.MarshalReport(r)
	if err != nil {
		l.publishFailed(fmt.Errorf("publish: %w", err))
		return
	}
	sent := l.opts.Now()
	// The record's own deadline cancels a produce request that hangs past
	// MaxDelivery instead of waiting for the connection's read deadline.
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.MaxDelivery)
	rec := &kgo.Record{Topic: l.opts.Topic, Partition: 0, Value: b}
	l.inflight.Add(1)
	l.client.TryProduce(ctx, rec, func(_ *kgo.Record, err error) {
		defer l.inflight.Done()
		cancel()
		if err != nil {
			l.publishFailed(fmt.Errorf("publish: %w", err))
			return
		}
		took := l.opts.Now() - sent
		l.mu.Lock()
		defer l.mu.Unlock()
		l.stats.Published++
		if took > l.opts.MaxDelivery {
			l.stats.LateAcks++
			l.stats.LastError = fmt.Sprintf("publish: acknowledged after %v, beyond max delivery %v", took, l.opts.MaxDelivery)
			if l.logPublish.allow(l.opts.Now()) {
				l.log.Warn("cluster report acknowledged after the delivery bound", "topic", l.opts.Topic, "took", took, "max_delivery", l.opts.MaxDelivery)
			}
		}
	})
}

func (l *Log) publishFailed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stats.PublishFailed++
	l.stats.LastError = err.Error()
	if l.logPublish.allow(l.opts.Now()) {
		l.log.Warn("cluster report not published", "topic", l.opts.Topic, "err", err, "failed_total", l.stats.PublishFailed)
	}
}

// Drain delivers, in log order, every report read since the last Drain,
// with its offset. fn runs on the caller's goroutine and must not call
// Drain. It returns the latest local time T (on Options.Now's clock) such
// that every record in the log at T has been delivered by this Drain or an
// earlier one, and ok=false while no such time is known.
func (l *Log) Drain(fn func(r *cluster.Report, offset int64)) (caughtUpAt time.Duration, ok bool) {
	l.drainMu.Lock()
	defer l.drainMu.Unlock()
	l.mu.Lock()
	q, upTo := l.queue, l.received
	l.queue = nil
	l.mu.Unlock()
	if len(q) > 0 {
		select {
		case l.room <- struct{}{}:
		default:
		}
	}
	for _, e := range q {
		fn(e.r, e.offset)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stats.Delivered += uint64(len(q))
	l.delivered = max(l.delivered, upTo)
	l.resolveChecks()
	return l.caughtUpAt, l.hasCaughtUp
}

// resolveChecks finds the newest check that Drain has reached: it dates the
// catch-up, and it and every older check are retired. (An older one may be
// unreached only because records it counted were deleted before they were
// read; they are not in the log at the newer check's time.) Called with mu
// held.
func (l *Log) resolveChecks() {
	n := 0
	for i, c := range l.checks {
		if max(l.delivered, c.start) >= c.end {
			n = i + 1
		}
	}
	if n > 0 {
		l.caughtUpAt, l.hasCaughtUp = l.checks[n-1].t0, true
		l.checks = append(l.checks[:0], l.checks[n:]...)
	}
}

// Stats returns the counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Lag = max(0, l.knownEnd-max(l.delivered, l.knownStart))
	s.CaughtUp = l.hasCaughtUp && len(l.checks) == 0
	return s
}

// Close stops the background work, gives buffered reports up to a second to
// be delivered, and closes the client; reports still buffered then are
// counted failed before it returns. It is idempotent.
func (l *Log) Close() {
	l.closeOnce.Do(func() {
		l.pubMu.Lock()
		l.closed = true
		l.pubMu.Unlock()
		l.cancel()
		l.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), closeFlush)
		if err := l.client.Flush(ctx); err != nil {
			l.log.Warn("cluster reports still unacknowledged at close", "topic", l.opts.Topic, "err", err)
		}
		cancel()
		// Closing fails every record still buffered; their promises run
		// on the client's goroutine, which the wait lets finish.
		l.client.Close()
		l.inflight.Wait()
	})
}

// run makes sure the topic is usable, then reads it and measures its end
// until Close.
func (l *Log) run() {
	defer l.wg.Done()
	if !l.ensureTopic() {
		return
	}
	l.client.AddConsumePartitions(map[string]map[int32]kgo.Offset{l.opts.Topic: {0: kgo.NewOffset().AtStart()}})
	l.wg.Add(1)
	go l.consume()
	next := time.Duration(0) // check at once
	examined, bad := time.Now(), false
	for {
		timer := time.NewTimer(next)
		select {
		case <-l.ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		again := l.opts.SettingsRecheck
		if bad {
			again = badTopicRetry
		}
		if time.Since(examined) >= again {
			bad, examined = l.recheckTopic(bad), time.Now()
		}
		next = checkCaughtUp
		if behind, err := l.measureEnd(); err != nil {
			l.noteError(&l.logFetch, "cluster log end not measured", err)
		} else if behind {
			next = checkBehind
		}
	}
}

// noteError records err as the latest error and logs it, rate-limited.
func (l *Log) noteError(lim *limiter, msg string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stats.LastError = err.Error()
	if lim.allow(l.opts.Now()) {
		l.log.Warn(msg, "topic", l.opts.Topic, "err", err)
	}
}
