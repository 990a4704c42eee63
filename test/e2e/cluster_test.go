package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/test/harness"
)

// Cluster budgets (#35 item 5): three broker hosts, each a namespace with
// its own NIC and agent, serving one kfake cluster; the tenant's producers
// write to partitions led 80/15/5 across the brokers (16, 3 and 1 of 20),
// asking 80/15/5 of twice its cluster limit. Judged by tcp_info at the
// clients (bytes the brokers acknowledged, per link).
const (
	clusterLimit       = 10e6
	clusterReservation = 5e6
	clusterTopic       = "history"
)

var (
	clusterLogs   = flag.String("cluster-logs", "", "the cluster budgets scenarios (producers, consumers): copy the agents' logs into this directory")
	clusterSeries = flag.String("cluster-series", "", "the cluster budgets scenario: write the meter's readings and the phases here (JSON), for docs/cluster-budgets.png")
)

// clusterRun is the world with the tenant's producers and the meter.
type clusterRun struct {
	t      *testing.T
	w      *harness.ClusterWorld
	meter  *harness.LinkMeter
	points []clusterPoint
	events []clusterEvent
}

// clusterEvent is a phase's start, for the plot.
type clusterEvent struct {
	At    time.Time `json:"-"`
	T     float64   `json:"t"` // seconds after the first reading
	Label string    `json:"label"`
}

// mark notes a phase starting now.
func (c *clusterRun) mark(label string) {
	c.events = append(c.events, clusterEvent{At: time.Now(), Label: label})
}

// writeSeries writes the readings (each broker's tenant bytes acknowledged
// so far, as the client host's sockets count them) and the phases, with
// times in seconds after the first reading.
func (c *clusterRun) writeSeries(path string) error {
	if len(c.points) == 0 {
		return nil
	}
	type point struct {
		T      float64   `json:"t"`
		Tenant [3]uint64 `json:"tenant_bytes"`
	}
	start := c.points[0].at
	out := struct {
		Limit       float64        `json:"limit"`
		Reservation float64        `json:"reservation"`
		Points      []point        `json:"points"`
		Events      []clusterEvent `json:"events"`
	}{Limit: clusterLimit, Reservation: clusterReservation}
	for _, p := range c.points {
		out.Points = append(out.Points, point{T: p.at.Sub(start).Seconds(), Tenant: p.tenant})
	}
	for _, e := range c.events {
		e.T = e.At.Sub(start).Seconds()
		out.Events = append(out.Events, e)
	}
	data, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// clusterPoint is one reading: per broker, the tenant's bytes and the other
// tenant's, acknowledged since the meter started.
type clusterPoint struct {
	at            time.Time
	tenant, other [3]uint64
}

func (c *clusterRun) read() clusterPoint {
	c.t.Helper()
	totals, at, err := c.meter.Read()
	if err != nil {
		c.t.Fatal(err)
	}
	p := clusterPoint{at: at}
	for i, b := range c.w.Brokers {
		p.tenant[i] = totals[harness.LinkKey{From: b.ClientIP, To: b.IP}].Acked
		p.other[i] = totals[harness.LinkKey{From: b.OtherIP, To: b.IP}].Acked
	}
	c.points = append(c.points, p)
	return p
}

// follow reads the meter every 200 ms for d.
func (c *clusterRun) follow(d time.Duration) {
	c.t.Helper()
	end := time.Now().Add(d)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(end) {
		<-tick.C // the readings are the measurement, taken as time passes
		c.read()
	}
}

// rates are the tenant's per-broker rates between two readings.
func rates(a, b clusterPoint) (tenant, other [3]float64) {
	secs := b.at.Sub(a.at).Seconds()
	for i := range 3 {
		tenant[i] = float64(b.tenant[i]-a.tenant[i]) / secs
		other[i] = float64(b.other[i]-a.other[i]) / secs
	}
	return
}

func sum3(v [3]float64) float64 { return v[0] + v[1] + v[2] }

// statuses asks every agent.
func (c *clusterRun) statuses() []*status.Snapshot {
	var out []*status.Snapshot
	for _, b := range c.w.Brokers {
		s, err := b.Status()
		if err != nil {
			c.t.Fatalf("status of broker %d: %v", b.ID, err)
		}
		out = append(out, s)
	}
	return out
}

// clusterSection is the scenarios' cluster section (lease 4 s, reports
// landing within 1 s) with one client entity.
func clusterSection(client string) string {
	return "  name: e2e\n  brokers: [0, 1, 2]\n  lease: 4s\n  max_delivery: 1s\n  entities:\n    clients:\n      " + client
}

// newClusterWorld builds the three-broker world with the data topic (20
// partitions); it is removed when the test ends.
func newClusterWorld(t *testing.T) *harness.ClusterWorld {
	t.Helper()
	w, err := harness.NewClusterWorld(t.TempDir(), bins.sluice, bins.loadgen, clusterTopic, 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	return w
}

func TestScenarioClusterBudgets(t *testing.T) {
	w := newClusterWorld(t)
	var err error
	defer func() {
		if *clusterLogs != "" {
			clients, _ := filepath.Glob(filepath.Join(w.Dir, "client-*.log"))
			for _, f := range clients {
				data, _ := os.ReadFile(f)
				os.WriteFile(filepath.Join(*clusterLogs, filepath.Base(f)), data, 0o644)
			}
			for _, b := range w.Brokers {
				if b.Agent != nil {
					data, _ := os.ReadFile(b.Agent.Log)
					os.WriteFile(filepath.Join(*clusterLogs, fmt.Sprintf("agent-b%d.log", b.ID)), data, 0o644)
				}
			}
		}
		if t.Failed() {
			for _, b := range w.Brokers {
				if b.Agent != nil {
					data, _ := os.ReadFile(b.Agent.Log)
					t.Logf("agent %d log (tail):\n%s", b.ID, tail(string(data), 3000))
				}
			}
		}
	}()
	// Leaders 16/3/1; the tenant's producers write partitions 0, 16 and 19.
	leadAs(t, w, [2]int32{16, 3})
	run := &clusterRun{t: t, w: w}
	defer func() {
		if *clusterSeries != "" {
			if err := run.writeSeries(*clusterSeries); err != nil {
				t.Error(err)
			}
		}
	}()
	// The tenant asks 80/15/5 of twice its limit, one producer per broker
	// (each writes one partition its broker leads).
	demand := [3]float64{0.8 * 2 * clusterLimit, 0.15 * 2 * clusterLimit, 0.05 * 2 * clusterLimit}
	partitionOf := [3]int{0, 16, 19}
	// Two client libraries: franz-go on brokers 0 and 2, librdkafka (kcat)
	// on broker 1, fed at its demand.
	var producers [3]*harness.Client
	for i := range w.Brokers {
		if i == 1 {
			producers[i] = clusterKcatProducer(t, w, "tenant-b1-kcat", "tenant", partitionOf[i], demand[i])
			continue
		}
		if producers[i], err = w.StartProducer(fmt.Sprintf("tenant-b%d", i), "tenant", partitionOf[i], demand[i], netip.Addr{}); err != nil {
			t.Fatal(err)
		}
	}
	if run.meter, err = w.NewLinkMeter(); err != nil {
		t.Fatal(err)
	}

	// The tenant's limit is kept where Kafka keeps it: its client-id's
	// producer_byte_rate in the quota store. Side by side, first: Kafka's
	// own semantics, that limit on every broker (imported per host, no
	// cluster section).
	if err := w.SetProducerQuota("tenant", clusterLimit); err != nil {
		t.Fatal(err)
	}
	for _, b := range w.Brokers {
		cfg := w.WriteAgentConfig(b, harness.ClusterAgentConfig{ProduceCapacity: "20MB",
			Extra: "kafka_quotas: import\nkeep_attached_on_exit: false\n"})
		if err := w.StartAgent(b, cfg); err != nil {
			t.Fatal(err)
		}
	}
	run.read()
	run.mark("Kafka's semantics: the limit per broker")
	run.follow(3 * time.Second)
	perBroker := run.window(4 * time.Second)
	kafkaWant := [3]float64{min(demand[0], clusterLimit), min(demand[1], clusterLimit), min(demand[2], clusterLimit)}

	// Then cluster budgets: every agent restarted with the cluster section,
	// whose limit for the tenant is Kafka's quota (a rate of "kafka").
	section := clusterSection(fmt.Sprintf("tenant: {producer_byte_rate: kafka, producer_byte_reservation: %v, topics: [%s]}", clusterReservation, clusterTopic))
	var configs [3]string
	for _, b := range w.Brokers {
		if err := b.Agent.Stop(); err != nil {
			t.Fatal(err)
		}
		if b.ID == 0 {
			run.mark("agents restart: cluster section")
		}
		configs[b.ID] = w.WriteAgentConfig(b, harness.ClusterAgentConfig{ProduceCapacity: "20MB", Cluster: section,
			Extra: "kafka_quotas: import\nentities: {clients: {other: {quota_weight: 20}}}\nkeep_attached_on_exit: false\n"})
		if err := w.StartAgent(b, configs[b.ID]); err != nil {
			t.Fatal(err)
		}
	}
	// The coordination topic's leader on broker 0, so that cutting broker 2
	// later cuts its agent from the topic.
	if err := w.MoveCoordinationLeader(0); err != nil {
		t.Fatal(err)
	}
	run.settle(30 * time.Second)
	run.follow(time.Second)
	perBrokerCluster := run.window(5 * time.Second)
	shares := run.shares()
	total := sum3(perBrokerCluster)
	record(t, Result{Name: "cluster budget: demand above the limit",
		Measured: map[string]any{"per_broker_mbps": mbps3(perBrokerCluster), "total_mbps": mb(total), "shares_mbps": mbps3(shares),
			"kafka_semantics_per_broker_mbps": mbps3(perBroker), "kafka_semantics_total_mbps": mb(sum3(perBroker)),
		},
		Expected: map[string]any{"shares_mbps": "sum = the limit",
			"total_mbps":                 fmt.Sprintf("%.1f ± 3 %%", mb(clusterLimit)),
			"kafka_semantics_total_mbps": fmt.Sprintf("min(demand, limit) per broker: %.1f", mb(sum3(kafkaWant)))},
		Pass: math.Abs(total-clusterLimit) <= 0.03*clusterLimit})
	// sluice's own account, checked beside the kernel's (not the figure the
	// scenario is judged by): the shares sum to the limit.
	if sum3(shares) > clusterLimit || sum3(shares) < clusterLimit-3 {
		t.Errorf("the agents' shares %v do not sum to the limit", shares)
	}

	// Contended: another tenant, weighted 20 to the tenant's 1 on every
	// host, floods broker 0. The tenant keeps at least 95 % of its cluster
	// reservation (5 MB/s, 4 of it reserved where 16 of its 20 partitions
	// lead).
	run.mark("contended on broker 0")
	other, err := w.StartProducer("other-b0", "other", 1, 25e6, w.Brokers[0].OtherIP)
	if err != nil {
		t.Fatal(err)
	}
	run.follow(2 * time.Second)
	contended := run.window(4 * time.Second)
	_, others := run.lastRates(4 * time.Second)
	otherRate := others[0]
	other.Stop()
	record(t, Result{Name: "cluster budget: reservation when contended",
		Measured: map[string]any{"tenant_per_broker_mbps": mbps3(contended), "tenant_total_mbps": mb(sum3(contended)), "other_on_broker_0_mbps": mb(otherRate)},
		Expected: map[string]any{"tenant_total_mbps": fmt.Sprintf("at least 95 %% of the reservation: %.2f", mb(0.95*clusterReservation))},
		Pass:     sum3(contended) >= 0.95*clusterReservation && otherRate > 0})

	// A demand shift: broker 0's client stops. Brokers 1 and 2, held to 1.5
	// and 0.5, may now have what they ask (3 and 1): 90 % of it within 3 s.
	// Measured from the stop signal: the producer flushes what it holds at
	// its share meanwhile, and Stop returns when it has.
	shifted := time.Now()
	run.mark("broker 0's client stops")
	stopped := make(chan struct{})
	go func() { producers[0].Stop(); close(stopped) }()
	defer func() { <-stopped }()
	shiftTimes := run.converge(shifted, 5*time.Second, [3]float64{0, 0.9 * demand[1], 0.9 * demand[2]})
	record(t, Result{Name: "cluster budget: demand shift",
		Measured: map[string]any{"seconds_to_90pct": shiftTimes, "shares_mbps": mbps3(run.shares())},
		Expected: map[string]any{"seconds_to_90pct": "at most 3 for brokers 1 and 2"},
		Pass:     shiftTimes[1] >= 0 && shiftTimes[1] <= 3 && shiftTimes[2] >= 0 && shiftTimes[2] <= 3})

	// A leader move: partition 16 (broker 1's client) moves to broker 2,
	// whose client then asks 4 MB/s: 90 % of its new fair share within 3 s.
	if err := w.MoveLeader(16, 2); err != nil {
		t.Fatal(err)
	}
	moved := time.Now()
	run.mark("leader move 1 -> 2")
	moveTimes := run.converge(moved, 5*time.Second, [3]float64{0, 0, 0.9 * (demand[1] + demand[2])})
	record(t, Result{Name: "cluster budget: leader move",
		Measured: map[string]any{"seconds_to_90pct": moveTimes, "shares_mbps": mbps3(run.shares())},
		Expected: map[string]any{"seconds_to_90pct": "at most 3 for broker 2"},
		Pass:     moveTimes[2] >= 0 && moveTimes[2] <= 3})

	// A host cut from the coordination topic (broker 2; the topic leads on
	// broker 0) while its clients still reach it, with broker 0's client
	// back. Broker 2 keeps its share for the lease (4 s), then takes the
	// even split (limit ÷ 3); the others reclaim its share after K of their
	// reports. Σ never exceeds the limit plus broker 2's fallback share.
	run.mark("broker 0's client again")
	if producers[0], err = w.StartProducer("tenant-b0-again", "tenant", partitionOf[0], demand[0], netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	run.settle(20 * time.Second)
	if err := w.Cut(w.Brokers[2]); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	run.mark("broker 2 cut from the topic")
	bound := clusterLimit + math.Floor(clusterLimit/3)
	var worst float64
	var fellBack, reclaimed float64 = -1, -1
	for time.Since(cut) < 20*time.Second && (fellBack < 0 || reclaimed < 0 || time.Since(cut) < 14*time.Second) {
		run.follow(time.Second)
		worst = max(worst, run.trailingTotal(time.Second))
		ss := run.statuses()
		if fellBack < 0 && ss[2].Cluster.Lease == "fallback" {
			fellBack = math.Round(time.Since(cut).Seconds()*10) / 10
		}
		if reclaimed < 0 && !budget(ss[0], tenantBudget).Brokers[2].Live {
			reclaimed = math.Round(time.Since(cut).Seconds()*10) / 10
		}
	}
	cutShares := run.shares()
	// The kernel's view of broker 2's fallback: its client asks 4 MB/s, its
	// share was above that before the cut; over the cut's last two seconds
	// it is held to the even split.
	lastCut, _ := run.lastRates(2 * time.Second)
	fallenB2 := lastCut[2]
	if err := w.Heal(w.Brokers[2]); err != nil {
		t.Fatal(err)
	}
	run.mark("healed")
	run.settle(30 * time.Second)
	healed := run.window(3 * time.Second)
	record(t, Result{Name: "cluster budget: a host cut from the topic",
		Measured: map[string]any{"fell_back_after_s": fellBack, "reclaimed_after_s": reclaimed, "largest_total_mbps_1s": mb(worst),
			"shares_while_cut_mbps": mbps3(cutShares), "total_after_heal_mbps": mb(sum3(healed)), "broker_2_client_last_2s_mbps": mb(fallenB2)},
		Expected: map[string]any{"fell_back_after_s": "the lease, 4 s (sluice's status, checked beside)", "reclaimed_after_s": "after the fallback (sluice's status, checked beside)",
			"broker_2_client_last_2s_mbps": fmt.Sprintf("at most the even split x 1.03 = %.2f", mb(1.03*math.Floor(clusterLimit/3))),
			"largest_total_mbps_1s":        fmt.Sprintf("at most (limit + limit/3) x 1.03 = %.2f", mb(bound*1.03)), "total_after_heal_mbps": fmt.Sprintf("at most %.2f", mb(1.03*clusterLimit))},
		Pass: fallenB2 <= 1.03*math.Floor(clusterLimit/3) && worst <= 1.03*bound && sum3(healed) <= 1.03*clusterLimit})
	if !(fellBack > 0 && fellBack < 6 && reclaimed > fellBack) {
		t.Errorf("status: broker 2 fell back after %v s, reclaimed after %v s (want the lease, then the reclaim)", fellBack, reclaimed)
	}

	// An agent killed (kill -9) and started again, its state file kept: its
	// data path holds the last share meanwhile (pins), the new agent takes
	// an epoch above the file's (the file's + 1, or the wall clock in ms if
	// higher: a replaced host with no file outranks its predecessor too),
	// reads the topic and acts again within a few cycles. Σ stays within
	// the limit throughout.
	b1 := w.Brokers[1]
	before, err := b1.Status()
	if err != nil {
		t.Fatal(err)
	}
	b1.Agent.Kill()
	killed := time.Now()
	run.mark("agent 1 killed, restarted")
	restarted := make(chan error, 1)
	go func() { restarted <- w.StartAgent(b1, configs[1]) }()
	var worstRestart float64
	back := -1.0
	for time.Since(killed) < 15*time.Second && back < 0 {
		run.follow(500 * time.Millisecond)
		worstRestart = max(worstRestart, run.trailingTotal(time.Second))
		if s, err := b1.Status(); err == nil && s.Cluster != nil && s.Cluster.Lease == "normal" && !s.Cluster.Rebuilding && s.Cluster.Epoch > before.Cluster.Epoch {
			back = math.Round(time.Since(killed).Seconds()*10) / 10
		}
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	after, _ := b1.Status()
	record(t, Result{Name: "cluster budget: an agent killed and restarted",
		Measured: map[string]any{"acting_again_after_s": back, "epoch_before": before.Cluster.Epoch, "epoch_after": after.Cluster.Epoch,
			"largest_total_mbps_1s": mb(worstRestart), "conflicts_seen": after.Cluster.Reports["conflict"]},
		Expected: map[string]any{"acting_again_after_s": "at most 6 (process start, one period reading the topic, a catch-up)", "epoch_after": "above epoch_before",
			"largest_total_mbps_1s": fmt.Sprintf("at most %.2f", mb(1.03*clusterLimit)), "conflicts_seen": 0},
		Pass: back > 0 && back <= 6 && after.Cluster.Epoch > before.Cluster.Epoch && worstRestart <= 1.03*clusterLimit && after.Cluster.Reports["conflict"] == 0})

	// The whole cluster out for the agents: the coordination topic takes no
	// writes. Every host keeps its share for the lease, then takes the even
	// split; while hosts fall back one by one Σ stays within the limit plus
	// the fallback shares of those that did (docs/cluster-budgets.md §5), and
	// once all have it is the limit.
	if err := w.CoordinationOutage(true); err != nil {
		t.Fatal(err)
	}
	out := time.Now()
	run.mark("topic refuses writes")
	var worstOutage float64
	allFell := -1.0
	for time.Since(out) < 12*time.Second && allFell < 0 {
		run.follow(time.Second)
		worstOutage = max(worstOutage, run.trailingTotal(time.Second))
		all := true
		for _, s := range run.statuses() {
			all = all && s.Cluster.Lease == "fallback"
		}
		if all {
			allFell = math.Round(time.Since(out).Seconds()*10) / 10
		}
	}
	run.follow(time.Second) // the shapers take the last fallback share
	fallen := run.window(3 * time.Second)
	fallbackShares := run.shares()
	if err := w.CoordinationOutage(false); err != nil {
		t.Fatal(err)
	}
	run.mark("writes again")
	run.settle(30 * time.Second)
	outageBound := clusterLimit + 2*math.Floor(clusterLimit/3)
	// Brokers 0 and 2 have clients (16 and 4 MB/s asked), broker 1 none:
	// once every host holds the even split they get at most a third each.
	fallenWant := 2 * math.Floor(clusterLimit/3)
	record(t, Result{Name: "cluster budget: the coordination topic out for every agent",
		Measured: map[string]any{"all_fell_back_after_s": allFell, "shares_mbps": mbps3(fallbackShares), "total_all_fallen_back_mbps": mb(sum3(fallen)),
			"largest_total_mbps_1s": mb(worstOutage)},
		Expected: map[string]any{"all_fell_back_after_s": "the lease, 4 s (sluice's status, checked beside)", "shares_mbps": "limit / 3 each (sluice's status, checked beside)",
			"total_all_fallen_back_mbps": fmt.Sprintf("two clients at the even split at most: %.2f", mb(1.03*fallenWant)),
			"largest_total_mbps_1s":      fmt.Sprintf("at most (limit + 2 x limit/3) x 1.03 = %.2f", mb(1.03*outageBound))},
		Pass: sum3(fallen) <= 1.03*fallenWant && worstOutage <= 1.03*outageBound})
	if !(allFell > 0 && allFell < 7 && sum3(fallbackShares) <= clusterLimit) {
		t.Errorf("status: all fell back after %v s with shares %v (want under 7 s, Σ at most the limit)", allFell, fallbackShares)
	}

	// Kafka's quota for the tenant altered in the quota store (what
	// kafka-configs.sh --alter does): 10 → 6 MB/s. Each agent reads it
	// within metadata_refresh (2 s); the first round that holds one host's
	// report of it splits 6 on every host. Σ never exceeds the old limit
	// meanwhile, and settles at the new one.
	const lowered = 6e6
	if err := w.SetProducerQuota("tenant", lowered); err != nil {
		t.Fatal(err)
	}
	altered := time.Now()
	run.mark("Kafka's quota 10 -> 6 MB/s")
	var worstAlter float64
	under := -1.0
	for time.Since(altered) < 9*time.Second {
		run.follow(500 * time.Millisecond)
		total := run.trailingTotal(time.Second)
		worstAlter = max(worstAlter, total)
		if under < 0 && total <= 1.03*lowered {
			under = math.Round(time.Since(altered).Seconds()*10) / 10
		}
	}
	alteredTotal := sum3(run.window(3 * time.Second))
	// Broker 1 has no client since the leader move; its reserved share
	// (the reservation over the 2 of 20 partitions it leads) stays its own,
	// unused: the clients may use the rest.
	idleReserved := clusterReservation * 2 / 20
	record(t, Result{Name: "cluster budget: Kafka's quota altered",
		Measured: map[string]any{"total_under_new_limit_after_s": under, "total_after_mbps": mb(alteredTotal), "largest_total_mbps_1s": mb(worstAlter),
			"shares_mbps": mbps3(run.shares())},
		Expected: map[string]any{"total_under_new_limit_after_s": "at most 7 (metadata_refresh 2 s, a report, a round, the 1 s window)",
			"total_after_mbps": fmt.Sprintf("at most %.2f (the new limit x 1.03), at least %.2f (x 0.97, less broker 1's idle reserved share)",
				mb(1.03*lowered), mb(0.97*(lowered-idleReserved))),
			"largest_total_mbps_1s": fmt.Sprintf("at most the old limit x 1.03 = %.2f", mb(1.03*clusterLimit))},
		Pass: under >= 0 && under <= 7 && alteredTotal <= 1.03*lowered && alteredTotal >= 0.97*(lowered-idleReserved) && worstAlter <= 1.03*clusterLimit})
	for i, s := range run.statuses() {
		if b := budget(s, tenantBudget); float64(b.Limit) != lowered || float64(b.HostLimit) != lowered || b.LimitFrom != "kafka quota store" {
			t.Errorf("status of broker %d: limit %v (this host reads %v, from %q), want %v from Kafka's quota store", i, b.Limit, b.HostLimit, b.LimitFrom, lowered)
		}
	}
}

// clusterKcatProducer runs kcat (librdkafka) in the client host as a
// producer to one partition of the data topic, fed records at rate bytes/s
// (its demand). librdkafka's queue is bounded to 4 MiB: held back, it
// queues at most that, and its feed waits.
func clusterKcatProducer(t *testing.T, w *harness.ClusterWorld, name, clientID string, partition int, rate float64) *harness.Client {
	t.Helper()
	return startKcat(t, w.StartCommand, w.Dir, name, rate, "-b", w.Brokers[0].Addr(), "-t", w.DataTopic, "-p", fmt.Sprint(partition),
		"-X", "client.id="+clientID)
}

// leadAs makes the data topic's first lead[0] partitions lead on broker 0,
// the next lead[1] on broker 1 and the rest on broker 2.
func leadAs(t *testing.T, w *harness.ClusterWorld, lead [2]int32) {
	t.Helper()
	for p := int32(0); p < 20; p++ {
		leader := int32(2)
		switch {
		case p < lead[0]:
			leader = 0
		case p < lead[0]+lead[1]:
			leader = 1
		}
		if err := w.MoveLeader(p, leader); err != nil {
			t.Fatal(err)
		}
	}
}

// lastRates are both tenants' per-broker rates over the last d of readings.
func (c *clusterRun) lastRates(d time.Duration) (tenant, other [3]float64) {
	last := c.points[len(c.points)-1]
	k := len(c.points) - 1
	for k > 0 && last.at.Sub(c.points[k].at) < d {
		k--
	}
	return rates(c.points[k], last)
}

// converge follows the meter for at most d after at, and returns for each
// broker the seconds from at to the start of the first second-long window
// over which its tenant's rate averaged want or more (0 for want 0; -1 if
// none did): from then on it had what it was given.
func (c *clusterRun) converge(at time.Time, d time.Duration, want [3]float64) [3]float64 {
	c.t.Helper()
	out := [3]float64{-1, -1, -1}
	for i := range 3 {
		if want[i] == 0 {
			out[i] = 0
		}
	}
	c.follow(d)
	first := len(c.points) - 1
	for first > 0 && !c.points[first-1].at.Before(at) {
		first-- // the first reading at or after the event
	}
	for i := range 3 {
		for k := first; k < len(c.points) && out[i] < 0; k++ {
			end := k
			for end < len(c.points) && c.points[end].at.Sub(c.points[k].at) < time.Second {
				end++
			}
			if end == len(c.points) {
				break
			}
			if r, _ := rates(c.points[k], c.points[end]); r[i] >= want[i] {
				out[i] = math.Round(max(0, c.points[k].at.Sub(at).Seconds())*10) / 10
			}
		}
	}
	return out
}

// window follows the meter for d and returns the tenant's per-broker rates
// over it.
func (c *clusterRun) window(d time.Duration) [3]float64 {
	c.t.Helper()
	from := c.read()
	c.follow(d)
	r, _ := rates(from, c.points[len(c.points)-1])
	return r
}

// settle waits until every agent is in normal standing and applies its
// round's target.
func (c *clusterRun) settle(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c.follow(500 * time.Millisecond)
		ok := true
		for _, s := range c.statuses() {
			cl := s.Cluster
			ok = ok && cl != nil && cl.Lease == "normal" && !cl.Rebuilding && budget(s, tenantBudget).Target > 0
			for _, b := range cl.Budgets {
				ok = ok && b.Share == b.Target
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the agents did not settle on their targets in %v: %v", timeout, clusterShares(c.statuses()))
		}
	}
}

// The scenario's budgets, as status names them.
const (
	tenantBudget = "client:produce:tenant"
)

// budget is the agent's view of budget id (zero if it has none).
func budget(s *status.Snapshot, id string) status.ClusterBudgetView {
	if s.Cluster != nil {
		for _, b := range s.Cluster.Budgets {
			if b.ID == id {
				return b
			}
		}
	}
	return status.ClusterBudgetView{}
}

// shares are the agents' applied shares of the tenant's budget.
func (c *clusterRun) shares() [3]float64 {
	var out [3]float64
	for i, s := range c.statuses() {
		out[i] = float64(budget(s, tenantBudget).Share)
	}
	return out
}

func mb(v float64) float64 { return math.Round(v/1e4) / 100 }

func mbps3(v [3]float64) [3]float64 {
	return [3]float64{math.Round(v[0]/1e4) / 100, math.Round(v[1]/1e4) / 100, math.Round(v[2]/1e4) / 100}
}

// clusterShares is each agent's share and target of the budget, MB/s.
func clusterShares(ss []*status.Snapshot) []string {
	var out []string
	for i, s := range ss {
		if budget(s, tenantBudget).ID == "" {
			out = append(out, fmt.Sprintf("b%d: none", i))
			continue
		}
		b := budget(s, tenantBudget)
		out = append(out, fmt.Sprintf("b%d %s: share %.2f target %.2f (%s)", i, s.Cluster.Lease, float64(b.Share)/1e6, float64(b.Target)/1e6, b.Why))
	}
	return out
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// trailingTotal is the tenant's total rate over the last d of readings.
func (c *clusterRun) trailingTotal(d time.Duration) float64 {
	r, _ := c.lastRates(d)
	return sum3(r)
}
