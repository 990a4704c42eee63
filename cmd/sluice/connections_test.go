package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
)

type connectionsAgent struct {
	views []status.ConnectionView
	asked []netip.Addr
}

func (*connectionsAgent) Snapshot() *status.Snapshot { return &status.Snapshot{Cycle: 1} }
func (c *connectionsAgent) Connections(peer netip.Addr) ([]status.ConnectionView, error) {
	c.asked = append(c.asked, peer)
	var out []status.ConnectionView
	for _, v := range c.views {
		if p, _ := netip.ParseAddrPort(v.Peer); !peer.IsValid() || p.Addr() == peer {
			out = append(out, v)
		}
	}
	return out, nil
}
func (*connectionsAgent) Reload() (status.ReloadResult, error) {
	return status.ReloadResult{}, errors.New("no")
}

// `sluice connections` lists what the agent's data path holds, one line
// per connection, filtered by entity (either direction; kind:name or a
// bare name) and by peer (asked of the agent), as text or JSON; bad
// filters are usage errors and no agent is exit 1.
func TestConnectionsCommand(t *testing.T) {
	since := time.Date(2026, 12, 4, 7, 0, 0, 0, time.UTC)
	agent := &connectionsAgent{views: []status.ConnectionView{
		{Peer: "198.18.0.2:40001", Local: "198.18.0.1:9094", Listener: "SASL_PLAINTEXT", Produce: "user:alice", Fetch: "user:alice",
			Rule: "SASL principal alice (users.alice)", BoundBy: "SaslAuthenticate", Reason: "login", Since: &since},
		{Peer: "198.18.0.2:40002", Local: "198.18.0.1:9092", Listener: "PLAINTEXT", Produce: "client:app", Fetch: "topic-partition:orders-0",
			Rule: "produce: client-id app; fetch: configured topic-partition orders-0", Reason: "request", BoundBy: "Fetch", Since: &since},
		{Peer: "198.18.0.3:40003", Local: "198.18.0.1:9092", Listener: "PLAINTEXT", Produce: "unknown", Fetch: "unknown", Rule: "no request seen yet"},
	}}
	sock := filepath.Join(t.TempDir(), "status.sock")
	l, err := status.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go status.Serve(l, agent)
	list := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"connections", "--socket", sock}, args...), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	out, err := list()
	if err != nil || !strings.Contains(out, "3 connection(s)") || !strings.Contains(out, "login (SaslAuthenticate)") ||
		!strings.Contains(out, "2026-12-04T07:00:00Z") || !strings.Contains(out, "PEER") {
		t.Errorf("all connections: %v\n%s", err, out)
	}
	for _, c := range []struct {
		filter string
		want   int
		has    string
	}{{"unknown", 1, "198.18.0.3:40003"}, {"orders-0", 1, "198.18.0.2:40002"}, {"topic-partition:orders-0", 1, "198.18.0.2:40002"},
		{"client:orders-0", 0, ""}, {"alice", 1, "198.18.0.2:40001"}} {
		out, err := list("--entity", c.filter, "-o", "json")
		var got []status.ConnectionView
		if err != nil || json.Unmarshal([]byte(out), &got) != nil || len(got) != c.want || (c.want > 0 && got[0].Peer != c.has) {
			t.Errorf("--entity %s: %v %+v, want %d (%s)", c.filter, err, got, c.want, c.has)
		}
	}
	if out, err := list("--peer", "198.18.0.3"); err != nil || !strings.Contains(out, "1 connection(s)") || agent.asked[len(agent.asked)-1] != netip.MustParseAddr("198.18.0.3") {
		t.Errorf("--peer: %v %v\n%s", err, agent.asked, out)
	}
	for _, bad := range [][]string{{"--peer", "not-an-ip"}, {"extra"}, {"-o", "yaml"}, {"--bogus"}} {
		if _, err := list(bad...); exitStatus(err) != 2 {
			t.Errorf("%v: %v (exit %d), want a usage error", bad, err, exitStatus(err))
		}
	}
	var out2, errOut bytes.Buffer
	if err := run(context.Background(), []string{"connections", "--socket", filepath.Join(t.TempDir(), "none.sock")}, &out2, &errOut); exitStatus(err) != 1 {
		t.Errorf("no agent: %v (exit %d), want 1", err, exitStatus(err))
	}
}
