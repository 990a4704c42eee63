package e2e

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/test/harness"
)

// The real-broker scenarios of three Apache Kafka brokers, one per host,
// each host with its own sluice agent.

// realClusterWorld is three broker hosts running Apache Kafka.
func realClusterWorld(t *testing.T, props ...string) *harness.ClusterWorld {
	t.Helper()
	root, _ := filepath.Abs("../..")
	libs, err := harness.KafkaLibs(root)
	if *kafkaLibs != "../kafka/lib" {
		libs, err = filepath.Abs(*kafkaLibs)
	}
	if err != nil {
		t.Fatal(err)
	}
	w, err := harness.NewRealClusterWorld(t.TempDir(), bins.sluice, bins.loadgen, libs, props...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, b := range w.Brokers {
				t.Logf("broker %d %s", b.ID, b.Kafka.LogTail(20))
				if b.Agent != nil {
					data, _ := os.ReadFile(b.Agent.Log)
					t.Logf("agent on broker %d (last 3000 bytes):\n%s", b.ID, data[max(0, len(data)-3000):])
				}
			}
		}
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	return w
}

// replicaIPs are the brokers' addresses: what a follower fetches from.
func replicaIPs(w *harness.ClusterWorld) []netip.Addr {
	var ips []netip.Addr
	for _, b := range w.Brokers {
		ips = append(ips, b.IP)
	}
	return ips
}

// replicationBytes is what each broker's listener has sent to the other
// brokers (their replica fetchers acknowledged it) and received from the
// client host, per broker, from the brokers' own sockets.
func replicationBytes(t *testing.T, w *harness.ClusterWorld) (toReplicas, fromClients []uint64) {
	t.Helper()
	brokers := replicaIPs(w)
	for _, b := range w.Brokers {
		socks, err := b.ListenerSockets()
		if err != nil {
			t.Fatal(err)
		}
		var rep, cl uint64
		for peer, s := range socks {
			switch {
			case slices.Contains(brokers, peer.Addr()):
				rep += s.Acked
			case peer.Addr() == b.ClientIP:
				cl += s.Received
			}
		}
		toReplicas, fromClients = append(toReplicas, rep), append(fromClients, cl)
	}
	return toReplicas, fromClients
}

// isr is each partition's in-sync replica count of a topic, as the
// cluster's metadata says.
func isr(t *testing.T, w *harness.ClusterWorld, topic string) []int {
	t.Helper()
	adm, err := w.Brokers[0].Kafka.Admin(w.Clients)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	td := md.Topics[topic]
	out := make([]int, len(td.Partitions))
	for _, p := range td.Partitions.Sorted() {
		out[p.Partition] = len(p.ISR)
	}
	return out
}

// ⑤ Replication stays exempt on a real cluster: three brokers, a topic of
// three partitions with three replicas (min.insync.replicas 2), a Java
// producer (acks=all) writing round-robin to all three under a 3 MB/s
// client limit on each host. Each host holds the producer's connection to
// its broker to 3 MB/s (±3 %, from the client host's sockets), while the
// followers' fetches, which cross the same NICs from exempt peers, carry
// every byte twice (each partition's two followers; ±10 %, from the
// brokers' sockets) and every partition keeps its three in-sync replicas.
func TestKafkaReplicationExempt(t *testing.T) {
	w := realClusterWorld(t)
	const limit = 3e6
	if err := w.Brokers[0].Kafka.CreateTopics(w.Clients, 3, 3, "events"); err != nil {
		t.Fatal(err)
	}
	for _, b := range w.Brokers {
		cfg := w.WriteAgentConfig(b, harness.ClusterAgentConfig{ProduceCapacity: "200MB",
			Extra: "entities:\n  clients:\n    capped-app: {producer_byte_rate: " + itoa(limit) + "}\n"})
		if err := w.StartAgent(b, cfg); err != nil {
			t.Fatal(err)
		}
	}
	prod, err := w.StartJava("capped-producer", "org.apache.kafka.tools.ProducerPerformance", "--topic", "events",
		"--num-records", "1000000000", "--record-size", strconv.Itoa(recordSize), "--throughput", "-1", "--producer-props",
		"bootstrap.servers="+w.Bootstrap(), "client.id=capped-app", "acks=all",
		"partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner",
		// With acks=all each request waits for the followers: 16 KiB
		// batches, five in flight, kept the producer's own demand under
		// 3 MB/s a broker (2.67-2.73 measured), so it was not greedy.
		"batch.size=262144", "linger.ms=20")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Stop)
	// Measured once every host holds the producer (its entity active and
	// throttled: the JVM has ramped and each loop has seen its demand).
	deadline := time.Now().Add(40 * time.Second)
	for _, b := range w.Brokers {
		for {
			s, err := b.Status()
			if err == nil && slices.ContainsFunc(s.Directions[0].Entities, func(e status.EntityView) bool {
				return e.Name == "capped-app" && e.State == "active" && e.Throttled
			}) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("broker %d's agent does not hold capped-app after 40 s (last error %v)", b.ID, err)
			}
			time.Sleep(200 * time.Millisecond) // polling the agent, bounded by the deadline
		}
	}
	isrBefore := isr(t, w, "events")
	meter, err := w.NewLinkMeter()
	if err != nil {
		t.Fatal(err)
	}
	first, from, err := meter.Read()
	if err != nil {
		t.Fatal(err)
	}
	repBefore, brokerInBefore := replicationBytes(t, w)
	time.Sleep(8 * time.Second) // the measurement window
	last, to, err := meter.Read()
	if err != nil {
		t.Fatal(err)
	}
	repAfter, brokerInAfter := replicationBytes(t, w)
	isrAfter := isr(t, w, "events")
	secs := to.Sub(from).Seconds()
	perBroker := make([]float64, len(w.Brokers))
	var clientTotal, replicated, brokersReceived float64
	pass := !prod.ExitedEarly()
	for i, b := range w.Brokers {
		k := harness.LinkKey{From: b.ClientIP, To: b.IP}
		perBroker[i] = float64(last[k].Acked-first[k].Acked) / secs
		clientTotal += perBroker[i]
		replicated += float64(repAfter[i]-repBefore[i]) / secs
		brokersReceived += float64(brokerInAfter[i]-brokerInBefore[i]) / secs
		pass = pass && within(perBroker[i], limit, 0.03)
	}
	intact := slices.Equal(isrBefore, []int{3, 3, 3}) && slices.Equal(isrAfter, []int{3, 3, 3})
	pass = pass && intact && within(replicated, 2*brokersReceived, 0.10)
	record(t, Result{
		Name: "kafka-replication-exempt",
		Pass: pass,
		Measured: map[string]any{"producer_per_broker_bps": perBroker, "producer_total_bps": clientTotal,
			"brokers_received_from_clients_bps": brokersReceived, "replicated_to_followers_bps": replicated,
			"isr_before": isrBefore, "isr_after": isrAfter,
			"measured_at":   "client host's tcp_info per link (the producer); the brokers' listener sockets (replication to peers, client bytes received)",
			"producer_said": producerSaid(prod), "brokers": "3 × Apache Kafka " + harness.KafkaVersion + " (KRaft, RF 3, min.insync.replicas 2)"},
		Expected: map[string]any{"producer_per_broker_bps": limit, "tolerance": 0.03, "isr": []int{3, 3, 3},
			"replicated_to_followers_bps": "2 × what the brokers received from clients, ±10 % (exempt: never held)"},
	})
}
