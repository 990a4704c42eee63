package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/daemon"
)

type statusAgent struct{ snap *status.Snapshot }

func (s statusAgent) Snapshot() *status.Snapshot { return s.snap }
func (statusAgent) Connections(netip.Addr) ([]status.ConnectionView, error) {
	return nil, nil
}
func (statusAgent) Reload() (status.ReloadResult, error) {
	return status.ReloadResult{}, errors.New("no")
}

// serveStatus runs a status socket answering with snap.
func serveStatus(t *testing.T, snap *status.Snapshot) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "status.sock")
	l, err := status.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	go status.Serve(l, statusAgent{snap})
	t.Cleanup(func() { l.Close() })
	return sock
}

// `sluice status` prints the agent's snapshot as text or as the socket's
// JSON, says a refused reload and one that could not be undone apart, and
// exits 1 with no agent to ask and 2 on a bad flag.
func TestStatusCommand(t *testing.T) {
	at := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)
	snap := &status.Snapshot{Cycle: 42, Time: at, Mode: "enforce", Shaper: "htb", ShaperReason: "auto",
		Directions: [2]status.DirectionView{{Direction: "produce", Enabled: true, Capacity: 40e6}, {Direction: "fetch"}},
		LastReload: &status.ReloadResult{At: at, Why: "sluice reload", Error: "exempt peers: no memory", PartlyApplied: true}}
	sock := serveStatus(t, snap)
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"status", "--socket", sock}, &out, &errOut); err != nil {
		t.Fatalf("status: %v %s", err, errOut.String())
	}
	for _, want := range []string{"cycle 42", "mode enforce", "shaper htb (auto)", "REFUSED and NOT fully undone, the running state differs from before: exempt peers: no memory"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text status lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"status", "--socket", sock, "-o", "json"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	var got status.Snapshot
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || got.Cycle != 42 || got.LastReload == nil || !got.LastReload.PartlyApplied {
		t.Errorf("json status: %+v %v\n%s", got, err, out.String())
	}
	snap.LastReload = &status.ReloadResult{At: at, Why: "SIGHUP", Error: "produce.capacity: bad"}
	out.Reset()
	run(context.Background(), []string{"status", "--socket", sock}, &out, &errOut)
	if !strings.Contains(out.String(), "REFUSED, the running configuration stays: produce.capacity: bad") {
		t.Errorf("a refused reload:\n%s", out.String())
	}
	err := run(context.Background(), []string{"status", "--socket", filepath.Join(t.TempDir(), "none.sock")}, &out, &errOut)
	if exitStatus(err) != 1 || !strings.Contains(err.Error(), "is the agent running") {
		t.Errorf("no agent: %v (exit %d), want exit 1 asking whether the agent runs", err, exitStatus(err))
	}
	if err := run(context.Background(), []string{"status", "--bogus"}, &out, &errOut); exitStatus(err) != 2 {
		t.Errorf("a bad flag: %v (exit %d), want 2", err, exitStatus(err))
	}
}

// `sluice status --wait` waits for an agent that answers with a completed
// cycle: it returns once the socket appears and the first cycle is done,
// and exits 1 naming the socket when none comes in time.
func TestStatusWait(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "status.sock")
	snap := &status.Snapshot{Cycle: 0, Mode: "enforce", Shaper: "htb"}
	agent := &cycling{snap: snap}
	go func() {
		time.Sleep(300 * time.Millisecond) // the agent starts after the command: what --wait is for
		l, err := status.Listen(sock)
		if err != nil {
			return
		}
		t.Cleanup(func() { l.Close() })
		go status.Serve(l, agent)
		time.Sleep(300 * time.Millisecond) // its first cycle completes later still
		agent.setCycle(1)
	}()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"status", "--socket", sock, "--wait", "20s"}, &out, &errOut); err != nil {
		t.Fatalf("status --wait: %v %s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "cycle 1") {
		t.Errorf("status --wait returned before the first cycle:\n%s", out.String())
	}
	err := run(context.Background(), []string{"status", "--socket", filepath.Join(dir, "none.sock"), "--wait", "400ms"}, &out, &errOut)
	if exitStatus(err) != 1 || !strings.Contains(err.Error(), "no ready agent at") {
		t.Errorf("no agent within --wait: %v (exit %d)", err, exitStatus(err))
	}
	if err := run(context.Background(), []string{"status", "--wait", "-1s"}, &out, &errOut); exitStatus(err) != 2 {
		t.Errorf("--wait -1s: %v, want a usage error", err)
	}
}

// cycling is a status agent whose cycle count moves.
type cycling struct {
	mu   sync.Mutex
	snap *status.Snapshot
}

func (c *cycling) setCycle(n uint64) { c.mu.Lock(); c.snap.Cycle = n; c.mu.Unlock() }
func (c *cycling) Snapshot() *status.Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := *c.snap
	return &s
}
func (*cycling) Connections(netip.Addr) ([]status.ConnectionView, error) { return nil, nil }
func (*cycling) Reload() (status.ReloadResult, error)                    { return status.ReloadResult{}, errors.New("no") }

// `sluice run` with a file it refuses exits 78 (the unit's
// RestartPreventExitStatus), before it touches the host, and so does a
// file that is not there (a restart cannot make one); a bad flag is 2.
func TestRunCommandExitStatus(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("interfaces: [eth0]\nproduce: {capacity: .nan}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"run", "--config", bad}, &out, &errOut)
	if !errors.Is(err, daemon.ErrRefused) || exitStatus(err) != daemon.ExitRefused || !strings.Contains(err.Error(), "produce.capacity") {
		t.Errorf("an invalid file: %v (exit %d), want %d naming produce.capacity", err, exitStatus(err), daemon.ExitRefused)
	}
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	errOut.Reset()
	err = run(context.Background(), []string{"run", "--config", missing}, &out, &errOut)
	if !errors.Is(err, daemon.ErrRefused) || exitStatus(err) != daemon.ExitRefused {
		t.Errorf("a missing file: %v (exit %d), want %d", err, exitStatus(err), daemon.ExitRefused)
	}
	if want := "sluice: refused (not restarted): " + missing + ": read configuration: open " + missing + ": no such file or directory: restore it"; !strings.HasPrefix(errOut.String(), want) ||
		strings.Count(errOut.String(), "\n") != 1 {
		t.Errorf("a missing file logged %q, want one line starting %q", errOut.String(), want)
	}
	if err := run(context.Background(), []string{"run", "--bogus"}, &out, &errOut); exitStatus(err) != 2 {
		t.Errorf("a bad flag: %v (exit %d), want 2", err, exitStatus(err))
	}
}

// `sluice explain` says an entity's request latency at the NIC per API,
// fetch marked as time to first byte.
func TestExplainShowsLatency(t *testing.T) {
	e := status.EntityView{ID: 5, Kind: "client", Name: "core", State: "standby",
		Latency: []status.LatencyView{{API: "produce", P50Millis: 3.1, P99Millis: 8.25, Requests: 42, P50MinuteMillis: 3, P99MinuteMillis: 9, RequestsMinute: 250},
			{API: "fetch", P50Millis: 500, P99Millis: 501, Requests: 2, RequestsMinute: 12}}}
	snap := &status.Snapshot{Cycle: 3, Mode: "enforce", Shaper: "htb",
		Directions: [2]status.DirectionView{{Direction: "produce", Enabled: true, Entities: []status.EntityView{e}}, {Direction: "fetch"}}}
	sock := serveStatus(t, snap)
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"explain", "--socket", sock, "core"}, &out, &errOut); err != nil {
		t.Fatalf("explain: %v %s", err, errOut.String())
	}
	for _, want := range []string{"latency produce p50 3.1 ms, p99 8.2 ms over 10 s (42 requests); p50 3.0 ms, p99 9.0 ms over 1 min (250)",
		"latency fetch   p50 500.0 ms", "includes the broker's long-poll wait"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("explain lacks %q:\n%s", want, out.String())
		}
	}
}

// status lists the latency objectives; explain says whose objective holds
// an entity's limit.
func TestStatusShowsObjectives(t *testing.T) {
	e := status.EntityView{ID: 6, Kind: "client", Name: "bulk", State: "active", DynamicLimit: 4e6, HeldBy: "core's produce latency objective (p99 50ms)"}
	snap := &status.Snapshot{Cycle: 3, Mode: "enforce", Shaper: "htb",
		Objectives: []status.ObjectiveView{{Entity: "client:core", Direction: "produce", ObjectiveMillis: 50, P99Millis: 210, Requests: 300, State: "open", Level: 0.64, Why: "p99 210ms still over 50ms"}},
		Directions: [2]status.DirectionView{{Direction: "produce", Enabled: true, Entities: []status.EntityView{e}}, {Direction: "fetch"}}}
	sock := serveStatus(t, snap)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"status", "--socket", sock}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "latency objective client:core produce p99 50 ms: open, p99 210.0 ms over 10 s (300 requests), best-effort held to 0.64") {
		t.Errorf("status:\n%s", out.String())
	}
	// Holding the other direction, it says which.
	snap.Objectives[0].Trims = "fetch"
	out.Reset()
	if err := run(context.Background(), []string{"status", "--socket", serveStatus(t, snap)}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "(300 requests), best-effort fetch held to 0.64") {
		t.Errorf("status, holding fetch:\n%s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"explain", "--socket", sock, "bulk"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "then held to 3.815MiB/s by core's produce latency objective (p99 50ms)") {
		t.Errorf("explain:\n%s", out.String())
	}
}

func TestStatusShowsClusterBudgets(t *testing.T) {
	snap := &status.Snapshot{Cycle: 9, Mode: "enforce", Shaper: "htb",
		Directions: [2]status.DirectionView{{Direction: "produce"}, {Direction: "fetch"}},
		Cluster: &status.ClusterView{Name: "prod", Broker: 2, Mode: "shadow", Lease: "fallback", Epoch: 4, Round: 77, Processed: 76,
			Published: 12, Withheld: 1, Reports: map[string]uint64{"accepted": 30, "fenced": 2},
			Topic: status.ClusterTopicView{Name: "__sluice_cluster_budgets", CaughtUp: true, Delivered: 33, LastError: "NOT_LEADER"},
			Budgets: []status.ClusterBudgetView{{ID: "client:fetch:backfill", Kind: "client", Name: "backfill", Direction: "fetch",
				Limit: 30 << 20, Reservation: 6 << 20, SumUsage: 29 << 20, Share: 10 << 20, Target: 12 << 20, Usage: 9 << 20, HeldBack: true,
				HostLimit: 40 << 20, LimitFrom: "kafka quota store",
				Why:     "fallback (even-split): no report of this host landed for the lease (30s)",
				Brokers: []status.ClusterBrokerView{{Broker: 1, Live: true, Reported: true, Usage: 20 << 20, Applied: 20 << 20, Led: 16}, {Broker: 2}}}}}}
	sock := serveStatus(t, snap)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"status", "--socket", sock}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"cluster prod  broker 2  epoch 4  lease fallback  round 77 (lowered to 76)  SHADOW: shares computed and reported, none applied",
		"topic __sluice_cluster_budgets: caught up, lag 0, published 12 (failed 0, withheld 1), read 33",
		"last topic error: NOT_LEADER",
		"reports ignored: fenced 2",
		"client backfill fetch  30MiB/s  6MiB/s",
		"10MiB/s  12MiB/s  9MiB/s (held back)  fallback (even-split)",
		"by broker: 1: uses 20MiB/s, applies 20MiB/s, leads 16; 2: no report",
		"client backfill fetch limit from kafka quota store: this host reads 40MiB/s; the round split 30MiB/s (the smallest any live broker reported)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}
