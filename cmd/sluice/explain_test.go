package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
)

func TestParseConnection(t *testing.T) {
	for _, c := range []struct {
		arg  string
		ok   bool
		port uint16
	}{
		{"198.18.0.2", true, 0},
		{"198.18.0.2:40001", true, 40001},
		{"[2001:db8::2]:40001", true, 40001},
		{"2001:db8::2", true, 0},
		{"198.18.0.2:40001->198.18.0.1:9092", true, 40001},
		{"198.18.0.2->198.18.0.1:9092", false, 0},
		{"orders-consumer", false, 0},
		{"client:10.0.0.1", false, 0},
		{"topic-partition:orders-0", false, 0},
	} {
		f, ok := parseConnection(c.arg)
		if ok != c.ok || (ok && f.port != c.port) {
			t.Errorf("parseConnection(%q) = %+v %v, want ok %v port %d", c.arg, f, ok, c.ok, c.port)
		}
	}
}

// explain ADDRESS asks the agent for that peer's connections and prints
// the entity, the rule and what bound each; the 4-tuple form picks one.
func TestExplainConnection(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "status.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	since := time.Date(2026, 12, 3, 17, 0, 0, 0, time.UTC)
	views := []status.ConnectionView{
		{Peer: "198.18.0.2:40001", Local: "198.18.0.1:9094", Listener: "SASL_PLAINTEXT", Produce: "user:alice", Fetch: "user:alice",
			Rule: "SASL principal alice (users.alice)", BoundBy: "SASLAuthenticate", Reason: "login", Since: &since},
		{Peer: "198.18.0.2:40002", Local: "198.18.0.1:9092", Listener: "PLAINTEXT", Produce: "client:app", Fetch: "topic-partition:orders-0",
			Rule: "produce: client-id app; fetch: configured topic-partition orders-0"},
	}
	asked := make(chan string, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			var req struct{ Cmd, Peer string }
			json.NewDecoder(c).Decode(&req)
			asked <- req.Cmd + " " + req.Peer
			json.NewEncoder(c).Encode(views)
			c.Close()
		}
	}()
	var out bytes.Buffer
	if err := run(t.Context(), []string{"explain", "--socket", socket, "198.18.0.2"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if got := <-asked; got != "connections 198.18.0.2" {
		t.Errorf("asked the agent %q", got)
	}
	for _, want := range []string{"198.18.0.2:40001 -> 198.18.0.1:9094 (SASL_PLAINTEXT)", "produce, fetch: user:alice", "rule: SASL principal alice",
		"bound by SASLAuthenticate (login) at 2026-12-03T17:00:00Z", "fetch:   topic-partition:orders-0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(t.Context(), []string{"explain", "--socket", socket, "-o", "json", "198.18.0.2:40002->198.18.0.1:9092"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var got []status.ConnectionView
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got) != 1 || got[0].Fetch != "topic-partition:orders-0" {
		t.Errorf("json for one 4-tuple: %v %+v", err, got)
	}
	if err := run(t.Context(), []string{"explain", "--socket", socket, "198.18.0.2:40009"}, &out, &bytes.Buffer{}); err == nil {
		t.Error("a port with no connection: no error")
	}
}

// explain --config resolves a client offline from the file, as
// kafka-configs --describe does for Kafka's quotas: the entity the agent
// would charge (topic-partition first, then KIP-55's user levels, then the
// client levels) and each parameter with its source. Bad input is a usage
// error naming what is wrong; a broken file names its key.
func TestExplainOffline(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(cfg, []byte(`interfaces: [lo]
listeners: [9092]
exempt_peers: [10.0.0.0/24]
produce: {capacity: 100MiB}
fetch: {capacity: 100MiB}
entities:
  clients:
    orders-app: {producer_byte_rate: 5MiB, producer_byte_reservation: 1MiB}
    'backfill-*': {consumer_byte_rate: 20MiB, quota_weight: 0.5}
    <default>: {quota_weight: 2}
  users:
    alice: {producer_byte_rate: 9MB}
  topic-partitions:
    events-0: {consumer_byte_rate: 3MB}
`), 0o600)
	explain := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"explain", "--config", cfg}, args...), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--client-id", "orders-app"}, []string{"client:orders-app", "rule  entities.clients.orders-app",
			"produce reservation 1MiB/s (file), weight 2 (file <default>), limit 5MiB/s (file)", "fetch   reservation 0B/s (global default)"}},
		{[]string{"--client-id", "orders-app", "--user", "alice"}, []string{"user:alice", `user "alice" has a level of its own`, "limit 8.583MiB/s (file)"}},
		{[]string{"--client-id", "backfill-7", "--topic-partition", "events-0"}, []string{"topic-partition:events-0", "fetch   reservation 0B/s (global default), weight 1 (global default), limit 2.861MiB/s (file)"}},
		{[]string{"--client-id", "backfill-7", "--user", "bob"}, []string{"client-pattern:backfill-*", `matches the pattern entities.clients.'backfill-*'`, `(no users level names "bob")`}},
		{[]string{"--client-id", "stranger"}, []string{"client:stranger", "no entry names it", "weight 2 (file <default>)"}},
	} {
		out, err := explain(c.args...)
		if err != nil {
			t.Errorf("%v: %v\n%s", c.args, err, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", c.args, w, out)
			}
		}
	}
	out, err := explain("--client-id", "backfill-7", "-o", "json")
	var got offlineExplanation
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.Entity != "client-pattern:backfill-*" || len(got.Directions) != 2 ||
		got.Directions[1].Limit != 20<<20 || got.Directions[0].Limit != -1 || got.Directions[1].WeightSource != "file" {
		t.Errorf("-o json: %v %+v\n%s", err, got, out)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{nil, "give --client-id, --user or --topic-partition"},
		{[]string{"--topic-partition", "orders"}, `--topic-partition "orders": want TOPIC-PARTITION`},
		{[]string{"--client-id", "x", "orders-app"}, "give one or the other"},
	} {
		out, err := explain(bad.args...)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v (%s), want a usage error saying %q", bad.args, err, out, bad.want)
		}
	}
	var out2, errOut bytes.Buffer
	if err := run(context.Background(), []string{"explain", "--client-id", "x"}, &out2, &errOut); err == nil || !strings.Contains(err.Error(), "give --config FILE too") {
		t.Errorf("--client-id without --config: %v", err)
	}
	broken := filepath.Join(dir, "broken.yaml")
	os.WriteFile(broken, []byte("interfaces: [lo]\nlisteners: [9092]\nproduce: {capacity: lots}\n"), 0o600)
	if err := run(context.Background(), []string{"explain", "--config", broken, "--client-id", "x"}, &out2, &errOut); err == nil || !strings.Contains(err.Error(), "produce.capacity") {
		t.Errorf("a broken file: %v, want the bad key named", err)
	}
}
