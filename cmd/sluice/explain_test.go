package main

import (
	"bytes"
	"encoding/json"
	"net"
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
	if err := runExplain(t.Context(), []string{"--socket", socket, "198.18.0.2"}, &out, &bytes.Buffer{}); err != nil {
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
	if err := runExplain(t.Context(), []string{"--socket", socket, "-o", "json", "198.18.0.2:40002->198.18.0.1:9092"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var got []status.ConnectionView
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got) != 1 || got[0].Fetch != "topic-partition:orders-0" {
		t.Errorf("json for one 4-tuple: %v %+v", err, got)
	}
	if err := runExplain(t.Context(), []string{"--socket", socket, "198.18.0.2:40009"}, &out, &bytes.Buffer{}); err == nil {
		t.Error("a port with no connection: no error")
	}
}
