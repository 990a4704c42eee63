package e2e

// The adversarial suite (`make adversarial`, run by `make test`): clients
// that lie about who they are, reuse 4-tuples, or flood the broker with
// spoofed SYNs. Every rate that decides a pass comes from the kernel's
// broker-side sockets (the socket meter), never from sluice.

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/test/harness"
)

// A limit every unconfigured client gets in these scenarios: far below C
// (36 MB/s) and far from H (4 MB/s), so held, unheld and unknown differ.
const hostileLimit = 5e6

// Clients that claim to be replication from a peer that is not in
// exempt_peers, and a producer to a user topic named like an internal one,
// are held to the limit their client-id gets like anyone else; a real
// exempt peer is never held.
func TestAdversarialForgedReplication(t *testing.T) {
	w := world(t, harness.Options{Topics: []string{"orders", "__mine", "events"}})
	a := start(t, w, harness.Config{ProduceCapacity: "40MB", FetchCapacity: "40MB", Extra: fmt.Sprintf(`entities:
  clients:
    default: {producer_byte_rate: %d, consumer_byte_rate: %d}
`, int(hostileLimit), int(hostileLimit))})
	defer a.Stop()
	fetcherID := client(t, w, harness.ClientSpec{Name: "forged-fetcher-client-id", Lib: "franz", Mode: "produce", ClientID: "broker-0-fetcher-0", Topic: "orders"})
	mine := client(t, w, harness.ClientSpec{Name: "user-topic-__mine", Lib: "franz", Mode: "produce", ClientID: "mine-producer", Topic: "__mine"})
	replica := client(t, w, harness.ClientSpec{Name: "forged-replica-id", Lib: "raw", Mode: "consume", ClientID: "sneaky-follower", Topic: "events",
		Args: []string{"-replica-id", "1"}})
	produce, ownProduce := metered(t, w, 0, []*harness.Client{fetcherID, mine},
		[]harness.Ref{{Kind: "client", Name: "broker-0-fetcher-0"}, {Kind: "client", Name: "mine-producer"}})
	fetch, ownFetch := metered(t, w, 1, []*harness.Client{replica}, []harness.Ref{{Kind: "client", Name: "sneaky-follower"}})
	claims := 0.0
	if s, err := w.Status(); err == nil {
		claims = float64(s.Learner.ReplicationClaims)
	}
	for i, c := range []struct {
		name string
		rate float64
		own  []float64
	}{{"forged-fetcher-client-id", produce[0], ownProduce[:min(len(ownProduce), 1)]},
		{"user-topic-__mine", produce[1], ownProduce[min(len(ownProduce), 1):]},
		{"forged-replica-id", fetch[0], ownFetch}} {
		errs, _ := noErrors([]*harness.Client{fetcherID, mine, replica}[i])
		record(t, Result{
			Name: c.name,
			Pass: within(c.rate, hostileLimit, 0.10),
			Measured: map[string]any{"rate_bps": c.rate, "measured_at": meteredAt, "sluice_vs_kernel": differences([]float64{c.rate}, c.own),
				"client_errors": errs, "replication_claims_ignored": claims},
			Expected: map[string]any{"rate_bps": hostileLimit, "tolerance": 0.10},
		})
	}

	// The same producer from a peer that is in exempt_peers: never held.
	ew := world(t, harness.Options{Topics: []string{"orders"}})
	b := start(t, ew, harness.Config{ProduceCapacity: "40MB", FetchCapacity: "40MB", Extra: fmt.Sprintf(`exempt_peers: [%s/32]
entities:
  clients:
    default: {producer_byte_rate: %d}
`, ew.Pair.ClientIP, int(hostileLimit))})
	defer b.Stop()
	broker := client(t, ew, harness.ClientSpec{Name: "exempt-peer", Lib: "franz", Mode: "produce", ClientID: "broker-1-fetcher-0", Topic: "orders"})
	rate, _ := metered(t, ew, 0, []*harness.Client{broker}, nil)
	record(t, Result{
		Name:     "exempt-peer-never-held",
		Pass:     rate[0] >= 4*hostileLimit,
		Measured: map[string]any{"rate_bps": rate[0], "measured_at": meteredAt},
		Expected: map[string]any{"rate_min_bps": 4 * hostileLimit, "why": "4× the limit it would get if governed"},
	})
}

// A connection closed (RST) and opened again on the same 4-tuple by another
// client-id is the new client's: it inherits neither the old entity nor
// what the learner knew of it.
func TestAdversarialFourTupleReuse(t *testing.T) {
	w := world(t, harness.Options{Topics: []string{"orders"}})
	const oldLimit, newLimit = 5e6, 15e6
	a := start(t, w, harness.Config{ProduceCapacity: "40MB", Extra: fmt.Sprintf(`entities:
  clients:
    tenant-old: {producer_byte_rate: %d}
    tenant-new: {producer_byte_rate: %d}
`, int(oldLimit), int(newLimit))})
	defer a.Stop()
	port := []string{"-local-port", "41000"}
	old := client(t, w, harness.ClientSpec{Name: "tenant-old", Lib: "raw", Mode: "produce", ClientID: "tenant-old", Topic: "orders", Args: port})
	before, _ := metered(t, w, 0, []*harness.Client{old}, nil)
	old.Stop() // closes with an RST: the 4-tuple is free at once
	reused := client(t, w, harness.ClientSpec{Name: "tenant-new", Lib: "raw", Mode: "produce", ClientID: "tenant-new", Topic: "orders", Args: port})
	after, own := metered(t, w, 0, []*harness.Client{reused}, []harness.Ref{{Kind: "client", Name: "tenant-new"}})
	errs, ok := noErrors(reused)
	record(t, Result{
		Name: "four-tuple-reuse",
		Pass: within(before[0], oldLimit, 0.10) && within(after[0], newLimit, 0.10) && ok,
		Measured: map[string]any{"old_client_bps": before[0], "new_client_bps": after[0], "local_port": 41000, "measured_at": meteredAt,
			"sluice_vs_kernel": differences(after, own), "client_errors": errs},
		Expected: map[string]any{"old_client_bps": oldLimit, "new_client_bps": newLimit, "tolerance": 0.10, "client_errors": 0},
	})
}

// A flood of spoofed SYNs, two hundred times the connection table's size,
// while a configured producer's connection is idle (it stays open): when
// the producer resumes it still has its entity and its limit, not the
// unknown entity's H = 4 MB/s. (Busy connections survive a flood in an LRU
// table anyway; an idle one is what a flood used to push out.)
func TestAdversarialSYNFlood(t *testing.T) {
	w := world(t, harness.Options{Topics: []string{"orders"}})
	const limit = 10e6
	a := start(t, w, harness.Config{ProduceCapacity: "40MB", Extra: fmt.Sprintf(`max_connections: 1024
entities:
  clients:
    steady: {producer_byte_rate: %d}
`, int(limit))})
	defer a.Stop()
	began := time.Now()
	steady := client(t, w, harness.ClientSpec{Name: "steady", Lib: "franz", Mode: "produce", ClientID: "steady", Topic: "orders",
		Args: []string{"-idle-after", "3s", "-idle-for", "9s"}})
	time.Sleep(time.Until(began.Add(4 * time.Second))) // the producer is idle from 3 s to 12 s
	sent, err := w.SYNFlood(200*1024, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// What the flood left in the table, read from the kernel: only the few
	// real connections (an earlier data path entered every SYN and filled it).
	entries, err := w.ConnectionEntries()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(began.Add(11 * time.Second))) // metered settles 3 s: it measures 14-19 s
	rate, own := metered(t, w, 0, []*harness.Client{steady}, []harness.Ref{{Kind: "client", Name: "steady"}})
	errs, ok := noErrors(steady)
	record(t, Result{
		Name: "syn-flood",
		Pass: within(rate[0], limit, 0.10) && sent >= 10*1024 && entries <= 16 && ok,
		Measured: map[string]any{"producer_after_flood_bps": rate[0], "spoofed_syns_sent": sent, "connection_table_size": 1024,
			"table_entries_after_flood": entries, "measured_at": meteredAt,
			"sluice_vs_kernel": differences(rate, own), "client_errors": errs},
		Expected: map[string]any{"producer_after_flood_bps": limit, "tolerance": 0.10, "spoofed_syns_min": 10 * 1024,
			"table_entries_after_flood_max": 16, "client_errors": 0},
	})
}

// Connection churn: 200 connections a second opened, used (ApiVersions
// and Metadata) and closed, for two minutes. The connection table (read
// from the kernel through its pins), the learner's per-connection state
// and the agent's RSS (from /proc) stay flat: nothing a connection leaves
// behind outlives it by more than a scan, and RSS after the first minute
// (the Go heap's warm-up) stays within 20 % of its level then.
func TestAdversarialConnectionChurn(t *testing.T) {
	w := world(t, harness.Options{Topics: []string{"orders"}})
	a := start(t, w, harness.Config{ProduceCapacity: "40MB", FetchCapacity: "40MB"})
	defer a.Stop()
	const perSecond, run, step = 200, 120 * time.Second, 15 * time.Second
	churn := client(t, w, harness.ClientSpec{Name: "churn", Lib: "raw", Mode: "churn", ClientID: "churner", Topic: "orders", Rate: perSecond})
	type sample struct {
		AtSeconds      float64 `json:"at_s"`
		TableEntries   int     `json:"table_entries"`
		LearnerStates  int     `json:"learner_states"`
		RSSBytes       int64   `json:"rss_bytes"`
		ConnectionsRun int64   `json:"connections_completed"`
	}
	var series []sample
	began := time.Now()
	for at := step; at <= run; at += step {
		time.Sleep(time.Until(began.Add(at))) // the next step of the series
		entries, err := w.ConnectionEntries()
		if err != nil {
			t.Fatal(err)
		}
		rss, err := a.RSS()
		if err != nil {
			t.Fatal(err)
		}
		s := sample{AtSeconds: at.Seconds(), TableEntries: entries, RSSBytes: rss, ConnectionsRun: churn.Moved()}
		if st, err := w.Status(); err == nil {
			s.LearnerStates = st.Learner.Connections
		}
		series = append(series, s)
	}
	churn.Stop()
	// Bounds: a closed connection stays until the next scan (10 s), so the
	// table holds at most about 20 s of churn.
	bound := perSecond * 20
	pass := churn.Moved() >= int64(0.8*perSecond*run.Seconds())
	base := series[3].RSSBytes // at 60 s
	var most int64
	for i, s := range series {
		pass = pass && s.TableEntries <= bound && s.LearnerStates <= bound
		if i >= 3 {
			most = max(most, s.RSSBytes)
		}
	}
	pass = pass && float64(most) <= 1.2*float64(base)
	record(t, Result{
		Name:     "connection-churn",
		Pass:     pass,
		Measured: map[string]any{"series": series, "connections_completed": churn.Moved(), "rss_growth_after_60s": float64(most)/float64(base) - 1},
		Expected: map[string]any{"connections_min": int64(0.8 * perSecond * run.Seconds()), "table_entries_max": bound, "learner_states_max": bound,
			"rss_growth_after_60s_max": 0.2},
	})
}
