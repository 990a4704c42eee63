package e2e

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
	"github.com/sluice-dev/sluice/test/harness"
)

// The TestKafka scenarios run sluice in front of real Apache Kafka (a
// KRaft broker from the jars `make kafka-deps` fetched) with the Java
// client, driven through the distribution's own tools. `make kafka-check`
// runs them and writes kafka-results.json. As everywhere, the kernel's
// broker-side sockets judge; the tools' own figures go beside them.

var kafkaLibs = flag.String("kafka-libs", "../kafka/lib", "the class path directory of Apache Kafka (make kafka-deps)")

// kafkaClassPath is Apache Kafka's class path directory: -kafka-libs, or
// the repository's (KafkaLibs says how to fill it).
func kafkaClassPath(t *testing.T) string {
	t.Helper()
	root, _ := filepath.Abs("../..")
	libs, err := harness.KafkaLibs(root)
	if *kafkaLibs != "../kafka/lib" {
		libs, err = filepath.Abs(*kafkaLibs)
	}
	if err != nil {
		t.Fatal(err)
	}
	return libs
}

// kafkaWorld is a world whose broker is real Apache Kafka.
func kafkaWorld(t *testing.T, o harness.Options) *harness.World {
	t.Helper()
	o.RealKafka = kafkaClassPath(t)
	w := world(t, o)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("broker %s", w.Broker.LogTail(30))
		}
	})
	return w
}

// wideWindow lets a Java producer keep more than the path's
// bandwidth-delay product in flight, so that what holds it at a rate is
// sluice (or Kafka's quota), not its own window: at the defaults (five
// requests of one 16 KB batch) a broker answering in 15 ms caps a producer
// at 5.3 MB/s. With them, on a loaded host, the design scenarios' hot spot
// read 3 % short of its 13.9 MB/s, their paced core, catching up on a slow
// start (the tool paces the average since it began), 5.3 of its 4 for the
// whole measurement, and the SCRAM scenario's alice/app 3.73-3.89 of its 4
// in the windows judged. 128 KiB batches were not enough either: five in
// flight are 46 ms of the hot spot's 13.9 MB/s, and a JVM pausing longer
// (the broker's or its own, on two cores) left its link idle: 13.52 MB/s,
// 3.1 % short, in a CI-equivalent run of 1c1b07f. 768 KiB batches keep
// 0.28 s queued at that rate, still under the broker's message.max.bytes
// (1 MiB) and the producer's max.request.size.
var wideWindow = []string{"batch.size=786432", "linger.ms=10"}

// quotaWindow is wideWindow for producers Kafka's own quota holds too: the
// broker throttles a whole request at a time (it mutes the connection for
// the request's throttle time), and with 768 KiB requests bob, held by
// Kafka and sluice to 3 and then 5 MB/s, read 2.78-2.86 and 4.73-4.86
// (5-7 % short); 128 KiB batches kept him within 2 % in two CI runs,
// and at 4 MB/s or less five of them are 0.16 s of the link.
var quotaWindow = []string{"batch.size=131072", "linger.ms=10"}

// oneFetchAhead keeps a Java consumer of several partitions with a fetch
// in flight while it reads what the last one brought. The consumer fetches
// only partitions with nothing buffered, one request a broker at a time;
// at the defaults (50 MB a response, 1 MB a partition) one response fills
// all six of a topic's partitions, taking 4 s at 1.5 MB/s, and nothing is
// asked for until the reader drains one: the link stood idle 0.4 s after
// the first response (a cold JVM reading 6 MB) and the group read 1.33-1.44
// of its 1.5 MB/s in the 5 s that held the pause. A response of one
// partition leaves the other five to ask for meanwhile.
var oneFetchAhead = []string{"fetch.max.bytes=1048576"}

// javaProducer runs kafka-producer-perf-test (ProducerPerformance): records
// of recordSize bytes at most recordsPerSec a second (-1: as fast as it
// can), with the producer properties given after the client-id.
func javaProducer(t *testing.T, w *harness.World, name, clientID, topic string, recordsPerSec int, props ...string) *harness.Client {
	t.Helper()
	// The properties go in a file: --producer-props refuses a value with
	// an '=' in it (a JAAS line).
	conf := filepath.Join(w.Dir, name+".properties")
	lines := append([]string{"bootstrap.servers=" + w.Bootstrap(), "client.id=" + clientID, "acks=1"}, props...)
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := w.StartJava(name, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", "1000000000",
		"--record-size", strconv.Itoa(recordSize), "--throughput", strconv.Itoa(recordsPerSec), "--producer.config", conf)
	if err != nil {
		t.Fatal(err)
	}
	c.ClientID = clientID
	t.Cleanup(c.Stop)
	return c
}

// javaConsumer runs kafka-consumer-perf-test (ConsumerPerformance) on a
// topic from its start, reporting every second.
func javaConsumer(t *testing.T, w *harness.World, name, clientID, topic string, props ...string) *harness.Client {
	t.Helper()
	conf := filepath.Join(w.Dir, name+".properties")
	if err := os.WriteFile(conf, []byte(strings.Join(append([]string{"client.id=" + clientID}, props...), "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := w.StartJava(name, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", w.Bootstrap(), "--topic", topic,
		"--messages", "1000000000", "--timeout", "600000", "--group", clientID+"-group", "--show-detailed-stats", "--reporting-interval", "1000",
		"--consumer.config", conf)
	if err != nil {
		t.Fatal(err)
	}
	c.ClientID = clientID
	t.Cleanup(c.Stop)
	return c
}

// recordSize is the Java producers' record value size.
const recordSize = 1024

// producerReport matches ProducerPerformance's progress line (every 5 s):
// "N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency."
var producerReport = regexp.MustCompile(`(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency`)

// javaReport is what a Java tool said of itself: its last progress lines'
// throughput (record bytes a second: the tool's MB is MiB) and, for a
// producer, its average latency.
type javaReport struct {
	RecordBps    []float64 `json:"record_bytes_per_sec"`
	AvgLatencyMs []float64 `json:"avg_latency_ms,omitempty"`
}

func producerSaid(c *harness.Client) javaReport {
	var r javaReport
	for _, m := range producerReport.FindAllStringSubmatch(c.Output(), -1) {
		mb, _ := strconv.ParseFloat(m[3], 64)
		lat, _ := strconv.ParseFloat(m[4], 64)
		r.RecordBps = append(r.RecordBps, mb*(1<<20))
		r.AvgLatencyMs = append(r.AvgLatencyMs, lat)
	}
	return r
}

// consumerSaid reads ConsumerPerformance's detailed stats: "time,
// threadId, data.consumed.in.MB, MB.sec, ..." a line a second.
func consumerSaid(c *harness.Client) javaReport {
	var r javaReport
	for _, line := range strings.Split(c.Output(), "\n") {
		f := strings.Split(line, ", ")
		if len(f) < 4 {
			continue
		}
		if mbs, err := strconv.ParseFloat(strings.TrimSpace(f[3]), 64); err == nil {
			r.RecordBps = append(r.RecordBps, mbs*(1<<20))
		}
	}
	return r
}

// ① The Java client held to its limits on a real broker: a greedy Java
// producer under producer_byte_rate and a Java consumer under
// consumer_byte_rate, reading behind that producer (so it always has
// more to read than its limit allows), each within ±3 % of its limit.
func TestKafkaJavaClientLimits(t *testing.T) {
	w := kafkaWorld(t, harness.Options{Topics: []string{"events"}})
	const produceLimit, fetchLimit = 8e6, 5e6
	start(t, w, harness.Config{ProduceCapacity: "200MB", FetchCapacity: "200MB", Extra: fmt.Sprintf(`entities:
  clients:
    java-producer: {producer_byte_rate: %s}
    java-consumer: {consumer_byte_rate: %s}
`, itoa(produceLimit), itoa(fetchLimit))})
	// A wide window, and measured once steady within the ±3 % judged: a
	// CI run's producer at the default window read 7.69 of 8 MB/s, its own
	// reports swinging 6.3-7.6 with its buffer full.
	prod := javaProducer(t, w, "java-producer", "java-producer", "events", -1, wideWindow...)
	p, _ := meteredSteady(t, w, 0, 0.03, []*harness.Client{prod}, []harness.Ref{{Kind: "client", Name: "java-producer"}})
	cons := javaConsumer(t, w, "java-consumer", "java-consumer", "events")
	c, own := meteredSteady(t, w, 1, 0.03, []*harness.Client{cons}, []harness.Ref{{Kind: "client", Name: "java-consumer"}})
	early := prod.ExitedEarly() || cons.ExitedEarly()
	record(t, Result{
		Name: "kafka-java-client-limits",
		Pass: within(p[0], produceLimit, 0.03) && within(c[0], fetchLimit, 0.03) && !early,
		Measured: map[string]any{"producer_bps": p[0], "consumer_bps": c[0], "exited_early": early, "measured_at": meteredAt,
			"sluice_vs_kernel_consumer": differences(c, own),
			"producer_said":             producerSaid(prod), "consumer_said": consumerSaid(cons), "broker": "Apache Kafka " + harness.KafkaVersion},
		Expected: map[string]any{"producer_bps": produceLimit, "consumer_bps": fetchLimit, "tolerance": 0.03, "exited_early": false},
	})
}

// ② A Java producer writing round-robin to the six partitions of orders,
// of which orders-3 has a topic-partition limit: the Java client sends one
// Produce request per broker carrying a batch for every partition, with
// orders-3 anywhere in it. What orders-3 receives obeys its limit, judged
// by the growth of its log on the broker's disk. The rule for a connection
// whose requests mix entities (docs/identity.md): the strictest governing
// entity its requests name holds the whole connection, so the producer is
// held to orders-3's limit in all (judged by the broker's socket). Beside
// it a Java producer writing six partitions of events, none governed, is
// not held: it moves what it asked for. A Java consumer group reading the
// six partitions of orders (one fetch session naming them all) is held to
// orders-3's consumer limit by the same rule; it reads behind the
// producer, which writes faster than it may read.
func TestKafkaMultiPartitionProducer(t *testing.T) {
	w := kafkaWorld(t, harness.Options{Topics: []string{"orders", "events"}, Partitions: 6})
	const limit, fetchLimit = 2e6, 1.5e6
	const eventsAsked = 5000 // records/s of recordSize: 5.1 MB/s
	start(t, w, harness.Config{ProduceCapacity: "200MB", FetchCapacity: "200MB", Extra: "entities:\n  topic-partitions:\n" +
		"    orders-3: {producer_byte_rate: " + itoa(limit) + ", consumer_byte_rate: " + itoa(fetchLimit) + "}\n"})
	roundRobin := "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner"
	orders := javaProducer(t, w, "orders-producer", "orders-app", "orders", -1, roundRobin)
	events := javaProducer(t, w, "events-producer", "events-app", "events", eventsAsked, roundRobin)
	if _, err := w.WaitSteady(0, time.Minute, orders, events); err != nil { // as metered does
		t.Fatal(err)
	}
	disk := func() []int64 {
		out := make([]int64, 6)
		for p := range out {
			n, err := w.Broker.PartitionBytes("orders", p)
			if err != nil {
				t.Fatal(err)
			}
			out[p] = n
		}
		return out
	}
	before, from := disk(), time.Now()
	rates, err := w.MeterClients(0, 5*time.Second, orders, events)
	if err != nil {
		t.Fatal(err)
	}
	after, secs := disk(), time.Since(from).Seconds()
	group := javaConsumer(t, w, "orders-group", "orders-reader", "orders", oneFetchAhead...)
	read, own := meteredSteady(t, w, 1, 0.03, []*harness.Client{group}, []harness.Ref{{Kind: "topic-partition", Name: "orders-3"}})
	perPartition := make([]float64, 6)
	for p := range perPartition {
		perPartition[p] = float64(after[p]-before[p]) / secs
	}
	eventsWant := float64(eventsAsked * recordSize)
	early := orders.ExitedEarly() || events.ExitedEarly() || group.ExitedEarly()
	record(t, Result{
		Name: "kafka-multi-partition-producer",
		Pass: perPartition[3] <= 1.03*limit && within(rates[0], limit, 0.03) && rates[1] >= 0.97*eventsWant && within(read[0], fetchLimit, 0.03) && !early,
		Measured: map[string]any{"orders_partition_log_bps": perPartition, "orders_producer_bps": rates[0], "events_producer_bps": rates[1],
			"exited_early": early, "measured_at": meteredAt + "; per partition: growth of its log segments on the broker's disk",
			"orders_producer_said": producerSaid(orders), "events_producer_said": producerSaid(events),
			"orders_group_bps": read[0], "orders_group_said": consumerSaid(group), "sluice_vs_kernel_group": differences(read, own)},
		Expected: map[string]any{"orders_3_log_max_bps": 1.03 * limit, "orders_producer_bps": limit, "tolerance": 0.03, "orders_group_bps": fetchLimit,
			"events_producer_min_bps": 0.97 * eventsWant, "exited_early": false,
			"rule": "the strictest governing entity a connection's requests name holds the whole connection"},
	})
}

// ③ Kafka's own quota and sluice's on one client: the broker throttles by
// delaying its answers (throttle_time_ms), sluice by holding the client's
// segments at the NIC. Whichever is stricter holds the client, and the two
// do not fight: the client's rate is within ±5 % of the stricter over
// each phase, no 2-second rate passes sluice's limit (Kafka's throttling
// is stop-and-go over its quota window: a client it releases runs at what
// else holds it, here sluice), and it keeps its connections (no reconnects). First
// Kafka's quota is the stricter, then it is raised with AlterClientQuotas
// (what kafka-configs --alter sends) while the producer runs, and
// sluice's is.
func TestKafkaBrokerQuotaBesideSluice(t *testing.T) {
	// Kafka's quota window shortened from 11 to 3 one-second samples: its
	// throttling then alternates within seconds, not over ten, so a window
	// of a few seconds judges its average (with the default, 20-second
	// windows measured 3.74 and 4.38 MB/s under a 4 MB/s quota).
	w := kafkaWorld(t, harness.Options{Topics: []string{"events"}, BrokerProps: []string{"quota.window.num=3"}})
	const sluiceLimit, kafkaLow, kafkaHigh = 6e6, 4e6, 10e6
	start(t, w, harness.Config{ProduceCapacity: "200MB", FetchCapacity: "200MB",
		Extra: "entities:\n  clients:\n    quota-app: {producer_byte_rate: " + itoa(sluiceLimit) + "}\n"})
	if err := w.Broker.SetClientQuota(w.Pair.Client, "quota-app", "producer_byte_rate", kafkaLow); err != nil {
		t.Fatal(err)
	}
	prod := javaProducer(t, w, "quota-producer", "quota-app", "events", -1)
	trace := w.TraceClient(0, 250*time.Millisecond, prod)
	// Settle past Kafka's quota window from the producer's first bytes (its
	// JVM's start is the host's, not the schedule's): the first burst, at
	// sluice's limit, is paid back in throttling over the window after it.
	if _, err := w.WaitMoving(0, time.Minute, prod); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	portsBefore := clientPorts(t, w, prod)
	kafkaStricter, err := w.MeterClients(0, 12*time.Second, prod)
	if err != nil {
		t.Fatal(err)
	}
	phase1 := [2]time.Time{time.Now().Add(-12 * time.Second), time.Now()}
	if err := w.Broker.SetClientQuota(w.Pair.Client, "quota-app", "producer_byte_rate", kafkaHigh); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // settle: the broker's window forgets the old quota's throttling
	sluiceStricter, err := w.MeterClients(0, 8*time.Second, prod)
	if err != nil {
		t.Fatal(err)
	}
	phase2 := [2]time.Time{time.Now().Add(-8 * time.Second), time.Now()}
	portsAfter := clientPorts(t, w, prod)
	points, err := trace.Stop()
	if err != nil {
		t.Fatal(err)
	}
	peak1, _ := harness.PeakRate(points, 2*time.Second, phase1[0], phase1[1])
	peak2, _ := harness.PeakRate(points, 2*time.Second, phase2[0], phase2[1])
	kept := slices.Equal(portsBefore, portsAfter) && len(portsBefore) > 0
	record(t, Result{
		Name: "kafka-broker-quota-beside-sluice",
		Pass: within(kafkaStricter[0], kafkaLow, 0.05) && within(sluiceStricter[0], sluiceLimit, 0.05) &&
			peak1 <= 1.05*sluiceLimit && peak2 <= 1.05*sluiceLimit && kept && !prod.ExitedEarly(),
		Measured: map[string]any{"kafka_stricter_bps": kafkaStricter[0], "sluice_stricter_bps": sluiceStricter[0],
			"kafka_stricter_peak_2s_bps": peak1, "sluice_stricter_peak_2s_bps": peak2,
			"connections_before": portsBefore, "connections_after": portsAfter, "measured_at": meteredAt, "producer_said": producerSaid(prod)},
		Expected: map[string]any{"kafka_stricter_bps": kafkaLow, "sluice_stricter_bps": sluiceLimit, "tolerance": 0.05,
			"peak_2s_max_bps": 1.05 * sluiceLimit, "kafka_phase_window_s": 12, "kafka_quota_window": "quota.window.num=3 × 1 s", "connections": "the same client ports throughout (no reconnect)"},
	})
}

// clientPorts is the sorted local ports of a client process's connections
// to the broker.
func clientPorts(t *testing.T, w *harness.World, c *harness.Client) []uint16 {
	t.Helper()
	all, err := w.ClientPorts()
	if err != nil {
		t.Fatal(err)
	}
	ports := slices.Clone(all[c.Pid()])
	slices.Sort(ports)
	return ports
}

// ④ The design's four scenarios (DESIGN §4, docs/design.md) with Java
// producers on one real broker, produce direction, C = 0.9 × 20 MB/s:
//
//   - idle: core-producer (8 MB/s reserved) asks 4 MB/s and gets it;
//   - hot spot: an unconfigured producer arrives greedy and gets what core
//     leaves of C;
//   - contention by weight: core, the hot spot (weight 1) and
//     backfill-producer (weight 0.1) all greedy: core gets its
//     reservation and its weight's part of the spare, the others their
//     floors and their parts (1 : 1 : 0.1);
//   - overcommit: ordersA-0 and ordersB-0 reserve 12 MB/s each (24 on a
//     pool of 18): both scaled to C/2.
//
// Each within ±3 % of the oracle's rate, judged by the broker's sockets.
// Under contention the others' oracle follows from what core took: work
// conservation gives what core leaves of its share to the others by
// weight (DESIGN §4 steps 3-4), so a core client the host's CPU slowed
// still has the others judged exactly (a loaded host starved core's JVM
// to 11.99 of its 12.51 in one run). The hot spot's oracle is what core
// left of C in the same window.
func TestKafkaDesignScenarios(t *testing.T) {
	w := kafkaWorld(t, harness.Options{Topics: []string{"events", "ordersA", "ordersB"}})
	const capacity, res, tpRes = 20e6, 8e6, 12e6
	const c = 0.9 * capacity
	const floor = harness.WorldMinLimit
	// Two memory cycles: the overcommit phase starts once the earlier
	// producers have left the active set. Limits rewritten when they move
	// 1 %, not the shipped 5 %: the oracle's ±3 % would otherwise judge the
	// update threshold (backfill's 0.713 MB/s held at 0.754 in one run).
	start(t, w, harness.Config{ProduceCapacity: itoa(capacity), FetchCapacity: "200MB", MemoryCycles: 2, Extra: "update_threshold: 0.01\nentities:\n" +
		"  clients:\n    core-producer: {producer_byte_reservation: " + itoa(res) + "}\n    backfill-producer: {quota_weight: 0.1}\n" +
		"  topic-partitions:\n    ordersA-0: {producer_byte_reservation: " + itoa(tpRes) + "}\n    ordersB-0: {producer_byte_reservation: " + itoa(tpRes) + "}\n"})
	// A phase is measured once sluice holds every greedy producer (its
	// entity active and throttled: the JVMs have ramped and the loop has
	// seen their demand); the kernel then judges.
	phase := func(name string, clients []*harness.Client, want []float64, greedy ...*harness.Client) map[string]any {
		refs := make([]harness.Ref, len(clients))
		held := map[harness.Ref]bool{}
		for i, cl := range clients {
			refs[i] = harness.Ref{Kind: "client", Name: cl.ClientID}
			if strings.HasPrefix(cl.Name, "orders") {
				refs[i] = harness.Ref{Kind: "topic-partition", Name: cl.Name + "-0"}
			}
			held[refs[i]] = slices.Contains(greedy, cl)
		}
		_, err := w.WaitFor(30*time.Second, func(s *status.Snapshot) bool {
			n := 0
			for _, e := range s.Directions[0].Entities {
				if held[harness.Ref{Kind: e.Kind, Name: e.Name}] && e.State == "active" && e.Throttled {
					n++
				}
			}
			return n == len(greedy)
		})
		if err != nil {
			t.Logf("phase %s: the greedy producers were not all held within 30 s: %v", name, err)
		}
		// Steady within the ±3 % it is judged at: the hot spot's JVM was
		// once measured still climbing (12.7 → 13.1 of 13.9 MB/s).
		got, own := meteredSteady(t, w, 0, 0.03, clients, refs)
		pass := want != nil
		said := map[string]javaReport{}
		for i, cl := range clients {
			pass = pass && within(got[i], want[i], 0.03) && !cl.ExitedEarly()
			said[cl.Name] = producerSaid(cl)
		}
		limits := map[string]float64{}
		if st, err := w.Status(); err == nil {
			for _, e := range st.Directions[0].Entities {
				limits[e.Kind+":"+e.Name] = float64(e.DynamicLimit)
			}
		}
		return map[string]any{"phase": name, "pass": pass, "kernel_bps": got, "oracle_bps": want, "producers_said": said,
			"sluice_vs_kernel": differences(got, own), "sluice_limits": limits}
	}
	const coreRecords = 3906 // a second: 4 MB/s of values
	const coreAsks = coreRecords * recordSize
	core := javaProducer(t, w, "core-paced", "core-producer", "events", coreRecords, wideWindow...)
	idle := phase("idle", []*harness.Client{core}, []float64{coreAsks})
	hot := javaProducer(t, w, "hot-spot", "hot-producer", "events", -1, wideWindow...)
	hotSpot := phase("hot-spot", []*harness.Client{core, hot}, nil, hot)
	got := hotSpot["kernel_bps"].([]float64)
	hotSpot["oracle_bps"] = []float64{coreAsks, c - got[0]}
	hotSpot["pass"] = within(got[0], coreAsks, 0.03) && within(got[1], c-got[0], 0.03) && !hot.ExitedEarly() && !core.ExitedEarly()
	core.Stop()
	coreGreedy := javaProducer(t, w, "core-greedy", "core-producer", "events", -1, wideWindow...)
	backfill := javaProducer(t, w, "backfill", "backfill-producer", "events", -1, wideWindow...)
	coreShare := res + (c-res-2*floor)/2.1
	contention := phase("contention", []*harness.Client{coreGreedy, hot, backfill}, nil, coreGreedy, hot, backfill)
	got = contention["kernel_bps"].([]float64)
	rest := c - min(got[0], coreShare) - 2*floor
	contention["oracle_bps"] = []float64{coreShare, floor + rest/1.1, floor + rest*0.1/1.1}
	contention["pass"] = within(got[0], coreShare, 0.03) && within(got[1], floor+rest/1.1, 0.03) && within(got[2], floor+rest*0.1/1.1, 0.03) &&
		!coreGreedy.ExitedEarly() && !hot.ExitedEarly() && !backfill.ExitedEarly()
	for _, cl := range []*harness.Client{coreGreedy, hot, backfill} {
		cl.Stop()
	}
	a := javaProducer(t, w, "ordersA", "orders-a-app", "ordersA", -1, wideWindow...)
	b := javaProducer(t, w, "ordersB", "orders-b-app", "ordersB", -1, wideWindow...)
	overcommit := phase("overcommit", []*harness.Client{a, b}, []float64{c / 2, c / 2}, a, b)
	s, err := w.WaitFor(5*time.Second, func(s *status.Snapshot) bool { return s.Directions[0].Overcommit })
	raised := err == nil && s.Directions[0].Overcommit
	phases := []map[string]any{idle, hotSpot, contention, overcommit}
	pass := raised
	for _, p := range phases {
		pass = pass && p["pass"].(bool)
	}
	record(t, Result{
		Name:     "kafka-design-scenarios",
		Pass:     pass,
		Measured: map[string]any{"phases": phases, "overcommit_alert_raised": raised, "measured_at": meteredAt, "broker": "Apache Kafka " + harness.KafkaVersion},
		Expected: map[string]any{"C_bps": c, "tolerance": 0.03, "oracle": "DESIGN §4: floors after reservations, spare by weight", "overcommit_alert_raised": true},
	})
}

// ⑥ SCRAM-SHA-512 users on a real broker's SASL_PLAINTEXT listener, made
// with kafka-configs, with Java producers, the broker re-authenticating
// every connection every 10 s (connections.max.reauth.ms, KIP-368):
//
//   - alice's producers under KIP-55's precedence: client-id reports has a
//     <user, client-id> entity of 2 MB/s of its own, client-id app shares
//     alice's 4 MB/s (both from sluice's file);
//   - bob's limit is Kafka's own quota (kafka-configs --add-config
//     producer_byte_rate on users/bob), imported (kafka_quotas: import),
//     3 MB/s and then, while bob's producer runs, altered to 5 MB/s with
//     kafka-configs: the import follows;
//   - identity is held through every re-authentication: each producer
//     keeps its connections through the run (the broker closes one that
//     fails to re-authenticate) and its rate through every window.
//
// Each rate within ±5 % (Kafka enforces bob's quota too: the stricter of
// two equal limits; its quota window is shortened as in ③).
func TestKafkaSCRAMUsers(t *testing.T) {
	w := kafkaWorld(t, harness.Options{Topics: []string{"events"}, BrokerProtocol: "SASL_PLAINTEXT",
		BrokerProps: []string{"connections.max.reauth.ms=10000", "quota.window.num=3"}})
	passwords := map[string]string{"alice": "alice-Pw-7f3c91", "bob": "bob-Pw-4e2a08", "sluice": "sluice-Pw-0b77"}
	for _, u := range []string{"alice", "bob", "sluice"} {
		if err := w.Broker.AddSCRAMUser(u, passwords[u]); err != nil {
			t.Fatal(err)
		}
	}
	const aliceLimit, reportsLimit, bobBefore, bobAfter = 4e6, 2e6, 3e6, 5e6
	setBob := func(rate float64) {
		if _, err := w.Broker.Configs("--alter", "--entity-type", "users", "--entity-name", "bob", "--add-config", "producer_byte_rate="+itoa(rate)); err != nil {
			t.Fatal(err)
		}
	}
	setBob(bobBefore)
	start(t, w, harness.Config{ProduceCapacity: "200MB", FetchCapacity: "200MB", Listeners: "[{port: 9092, protocol: SASL_PLAINTEXT}]",
		Extra: "sasl: {mechanism: SCRAM-SHA-512, username: sluice, password: " + passwords["sluice"] + "}\nkafka_quotas: import\n" +
			"entities:\n  users:\n    alice:\n      producer_byte_rate: " + itoa(aliceLimit) + "\n      clients:\n        reports: {producer_byte_rate: " + itoa(reportsLimit) + "}\n"})
	login := func(user string) []string {
		return []string{"security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-512",
			`sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="` + user + `" password="` + passwords[user] + `";`}
	}
	reports := javaProducer(t, w, "alice-reports", "reports", "events", -1, append(login("alice"), quotaWindow...)...)
	app := javaProducer(t, w, "alice-app", "app", "events", -1, append(login("alice"), quotaWindow...)...)
	bob := javaProducer(t, w, "bob", "bob-app", "events", -1, append(login("bob"), quotaWindow...)...)
	producers := []*harness.Client{reports, app, bob}
	reauths := func() float64 {
		m, err := w.Broker.JMX("kafka.server:type=socket-server-metrics,listener=SASL_PLAINTEXT,networkProcessor=*", "successful-reauthentication-total")
		if err != nil {
			t.Fatal(err)
		}
		return m["successful-reauthentication-total"]
	}
	started := time.Now()
	// Measured once the three JVMs hold the rates asked of them (their
	// start, the SCRAM login, Kafka's own 3 s quota window, which pays an
	// early burst back over seconds): after a fixed 6 s a loaded host's
	// first window still had alice/app and bob 20-28 % short, and steady
	// within ±5 % of itself, bob was still climbing (2.83, 2.96, 2.99 of 3
	// MB/s over the three windows).
	if _, err := w.WaitNear(0, time.Minute, 0.05, []float64{reportsLimit, aliceLimit, bobBefore}, producers...); err != nil {
		t.Fatal(err)
	}
	reauthsBefore := reauths()
	ports := make([][]uint16, len(producers))
	for i, p := range producers {
		ports[i] = clientPorts(t, w, p)
	}
	// Three 5-second windows before bob's quota changes, three after.
	var before, after [][]float64
	for range 3 {
		r, err := w.MeterClients(0, 5*time.Second, producers...)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, r)
	}
	setBob(bobAfter)
	changed := time.Now()
	// The new quota takes hold through the import's interval (metadata
	// refresh, 2 s) and Kafka's quota window (3 s); how long it took is
	// recorded.
	near, err := w.WaitNear(0, 30*time.Second, 0.05, []float64{reportsLimit, aliceLimit, bobAfter}, producers...)
	if err != nil {
		t.Fatal(err)
	}
	tookHold := time.Since(changed)
	for range 3 {
		r, err := w.MeterClients(0, 5*time.Second, producers...)
		if err != nil {
			t.Fatal(err)
		}
		after = append(after, r)
	}
	reauthenticated := reauths() - reauthsBefore
	kept := true
	for i, p := range producers {
		kept = kept && len(ports[i]) > 0 && slices.Equal(ports[i], clientPorts(t, w, p)) && !p.ExitedEarly()
	}
	// Every connection of the three producers (each has one to the broker
	// and one it opened for metadata) re-authenticated at least three
	// times while measured: the broker's own count.
	conns := 0
	for i := range producers {
		conns += len(ports[i])
	}
	pass := kept && reauthenticated >= float64(3*len(producers))
	for _, r := range before {
		pass = pass && within(r[0], reportsLimit, 0.05) && within(r[1], aliceLimit, 0.05) && within(r[2], bobBefore, 0.05)
	}
	for _, r := range after {
		pass = pass && within(r[0], reportsLimit, 0.05) && within(r[1], aliceLimit, 0.05) && within(r[2], bobAfter, 0.05)
	}
	ran := time.Since(started)
	record(t, Result{
		Name: "kafka-scram-users",
		Pass: pass,
		Measured: map[string]any{"windows_before_bps": before, "windows_after_bps": after, "order": []string{"alice/reports", "alice/app", "bob"},
			"connections_kept": kept, "connections": conns, "ran_s": ran.Seconds(),
			"broker_successful_reauthentications": reauthenticated, "reauthentications_from": "the broker's JMX socket-server-metrics successful-reauthentication-total",
			"quota_took_hold_s": tookHold.Seconds(), "quota_took_hold": near.Steady, "measured_at": meteredAt},
		Expected: map[string]any{"alice_reports_bps": reportsLimit, "alice_app_bps": aliceLimit, "bob_bps": []float64{bobBefore, bobAfter},
			"tolerance": 0.05, "connections_kept": true, "broker_successful_reauthentications_min": 3 * len(producers)},
	})
}

// ⑦ An SSL listener on a real broker, its keystore made with keytool: a
// Java producer from 198.18.0.2, inside the peer rule 198.18.0.0/26, is
// held to that peer's limit; a franz-go producer from an address no rule
// holds is held to the listener's entity. Both claim one client-id, which
// TLS hides from sluice anyway. Each within ±5 % (the broker's sockets).
func TestKafkaTLSPeers(t *testing.T) {
	const peerLimit, listenerLimit = 3e6, 4e6
	w := kafkaWorld(t, harness.Options{Topics: []string{"events"}, BrokerProtocol: "SSL"})
	other := netip.MustParseAddr("198.18.0.200")
	if err := w.AddClientAddress(other); err != nil {
		t.Fatal(err)
	}
	tf := w.Broker.TLSFiles()
	start(t, w, harness.Config{ProduceCapacity: "200MB", FetchCapacity: "200MB", Listeners: "[{port: 9092, protocol: SSL}]",
		Extra: "tls: {enabled: true, ca_file: " + tf.CertPEM + "}\n" +
			"entities:\n  peers:\n    198.18.0.0/26: {producer_byte_rate: " + itoa(peerLimit) + "}\n" +
			"  listeners:\n    '9092': {producer_byte_rate: " + itoa(listenerLimit) + "}\n"})
	java := javaProducer(t, w, "java-peer", "same-app", "events", -1, "security.protocol=SSL", "ssl.truststore.type=PKCS12",
		"ssl.truststore.location="+tf.Truststore, "ssl.truststore.password="+tf.Password)
	franz := client(t, w, harness.ClientSpec{Name: "franz-unmatched", Lib: "franz", Mode: "produce", ClientID: "same-app", Topic: "events",
		Args: []string{"-tls-ca", tf.CertPEM, "-source-addr", other.String()}})
	kernel, own := metered(t, w, 0, []*harness.Client{java, franz}, []harness.Ref{{Kind: "peer", Name: "198.18.0.0/26"}, {Kind: "listener", Name: "9092"}})
	errs, ok := noErrors(franz)
	record(t, Result{
		Name: "kafka-tls-peers",
		Pass: within(kernel[0], peerLimit, 0.05) && within(kernel[1], listenerLimit, 0.05) && ok && !java.ExitedEarly(),
		Measured: map[string]any{"java_peer_bps": kernel[0], "franz_unmatched_bps": kernel[1], "client_errors": errs, "measured_at": meteredAt,
			"sluice_vs_kernel": differences(kernel, own), "java_said": producerSaid(java)},
		Expected: map[string]any{"java_peer_bps": peerLimit, "franz_unmatched_bps": listenerLimit, "tolerance": 0.05, "client_errors": 0},
	})
}

// producerSummary matches ProducerPerformance's closing line: "N records
// sent, ... A ms avg latency, X ms max latency, P50 ms 50th, P95 ms 95th,
// P99 ms 99th, P999 ms 99.9th."
var producerSummary = regexp.MustCompile(`(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), ([\d.]+) ms avg latency, [\d.]+ ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th`)

// ⑧ Latency at the NIC against the Java producer's own: a paced Java
// producer (linger.ms=0, one record a request, acks=1) runs a fixed count
// of records and prints its percentiles (each record's time from send()
// to its acknowledgement); sluice's p50 and p99 for its entity over the
// last minute (each request's last byte in to its response's first byte
// out) are read beside them. The NIC's interval lies inside the client's,
// so sluice's p50 and p99 may not exceed the Java producer's; the gap is
// the client's own time (its accumulator, its sender thread, a JVM waiting
// for a CPU), which no NIC sees: on this 2-core host the Java p99 was
// 70 ms where the NIC's was 8.3, so the franz-go scenario's 1 ms / 10 %
// tolerance (TestScenarioLatencyAccuracy) is not asked of a JVM.
func TestKafkaLatencyBesideJava(t *testing.T) {
	w := kafkaWorld(t, harness.Options{Topics: []string{"events"}})
	start(t, w, harness.Config{ProduceCapacity: "200MB", FetchCapacity: "200MB",
		Extra: "entities:\n  clients:\n    timed-app: {producer_byte_reservation: 1000000}\n"})
	const perSecond, seconds = 500, 30
	prod, err := w.StartJava("timed-producer", "org.apache.kafka.tools.ProducerPerformance", "--topic", "events",
		"--num-records", strconv.Itoa(perSecond*seconds), "--record-size", "512", "--throughput", strconv.Itoa(perSecond),
		"--producer-props", "bootstrap.servers="+w.Bootstrap(), "client.id=timed-app", "acks=1", "linger.ms=0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Stop)
	var m []string
	deadline := time.Now().Add(time.Duration(seconds+30) * time.Second)
	for m == nil && time.Now().Before(deadline) {
		m = producerSummary.FindStringSubmatch(prod.Output())
		time.Sleep(200 * time.Millisecond) // polling the tool's report, bounded by the deadline
	}
	if m == nil {
		t.Fatalf("the producer printed no summary:\n%s", prod.Output())
	}
	javaP50, _ := strconv.ParseFloat(m[3], 64)
	javaP99, _ := strconv.ParseFloat(m[5], 64)
	s, err := w.Status()
	if err != nil {
		t.Fatal(err)
	}
	var nic status.LatencyView
	for _, e := range s.Directions[0].Entities {
		if e.Name == "timed-app" {
			for _, l := range e.Latency {
				if l.API == "produce" {
					nic = l
				}
			}
		}
	}
	// The Java tool prints whole milliseconds: its p50 of "1" is [1, 2).
	record(t, Result{
		Name: "kafka-latency-beside-java",
		Pass: nic.RequestsMinute >= 1000 && nic.P50MinuteMillis > 0 && nic.P50MinuteMillis <= javaP50+1 && nic.P99MinuteMillis <= javaP99+1,
		Measured: map[string]any{"java_p50_ms": javaP50, "java_p99_ms": javaP99, "sluice_p50_ms": nic.P50MinuteMillis, "sluice_p99_ms": nic.P99MinuteMillis,
			"sluice_requests_measured": nic.RequestsMinute, "java_summary": m[0], "client_time_p99_ms": javaP99 - nic.P99MinuteMillis},
		Expected: map[string]any{"sluice_p50_ms_max": "the Java p50 (+1: whole ms)", "sluice_p99_ms_max": "the Java p99 (+1: whole ms)",
			"sluice_requests_measured_min": 1000},
	})
}

// ⑨ Identity through agent restarts on a real broker: a Java producer
// logged in with SCRAM as alice (her 5 MB/s user limit) and a Java
// consumer in a fetch session (KIP-227) reading events-0 (its 3 MB/s
// topic-partition limit). The agent is killed (kill -9) and started again,
// then stopped (SIGTERM, as systemctl restart does, keeping the data path
// attached) and started again: in every 5-second window the clients stay
// within ±5 % of their limits, and no 2-second rate passes 1.05 × the
// limit while the agents change (the broker's sockets).
func TestKafkaRestartDurability(t *testing.T) {
	w, passwords, login := restartWorld(t)
	const aliceLimit, sessionLimit = 5e6, 3e6
	cfg := w.WriteConfig("restart", harness.Config{ProduceCapacity: "200MB", FetchCapacity: "200MB", KeepAttached: true,
		Listeners: "[{port: 9092, protocol: SASL_PLAINTEXT}]",
		Extra: "sasl: {mechanism: SCRAM-SHA-512, username: sluice, password: " + passwords["sluice"] + "}\n" +
			"entities:\n  users:\n    alice: {producer_byte_rate: " + itoa(aliceLimit) + "}\n" +
			"  topic-partitions:\n    events-0: {consumer_byte_rate: " + itoa(sessionLimit) + "}\n"})
	a, err := w.StartAgent(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { a.Stop() }()
	prod, cons := restartClients(t, w, login)
	time.Sleep(3 * time.Second) // settle, as metered does
	produceTrace, fetchTrace := w.TraceClient(0, meterEvery, prod), w.TraceClient(1, meterEvery, cons)
	windows := map[string][2]float64{}
	window := func(name string) { windows[name] = restartWindow(t, w, prod, cons) }
	restartFrom := time.Now()
	window("before")
	a.Kill()
	if a, err = w.StartAgent(cfg); err != nil {
		t.Fatal(err)
	}
	window("after kill -9")
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	if a, err = w.StartAgent(cfg); err != nil {
		t.Fatal(err)
	}
	window("after SIGTERM")
	restartTo := time.Now()
	peakProduce, _, _ := stopAtPeak(t, produceTrace, restartFrom, restartTo)
	peakFetch, _, _ := stopAtPeak(t, fetchTrace, restartFrom, restartTo)
	pass := peakProduce <= 1.05*aliceLimit && peakFetch <= 1.05*sessionLimit && !prod.ExitedEarly() && !cons.ExitedEarly()
	for _, r := range windows {
		pass = pass && within(r[0], aliceLimit, 0.05) && within(r[1], sessionLimit, 0.05)
	}
	record(t, Result{
		Name: "kafka-restart-durability",
		Pass: pass,
		Measured: map[string]any{"windows_produce_fetch_bps": windows, "peak_2s_produce_bps": peakProduce, "peak_2s_fetch_bps": peakFetch,
			"measured_at": meteredAt, "consumer_said": consumerSaid(cons)},
		Expected: map[string]any{"alice_bps": aliceLimit, "events_0_bps": sessionLimit, "tolerance": 0.05,
			"peak_2s_max": "1.05 × each limit through both restarts"},
	})
}

// restartWorld is the broker of the restart scenarios: SASL (SCRAM-SHA-512)
// with users alice, reader and sluice, and 200 MB in events-0 written
// before any agent ran, for a consumer in a fetch session to read. login
// gives a Java client's properties for a user.
func restartWorld(t *testing.T) (w *harness.World, passwords map[string]string, login func(user string) []string) {
	t.Helper()
	w = kafkaWorld(t, harness.Options{Topics: []string{"orders", "events"}, BrokerProtocol: "SASL_PLAINTEXT"})
	passwords = map[string]string{"alice": "alice-Pw-90ab", "reader": "reader-Pw-77c2", "sluice": "sluice-Pw-3d1e"}
	for u, p := range passwords {
		if err := w.Broker.AddSCRAMUser(u, p); err != nil {
			t.Fatal(err)
		}
	}
	login = func(user string) []string {
		return []string{"security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-512",
			`sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="` + user + `" password="` + passwords[user] + `";`}
	}
	// The consumer reads what a producer wrote before any agent ran.
	fill := javaProducer(t, w, "prefill", "prefill", "events", -1, append(login("reader"), "batch.size=262144", "linger.ms=10")...)
	for {
		if n, err := w.Broker.PartitionBytes("events", 0); err == nil && n >= 200<<20 {
			break
		}
		if fill.ExitedEarly() {
			t.Fatal("the prefill producer exited")
		}
		time.Sleep(200 * time.Millisecond) // polling the broker's log, bounded by the test's timeout
	}
	fill.Stop()
	return w, passwords, login
}

// restartClients starts the restart scenarios' clients, alice's Java
// producer and reader's Java consumer in a fetch session on events, and
// returns once the agent holds both (alice's user limit, events-0's
// topic-partition limit).
func restartClients(t *testing.T, w *harness.World, login func(user string) []string) (prod, cons *harness.Client) {
	t.Helper()
	prod = javaProducer(t, w, "alice-producer", "alice-app", "orders", -1, login("alice")...)
	conf := filepath.Join(w.Dir, "reader.properties")
	if err := os.WriteFile(conf, []byte("client.id=reader-app\n"+strings.Join(login("reader"), "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cons, err := w.StartJava("session-consumer", "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", w.Bootstrap(),
		"--topic", "events", "--messages", "1000000000", "--timeout", "600000", "--group", "reader-group", "--consumer.config", conf,
		"--show-detailed-stats", "--reporting-interval", "1000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cons.Stop)
	if _, err := w.WaitFor(40*time.Second, func(s *status.Snapshot) bool {
		p, f := entityOf(s, maps.Produce, "user", "alice"), entityOf(s, maps.Fetch, "topic-partition", "events-0")
		return p != nil && p.Throttled && f != nil && f.Throttled
	}); err != nil {
		t.Fatalf("alice and events-0 were not held within 40 s: %v", err)
	}
	return prod, cons
}

// restartWindow is the producer's and the consumer's rates over the next 5
// s, from the broker's sockets.
func restartWindow(t *testing.T, w *harness.World, prod, cons *harness.Client) [2]float64 {
	t.Helper()
	r, err := w.MeterClients(0, 5*time.Second, prod)
	if err != nil {
		t.Fatal(err)
	}
	f, err := w.MeterClients(1, 5*time.Second, cons)
	if err != nil {
		t.Fatal(err)
	}
	return [2]float64{r[0], f[0]}
}

// stopAtPeak stops a client's trace and gives its largest 2-second rate
// between from and to, when that window began, and the trace's points.
func stopAtPeak(t *testing.T, trace *harness.MeterTrace, from, to time.Time) (float64, time.Time, []harness.MeterPoint) {
	t.Helper()
	points, err := trace.Stop()
	if err != nil {
		t.Fatal(err)
	}
	peak, at := harness.PeakRate(points, 2*time.Second, from, to)
	return peak, at, points
}
