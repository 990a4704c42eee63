// Command loadgen is one Kafka client for sluice's end-to-end tests and
// demo: a producer or a consumer written with franz-go, sarama or kafka-go,
// run inside a client network namespace (ip netns exec). It prints a JSON
// line every 100 ms with the payload bytes it has moved so far, and stops
// on SIGTERM or after -duration.
//
//	loadgen -lib franz -mode produce -client-id hot -topic orders -partition 0 -bootstrap 198.18.0.1:9092
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"hash/crc32"
	"log"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

type opts struct {
	lib, mode, clientID, group, topic, bootstrap string
	partition                                    int
	valueBytes                                   int
	rate                                         float64       // bytes/s the client wants; 0 = as fast as it can
	replicaID, localPort                         int           // -lib raw: the Fetch's replica id, the local port (0: any)
	idleAfter, idleFor                           time.Duration // franz produce: go quiet once, keeping the connection
	partitions                                   int           // consume: partitions [partition, partition+partitions); verify: all of the topic's
	fetchMaxBytes                                int           // franz consume: fetch.max.bytes
	maxBytes                                     int64         // produce: stop once this many value bytes were sent (0: no limit)
	check                                        bool          // consume: check every record (see recordCheck)
	connections                                  int           // consume: independent consumers (connections) under the one client-id
	requestTimeout                               time.Duration // franz consume: the whole deadline of a fetch (Java's request.timeout.ms); 0: franz's default
	randomIDs                                    bool          // raw churn: a new client-id per connection
	saslMechanism, saslUser, saslPassword        string        // franz: log in with SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
	tlsCA, sourceAddr                            string        // franz: connect with TLS trusting this CA; from this local address
	latencyOut                                   string        // franz produce: write each Produce request's wait for its response here (latency.go)
	maxInflight                                  int           // franz produce: Produce requests in flight per connection (>1 turns idempotence off)
	batchMaxBytes                                int           // franz produce: a record batch's largest size (0: franz's default)
}

// saslOpts is franz's login for -sasl-mechanism (none when unset), and
// its dialer (dialOpts).
func saslOpts(o opts) ([]kgo.Opt, error) {
	dial, err := dialOpts(o)
	if err != nil {
		return nil, err
	}
	login, err := saslLogin(o)
	return append(login, dial...), err
}

func saslLogin(o opts) ([]kgo.Opt, error) {
	switch o.saslMechanism {
	case "":
		return nil, nil
	case "PLAIN":
		return []kgo.Opt{kgo.SASL(plain.Auth{User: o.saslUser, Pass: o.saslPassword}.AsMechanism())}, nil
	case "SCRAM-SHA-256":
		return []kgo.Opt{kgo.SASL(scram.Auth{User: o.saslUser, Pass: o.saslPassword}.AsSha256Mechanism())}, nil
	case "SCRAM-SHA-512":
		return []kgo.Opt{kgo.SASL(scram.Auth{User: o.saslUser, Pass: o.saslPassword}.AsSha512Mechanism())}, nil
	}
	return nil, fmt.Errorf("-sasl-mechanism %q: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", o.saslMechanism)
}

func main() {
	var o opts
	var duration time.Duration
	flag.StringVar(&o.lib, "lib", "franz", "client library: franz, sarama, kafkago, or raw (kmsg on the wire: a forged replica id, a fixed local port)")
	flag.IntVar(&o.replicaID, "replica-id", -1, "raw: the Fetch's replica id (>= 0 claims to be a follower)")
	flag.IntVar(&o.localPort, "local-port", 0, "raw: the connection's local port (0: any)")
	flag.DurationVar(&o.idleAfter, "idle-after", 0, "franz produce: after this long, send nothing for -idle-for (the connection stays open)")
	flag.DurationVar(&o.idleFor, "idle-for", 0, "franz produce: how long to stay quiet")
	flag.StringVar(&o.mode, "mode", "produce", "produce or consume")
	flag.StringVar(&o.clientID, "client-id", "loadgen", "client-id (consumers: also the group unless -group)")
	flag.StringVar(&o.group, "group", "", "consumer group (default: the client-id)")
	flag.StringVar(&o.topic, "topic", "orders", "topic")
	flag.IntVar(&o.partition, "partition", 0, "partition to produce to / consume from")
	flag.StringVar(&o.bootstrap, "bootstrap", "198.18.0.1:9092", "broker")
	flag.IntVar(&o.valueBytes, "value-bytes", 16<<10, "record value size when producing")
	flag.Float64Var(&o.rate, "rate", 0, "bytes/s to aim for (0: greedy)")
	flag.DurationVar(&duration, "duration", 5*time.Minute, "stop after this long")
	flag.IntVar(&o.partitions, "partitions", 1, "consume: how many partitions from -partition on; verify: partitions of the topic")
	flag.IntVar(&o.fetchMaxBytes, "fetch-max-bytes", 4<<20, "franz consume: fetch.max.bytes (Kafka's default is 50 MiB)")
	flag.DurationVar(&o.requestTimeout, "request-timeout", 0, "franz consume: a fetch's deadline, as Java's request.timeout.ms (0: franz's default)")
	flag.Int64Var(&o.maxBytes, "max-bytes", 0, "franz produce: stop after this many value bytes, flushing them (0: run for -duration)")
	flag.IntVar(&o.connections, "connections", 1, "consume (franz, sarama, kafkago): consumers, each a client on a connection of its own, all with -client-id, each reading from the start")
	flag.BoolVar(&o.check, "check", false, "consume: check offset continuity from the log's start and each value's own CRC-32 (a log that producers wrote, not synthetic batches)")
	flag.StringVar(&o.saslMechanism, "sasl-mechanism", "", "franz: SASL mechanism to log in with (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
	flag.StringVar(&o.saslUser, "sasl-user", "", "franz: SASL user")
	flag.StringVar(&o.saslPassword, "sasl-password", "", "franz: SASL password")
	flag.StringVar(&o.tlsCA, "tls-ca", "", "franz: connect with TLS, trusting the CA certificate(s) in this PEM file")
	flag.StringVar(&o.sourceAddr, "source-addr", "", "franz: connect from this local address")
	flag.BoolVar(&o.randomIDs, "random-ids", false, "raw churn: every connection names a new client-id (-client-id as prefix)")
	flag.IntVar(&o.maxInflight, "max-inflight", 1, "franz produce: Produce requests in flight per connection (more than 1 turns idempotent writes off, as Kafka requires)")
	flag.IntVar(&o.batchMaxBytes, "batch-max-bytes", 0, "franz produce: a record batch's largest size in bytes, as Java's batch.size (0: franz's default, about 1 MB)")
	flag.StringVar(&o.latencyOut, "latency-out", "", "franz produce: write each Produce request's wait for its response (µs, JSON) to this file at the end")
	flag.Parse()
	if o.valueBytes < 12 {
		log.Fatalf("-value-bytes %d: values carry an 8-byte sequence number and a 4-byte CRC-32, so at least 12", o.valueBytes)
	}
	checked.enabled = o.check
	if o.connections < 1 || (o.connections > 1 && (o.mode != "consume" || o.lib == "raw")) {
		log.Fatalf("-connections %d: at least 1, and more only for -mode consume with franz, sarama or kafkago", o.connections)
	}
	partitions := &o.partitions
	if o.group == "" {
		o.group = o.clientID
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()

	if o.mode == "verify" {
		if err := verify(o, *partitions); err != nil {
			log.Fatal(err)
		}
		return
	}
	var moved, errs atomic.Int64
	go report(ctx, &moved, &errs)
	defer func() { // the last figures, so that a stopped client's counts are complete
		enc := json.NewEncoder(os.Stdout)
		enc.Encode(progress(&moved, &errs))
	}()
	var err error
	switch o.lib + "/" + o.mode {
	case "franz/produce":
		err = franzProduce(ctx, o, &moved, &errs)
	case "franz/consume":
		err = readers(ctx, o, franzConsume, &moved, &errs)
	case "sarama/consume":
		err = readers(ctx, o, saramaConsume, &moved, &errs)
	case "raw/consume":
		err = rawFetch(ctx, o, &moved, &errs)
	case "raw/produce":
		err = rawProduce(ctx, o, &moved, &errs)
	case "raw/churn":
		err = rawChurn(ctx, o, &moved, &errs)
	case "raw/dribble":
		err = rawDribble(ctx, o, &moved, &errs)
	case "kafkago/consume":
		err = readers(ctx, o, kafkagoConsume, &moved, &errs)
	case "sarama/produce":
		err = saramaProduce(ctx, o, &moved, &errs)
	case "kafkago/produce":
		err = kafkagoProduce(ctx, o, &moved, &errs)
	default:
		err = fmt.Errorf("unknown -lib/-mode %s/%s", o.lib, o.mode)
	}
	if err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
	if o.mode == "produce" {
		json.NewEncoder(os.Stdout).Encode(map[string]any{"final": true, "count": acked.count.Load(), "checksum": acked.sum.Load()})
	}
}

// acked sums what the broker acknowledged: the count and the sum of the
// values' CRC-32s, for the exactly-once check (loadgen -mode verify).
var acked struct{ count, sum atomic.Uint64 }

func ack(v []byte) {
	acked.count.Add(1)
	acked.sum.Add(uint64(crc32.ChecksumIEEE(v)))
}

// numbered returns a fresh value carrying a sequence number, so that every
// record differs and the checksum sees duplicates and losses, and ending
// in the CRC-32 of the bytes before it, so that a consumer can check each
// record on its own.
func numbered(template []byte, seq uint64) []byte {
	v := append([]byte(nil), template...)
	binary.BigEndian.PutUint64(v, seq)
	body := len(v) - 4
	binary.BigEndian.PutUint32(v[body:], crc32.ChecksumIEEE(v[:body]))
	return v
}

// recordCheck is what a -check consumer verifies of every record it is
// handed: offsets of a partition follow one another from the log's start
// (0: consumers start at the oldest offset of a log kfake keeps from its
// first record), and each value ends in the CRC-32 of its other bytes
// (numbered). A lost, repeated, reordered or damaged record shows up.
type recordCheck struct {
	enabled                bool
	mu                     sync.Mutex
	next                   map[stream]int64 // the offset expected next
	records, gaps, corrupt atomic.Int64
}

var checked = recordCheck{next: map[stream]int64{}}

// stream is one partition as one reader (-connections) reads it.
type stream struct {
	reader    int
	partition int32
}

func (c *recordCheck) see(reader int, partition int32, offset int64, value []byte) {
	if !c.enabled {
		return
	}
	c.records.Add(1)
	c.mu.Lock()
	at := stream{reader, partition}
	if offset != c.next[at] {
		c.gaps.Add(1)
		log.Printf("offset gap on partition %d (reader %d): expected %d, read %d", partition, reader, c.next[at], offset)
	}
	c.next[at] = offset + 1
	c.mu.Unlock()
	body := len(value) - 4
	if body < 8 || binary.BigEndian.Uint32(value[body:]) != crc32.ChecksumIEEE(value[:body]) {
		c.corrupt.Add(1)
		log.Printf("record at %d/%d fails its CRC-32 (%d bytes)", partition, offset, len(value))
	}
}

// verify reads every partition of the topic from the start to its end
// offset and prints, per record key (the producing client-id), the count
// and the sum of the values' CRC-32s.
func verify(o opts, partitions int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	parts := map[int32]kgo.Offset{}
	for p := 0; p < partitions; p++ {
		parts[int32(p)] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.bootstrap), kgo.ClientID("verifier"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{o.topic: parts}), kgo.FetchMaxBytes(16<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, o.topic)
	if err != nil {
		return err
	}
	remaining := map[int32]int64{}
	ends.Each(func(e kadm.ListedOffset) {
		if e.Offset > 0 {
			remaining[e.Partition] = e.Offset
		}
	})
	type tally struct {
		Count    uint64 `json:"count"`
		Checksum uint64 `json:"checksum"`
	}
	out := map[string]*tally{}
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			t := out[string(r.Key)]
			if t == nil {
				t = &tally{}
				out[string(r.Key)] = t
			}
			t.Count++
			t.Checksum += uint64(crc32.ChecksumIEEE(r.Value))
			if end, ok := remaining[r.Partition]; ok && r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"verify": out})
}

// largestResponse is the largest Fetch response a consumer read, in bytes:
// evidence of what a request really carried.
var largestResponse atomic.Int64

// progress is one report line: unix millis, bytes moved, errors, the
// largest Fetch response, and for a checking consumer the records it read,
// the offset discontinuities and the values whose CRC-32 did not match.
func progress(moved, errs *atomic.Int64) map[string]int64 {
	return map[string]int64{"ms": time.Now().UnixMilli(), "bytes": moved.Load(), "errors": errs.Load(), "largest": largestResponse.Load(),
		"records": checked.records.Load(), "gaps": checked.gaps.Load(), "corrupt": checked.corrupt.Load()}
}

// report prints a progress line every 100 ms.
func report(ctx context.Context, moved, errs *atomic.Int64) {
	enc := json.NewEncoder(os.Stdout)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			enc.Encode(progress(moved, errs))
		}
	}
}

// pace sleeps so that moved bytes follow the wanted rate.
func pace(ctx context.Context, start time.Time, moved int64, rate float64) {
	if rate <= 0 {
		return
	}
	ahead := time.Duration(float64(moved)/rate*float64(time.Second)) - time.Since(start)
	if ahead > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(ahead):
		}
	}
}

func value(n int) []byte {
	v := make([]byte, n)
	rand.Read(v) // incompressible: bytes on the wire are the bytes counted
	return v
}

func franzProduce(ctx context.Context, o opts, moved, errs *atomic.Int64) error {
	login, err := saslOpts(o)
	if err != nil {
		return err
	}
	var latencies produceLatencies
	copts := append(login, kgo.SeedBrokers(o.bootstrap), kgo.ClientID(o.clientID), kgo.DefaultProduceTopic(o.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.MaxBufferedRecords(64), kgo.ProducerLinger(0), kgo.WithHooks(&latencies))
	if o.maxInflight > 1 {
		copts = append(copts, kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(o.maxInflight))
	}
	if o.batchMaxBytes > 0 {
		copts = append(copts, kgo.ProducerBatchMaxBytes(int32(o.batchMaxBytes)))
	}
	cl, err := kgo.NewClient(copts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if o.latencyOut != "" {
		defer func() {
			if err := latencies.write(o.latencyOut); err != nil {
				log.Printf("write %s: %v", o.latencyOut, err)
			}
		}()
	}
	template := value(o.valueBytes)
	start := time.Now()
	var sent int64
	// Records are produced with a context that outlives the stop signal, so
	// what is in flight at the stop is flushed and acknowledged, not lost.
	produceCtx := context.Background()
	idled := o.idleFor == 0
	for seq := uint64(0); ctx.Err() == nil && (o.maxBytes == 0 || sent < o.maxBytes); seq++ {
		if !idled && time.Since(start) >= o.idleAfter {
			idled = true
			select {
			case <-ctx.Done():
			case <-time.After(o.idleFor):
			}
			start, sent = time.Now(), 0 // pacing starts again
		}
		pace(ctx, start, sent, o.rate)
		v := numbered(template, seq)
		sent += int64(len(v))
		cl.Produce(produceCtx, &kgo.Record{Key: []byte(o.clientID), Value: v, Partition: int32(o.partition)}, func(r *kgo.Record, err error) {
			if err != nil {
				errs.Add(1)
				return
			}
			ack(r.Value)
			moved.Add(int64(len(r.Value)))
		})
	}
	flushCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cl.Flush(flushCtx)
}

// fetchReads counts Fetch responses that failed to arrive (a read error:
// the request's deadline passed, or the connection died) and notes the
// largest that did. franz-go retries such fetches by itself, so they never
// reach PollFetches: this hook is where a consumer sees its timeouts.
type fetchReads struct {
	ctx  context.Context // once it ends, failed reads are the client closing
	errs *atomic.Int64
}

func (h fetchReads) OnBrokerRead(_ kgo.BrokerMetadata, key int16, bytesRead int, _, _ time.Duration, err error) {
	if key != 1 { // Fetch
		return
	}
	if err != nil {
		if h.ctx.Err() == nil {
			h.errs.Add(1)
			log.Printf("fetch response failed after %d bytes: %v", bytesRead, err)
		}
		return
	}
	for {
		old := largestResponse.Load()
		if int64(bytesRead) <= old || largestResponse.CompareAndSwap(old, int64(bytesRead)) {
			return
		}
	}
}

// consumeFn reads as one consumer (reader) of -connections.
type consumeFn func(ctx context.Context, o opts, reader int, moved, errs *atomic.Int64) error

// readers runs -connections consumers, each a client of its own (its own
// connection) reading the partitions from the start: one client-id, and
// one consumer's wait for each fetch overlapped by another's transfer.
func readers(ctx context.Context, o opts, consume consumeFn, moved, errs *atomic.Int64) error {
	failed := make(chan error, o.connections)
	var wg sync.WaitGroup
	for reader := range o.connections {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := consume(ctx, o, reader, moved, errs); err != nil {
				failed <- err
			}
		}()
	}
	wg.Wait()
	close(failed)
	return <-failed
}

func franzConsume(ctx context.Context, o opts, reader int, moved, errs *atomic.Int64) error {
	parts := map[int32]kgo.Offset{}
	for p := o.partition; p < o.partition+max(o.partitions, 1); p++ {
		parts[int32(p)] = kgo.NewOffset().AtStart()
	}
	opts := []kgo.Opt{kgo.SeedBrokers(o.bootstrap), kgo.ClientID(o.clientID),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{o.topic: parts}),
		// A partition may fill the whole fetch, as sarama's and kafka-go's
		// consumers here do (4 MiB): at franz's default of 1 MiB per
		// partition a one-partition consumer waits a round trip per MiB,
		// and wants less than a 17 MB/s share on a slow host.
		kgo.FetchMaxBytes(int32(o.fetchMaxBytes)), kgo.FetchMaxPartitionBytes(int32(o.fetchMaxBytes)), kgo.WithHooks(fetchReads{ctx, errs})}
	if o.requestTimeout > 0 {
		// As a Java consumer: fetch.max.wait.ms 500 and request.timeout.ms
		// as given. franz-go's read deadline is its overhead plus the wait.
		const wait = 500 * time.Millisecond
		opts = append(opts, kgo.FetchMaxWait(wait), kgo.RequestTimeoutOverhead(o.requestTimeout-wait))
	}
	login, err := saslOpts(o)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, login...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	start := time.Now()
	for ctx.Err() == nil {
		pace(ctx, start, moved.Load(), o.rate)
		fs := cl.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) {
			if ctx.Err() == nil {
				errs.Add(1)
				log.Printf("fetch error %s/%d: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			checked.see(reader, r.Partition, r.Offset, r.Value)
			moved.Add(int64(len(r.Value)))
		})
	}
	return nil
}

// saramaConsume reads one partition with sarama; every consumer error
// (a failed fetch, a partition error) is counted, as franzConsume counts
// its own, and reading goes on.
func saramaConsume(ctx context.Context, o opts, reader int, moved, errs *atomic.Int64) error {
	cfg := sarama.NewConfig()
	cfg.ClientID = o.clientID
	cfg.Version = sarama.V2_8_0_0
	cfg.Consumer.Fetch.Default = 4 << 20
	cfg.Consumer.Return.Errors = true
	c, err := sarama.NewConsumer([]string{o.bootstrap}, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	pc, err := c.ConsumePartition(o.topic, int32(o.partition), sarama.OffsetOldest)
	if err != nil {
		return err
	}
	defer pc.Close()
	start := time.Now()
	for {
		pace(ctx, start, moved.Load(), o.rate)
		select {
		case <-ctx.Done():
			return nil
		case m := <-pc.Messages():
			checked.see(reader, m.Partition, m.Offset, m.Value)
			moved.Add(int64(len(m.Value)))
		case err := <-pc.Errors():
			if ctx.Err() == nil {
				errs.Add(1)
				log.Printf("fetch error: %v", err)
			}
		}
	}
}

// kafkagoConsume reads one partition with kafka-go; a failed read is
// counted and retried after a pause (kafka-go reconnects by itself).
// kafka-go gives a fetch's response MaxWait to start arriving (no allowance
// for the round trip or a busy broker): 500 ms, Java's fetch.max.wait.ms,
// where 100 ms timed out on kfake's stalls with a long log in memory.
func kafkagoConsume(ctx context.Context, o opts, reader int, moved, errs *atomic.Int64) error {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{o.bootstrap}, Topic: o.topic, Partition: o.partition,
		Dialer: &kafka.Dialer{ClientID: o.clientID, Timeout: 10 * time.Second}, MaxBytes: 4 << 20, MinBytes: 1, MaxWait: 500 * time.Millisecond,
		// kafka-go retries a failed fetch by itself (a new connection) and
		// only tells its error logger: count those as the errors they are.
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			if ctx.Err() == nil {
				errs.Add(1)
				log.Printf("kafka-go: "+msg, args...)
			}
		})})
	defer r.Close()
	start := time.Now()
	for ctx.Err() == nil {
		pace(ctx, start, moved.Load(), o.rate)
		m, err := r.ReadMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			errs.Add(1)
			log.Printf("fetch error: %v", err)
			select { // a pause, so a broken connection does not spin
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		checked.see(reader, int32(m.Partition), m.Offset, m.Value)
		moved.Add(int64(len(m.Value)))
	}
	return nil
}

func saramaProduce(ctx context.Context, o opts, moved, errs *atomic.Int64) error {
	cfg := sarama.NewConfig()
	cfg.ClientID = o.clientID
	cfg.Version = sarama.V2_8_0_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer([]string{o.bootstrap}, cfg)
	if err != nil {
		return err
	}
	defer p.Close()
	template := value(o.valueBytes)
	start := time.Now()
	for seq := uint64(0); ctx.Err() == nil; seq++ {
		pace(ctx, start, moved.Load(), o.rate)
		v := numbered(template, seq)
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: o.topic, Partition: int32(o.partition), Key: sarama.StringEncoder(o.clientID), Value: sarama.ByteEncoder(v)}); err != nil {
			errs.Add(1)
			continue
		}
		ack(v)
		moved.Add(int64(len(v)))
	}
	return nil
}

func kafkagoProduce(ctx context.Context, o opts, moved, errs *atomic.Int64) error {
	w := &kafka.Writer{Addr: kafka.TCP(o.bootstrap), Topic: o.topic, RequiredAcks: kafka.RequireOne,
		Balancer:  kafka.BalancerFunc(func(kafka.Message, ...int) int { return o.partition }),
		Transport: &kafka.Transport{ClientID: o.clientID}, BatchTimeout: time.Millisecond, BatchSize: 16}
	defer w.Close()
	template := value(o.valueBytes)
	start := time.Now()
	for seq := uint64(0); ctx.Err() == nil; {
		pace(ctx, start, moved.Load(), o.rate)
		msgs := make([]kafka.Message, 16)
		for i := range msgs {
			msgs[i] = kafka.Message{Key: []byte(o.clientID), Value: numbered(template, seq)}
			seq++
		}
		// A background context: a batch in flight at the stop completes.
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			errs.Add(1)
			continue
		}
		for _, m := range msgs {
			ack(m.Value)
		}
		moved.Add(int64(16 * len(template)))
	}
	return nil
}
