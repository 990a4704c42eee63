package e2e

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/test/harness"
)

// Cluster budgets for consumers (#35 item 5, the fetch direction): a
// tenant's franz-go consumers read history from brokers 0 and 1 (8 MB/s
// asked from each) under a consumer_byte_rate of 6 MB/s, first as Kafka
// applies it (on every broker), then as one cluster budget. The harness
// answers the data topic's Fetch from a canned batch (a topic with no
// end), by the partition's leader only. Judged by the bytes the client
// host's sockets received on the reader's links (tcp_info bytes_received);
// the consumers' own counts go beside as diagnostics.
const readerLimit = 6e6

func TestScenarioClusterBudgetConsumers(t *testing.T) {
	w := newClusterWorld(t)
	defer func() {
		if *clusterLogs != "" {
			for _, b := range w.Brokers {
				if b.Agent != nil {
					data, _ := os.ReadFile(b.Agent.Log)
					os.WriteFile(filepath.Join(*clusterLogs, fmt.Sprintf("consumers-agent-b%d.log", b.ID)), data, 0o644)
				}
			}
		}
	}()
	// Leaders 16/2/2: the reader reads partition 2 (broker 0) and 17
	// (broker 1).
	leadAs(t, w, [2]int32{16, 2})
	meter, err := w.NewLinkMeter()
	if err != nil {
		t.Fatal(err)
	}
	// received is the reader's bytes per broker so far.
	received := func() ([3]float64, time.Time) {
		totals, at, err := meter.Read()
		if err != nil {
			t.Fatal(err)
		}
		var out [3]float64
		for i, b := range w.Brokers {
			out[i] = float64(totals[harness.LinkKey{From: b.OtherIP, To: b.IP}].Received)
		}
		return out, at
	}
	var consumers []*harness.Client
	// flowing waits (at most 15 s) until both consumers have read over the
	// last second at least 90 % of what each may read (per: the reader's
	// per-broker limit; 0: its cluster shares as the agents hold them,
	// settled: the same for three readings in a row, every agent in normal
	// standing and on its round's target).
	flowing := func(per float64) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		var last [3]float64
		steady := 0
		prev, at := received()
		for time.Now().Before(deadline) {
			time.Sleep(500 * time.Millisecond) // the readings are the measurement, taken as time passes
			now, t1 := received()
			want := [3]float64{per, per, 0}
			settled := true
			if per == 0 {
				for i, b := range w.Brokers {
					s, err := b.Status()
					if err != nil {
						t.Fatal(err)
					}
					rb := budget(s, "client:fetch:reader")
					want[i] = float64(rb.Share)
					settled = settled && s.Cluster.Lease == "normal" && !s.Cluster.Rebuilding && rb.Share == rb.Target
				}
				if want == last {
					steady++
				} else {
					steady = 0
				}
				last = want
				settled = settled && steady >= 3
			}
			if t1.Sub(at) >= time.Second {
				ok := settled
				for i := range 2 {
					ok = ok && (now[i]-prev[i])/t1.Sub(at).Seconds() >= 0.9*want[i]
				}
				if ok {
					return
				}
				prev, at = now, t1
			}
		}
		t.Logf("the consumers were not at 90 %% of what they may read within 15 s; measuring anyway")
	}
	// measure returns the reader's per-broker rates over window and the
	// consumers' own counts over it.
	measure := func(window time.Duration) ([3]float64, []string) {
		t.Helper()
		from, t0 := received()
		moved := make([]int64, len(consumers))
		for i, c := range consumers {
			moved[i] = c.Moved()
		}
		deadline := time.Now().Add(window)
		for time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			received() // a reading every 100 ms keeps connections that close counted
		}
		to, t1 := received()
		var rates [3]float64
		for i := range 3 {
			rates[i] = (to[i] - from[i]) / t1.Sub(t0).Seconds()
		}
		var own []string
		for i, c := range consumers {
			own = append(own, fmt.Sprintf("%s: %.2f MB/s read, %d errors", c.Name, float64(c.Moved()-moved[i])/t1.Sub(t0).Seconds()/1e6, c.Errors()))
		}
		return rates, own
	}

	// Kafka's semantics: the limit on every broker.
	start := func(b *harness.BrokerHost, cfg harness.ClusterAgentConfig) {
		if err := w.StartAgent(b, w.WriteAgentConfig(b, cfg)); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range w.Brokers {
		start(b, harness.ClusterAgentConfig{ProduceCapacity: "20MB", FetchCapacity: "20MB",
			Extra: fmt.Sprintf("entities: {clients: {reader: {consumer_byte_rate: %v}}}\nkeep_attached_on_exit: false\n", readerLimit)})
	}
	for i, p := range []int{2, 17} {
		c, err := w.StartConsumer(fmt.Sprintf("reader-b%d", i), "reader", p, 8e6, w.Brokers[i].OtherIP)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		consumers = append(consumers, c)
	}
	flowing(readerLimit)
	perBroker, perBrokerOwn := measure(5 * time.Second)

	// One cluster budget: the agents restarted with the cluster section.
	section := clusterSection(fmt.Sprintf("reader: {consumer_byte_rate: %v, topics: [%s]}", readerLimit, clusterTopic))
	for _, b := range w.Brokers {
		if err := b.Agent.Stop(); err != nil {
			t.Fatal(err)
		}
		start(b, harness.ClusterAgentConfig{ProduceCapacity: "20MB", FetchCapacity: "20MB", Cluster: section, Extra: "keep_attached_on_exit: false\n"})
	}
	if err := w.MoveCoordinationLeader(0); err != nil {
		t.Fatal(err)
	}
	flowing(0)
	cluster, clusterOwn := measure(5 * time.Second)
	var shares [3]float64
	for i, b := range w.Brokers {
		s, err := b.Status()
		if err != nil {
			t.Fatal(err)
		}
		shares[i] = float64(budget(s, "client:fetch:reader").Share)
	}
	record(t, Result{Name: "cluster budget: consumers",
		Measured: map[string]any{"per_broker_mbps": mbps3(cluster), "total_mbps": mb(sum3(cluster)), "shares_mbps": mbps3(shares),
			"consumers_own_count":             clusterOwn,
			"kafka_semantics_per_broker_mbps": mbps3(perBroker), "kafka_semantics_total_mbps": mb(sum3(perBroker)), "kafka_semantics_own_count": perBrokerOwn},
		Expected: map[string]any{"total_mbps": fmt.Sprintf("%.1f ± 3 %%", mb(readerLimit)),
			"kafka_semantics_total_mbps": fmt.Sprintf("the limit on each broker: up to %.1f", mb(2*readerLimit))},
		Pass: math.Abs(sum3(cluster)-readerLimit) <= 0.03*readerLimit})
	if sum3(shares) > readerLimit {
		t.Errorf("the agents' shares %v sum above the limit", shares)
	}
}
