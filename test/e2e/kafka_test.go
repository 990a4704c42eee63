package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/test/harness"
)

// The TestKafka scenarios run sluice in front of real Apache Kafka (a
// KRaft broker from the jars `make kafka-deps` fetched) with the Java
// client, driven through the distribution's own tools. `make kafka-check`
// runs them and writes kafka-results.json. As everywhere, the kernel's
// broker-side sockets judge; the tools' own figures go beside them.

var kafkaLibs = flag.String("kafka-libs", "../kafka/lib", "the class path directory of Apache Kafka (make kafka-deps)")

// kafkaWorld is a world whose broker is real Apache Kafka.
func kafkaWorld(t *testing.T, o harness.Options) *harness.World {
	t.Helper()
	root, _ := filepath.Abs("../..")
	libs, err := harness.KafkaLibs(root)
	if *kafkaLibs != "../kafka/lib" {
		libs, err = filepath.Abs(*kafkaLibs)
	}
	if err != nil {
		t.Fatal(err)
	}
	o.RealKafka = libs
	w := world(t, o)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("broker %s", w.Broker.LogTail(30))
		}
	})
	return w
}

// javaProducer runs kafka-producer-perf-test (ProducerPerformance): records
// of recordSize bytes at most recordsPerSec a second (-1: as fast as it
// can), with the producer properties given after the client-id.
func javaProducer(t *testing.T, w *harness.World, name, clientID, topic string, recordsPerSec int, props ...string) *harness.Client {
	t.Helper()
	args := []string{"--topic", topic, "--num-records", "1000000000", "--record-size", strconv.Itoa(recordSize),
		"--throughput", strconv.Itoa(recordsPerSec), "--producer-props", "bootstrap.servers=" + w.Bootstrap(), "client.id=" + clientID, "acks=1"}
	c, err := w.StartJava(name, "org.apache.kafka.tools.ProducerPerformance", append(args, props...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// javaConsumer runs kafka-consumer-perf-test (ConsumerPerformance) on a
// topic from its start, reporting every second.
func javaConsumer(t *testing.T, w *harness.World, name, clientID, topic string) *harness.Client {
	t.Helper()
	conf := filepath.Join(w.Dir, name+".properties")
	if err := os.WriteFile(conf, []byte("client.id="+clientID+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := w.StartJava(name, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", w.Bootstrap(), "--topic", topic,
		"--messages", "1000000000", "--timeout", "600000", "--group", clientID+"-group", "--show-detailed-stats", "--reporting-interval", "1000",
		"--consumer.config", conf)
	if err != nil {
		t.Fatal(err)
	}
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
	prod := javaProducer(t, w, "java-producer", "java-producer", "events", -1)
	p, _ := metered(t, w, 0, []*harness.Client{prod}, []harness.Ref{{Kind: "client", Name: "java-producer"}})
	cons := javaConsumer(t, w, "java-consumer", "java-consumer", "events")
	c, own := metered(t, w, 1, []*harness.Client{cons}, []harness.Ref{{Kind: "client", Name: "java-consumer"}})
	early := prod.ExitedEarly() || cons.ExitedEarly()
	record(t, Result{
		Name: "kafka-java-client-limits",
		Pass: within(p[0], produceLimit, 0.03) && within(c[0], fetchLimit, 0.03) && !early,
		Measured: map[string]any{"producer_bps": p[0], "consumer_bps": c[0], "exited_early": early, "measured_at": meteredAt,
			"sluice_vs_kernel_consumer": differences(c, own),
			"producer_said": producerSaid(prod), "consumer_said": consumerSaid(cons), "broker": "Apache Kafka " + harness.KafkaVersion},
		Expected: map[string]any{"producer_bps": produceLimit, "consumer_bps": fetchLimit, "tolerance": 0.03, "exited_early": false},
	})
}
