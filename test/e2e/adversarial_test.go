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
// while a configured producer runs: the producer keeps its entity and its
// limit (it is not pushed out of the table into the unknown entity, which
// is held to H = 4 MB/s here).
func TestAdversarialSYNFlood(t *testing.T) {
	w := world(t, harness.Options{Topics: []string{"orders"}})
	const limit = 10e6
	a := start(t, w, harness.Config{ProduceCapacity: "40MB", Extra: fmt.Sprintf(`max_connections: 1024
entities:
  clients:
    steady: {producer_byte_rate: %d}
`, int(limit))})
	defer a.Stop()
	steady := client(t, w, harness.ClientSpec{Name: "steady", Lib: "franz", Mode: "produce", ClientID: "steady", Topic: "orders"})
	time.Sleep(3 * time.Second) // settle before the flood
	type flood struct {
		sent int
		err  error
	}
	done := make(chan flood, 1)
	go func() {
		n, err := w.SYNFlood(200*1024, 10*time.Second)
		done <- flood{n, err}
	}()
	rate, own := metered(t, w, 0, []*harness.Client{steady}, []harness.Ref{{Kind: "client", Name: "steady"}})
	f := <-done
	if f.err != nil {
		t.Fatal(f.err)
	}
	errs, ok := noErrors(steady)
	record(t, Result{
		Name: "syn-flood",
		Pass: within(rate[0], limit, 0.10) && f.sent >= 10*1024 && ok,
		Measured: map[string]any{"producer_bps": rate[0], "spoofed_syns_sent": f.sent, "connection_table_size": 1024, "measured_at": meteredAt,
			"sluice_vs_kernel": differences(rate, own), "client_errors": errs},
		Expected: map[string]any{"producer_bps": limit, "tolerance": 0.10, "spoofed_syns_min": 10 * 1024, "client_errors": 0},
	})
}
