package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
	"github.com/sluice-dev/sluice/test/harness"
)

// Identity across restarts: what bound a connection outlives the agent
// that learned it. A SASL producer held by its user's quota and a consumer
// whose fetch session is held by a configured topic-partition keep their
// rates across an upgrade from the previous release (test/release: its
// agent starts the scenario, this tree's takes over, and every binding is
// kept), across a restart that keeps the data path attached (SIGTERM with
// keep_attached_on_exit, what `systemctl restart` does) and across kill -9
// and start, and across a restart that changes max_connections and
// max_entities (the pinned state is carried into maps of the new sizes):
// each judged by the broker sockets' tcp_info over 5 s before the
// restart, the restart and 10 s after it, ±3 % (the producer of its limit;
// the consumer, which reads a little under its limit, of its own rate
// before, and never above the limit), and over the 10 s after alone, ±5 %.
// Then exempt_peers gains the client's address across a
// restart (the live connections go ungoverned) and loses it across another:
// they are governed again, alice's by her quota with no new login to learn
// it from (the login outlives the agent in pinned state); the consumer's by
// its client entity, since its session's partitions went by while no agent
// followed the connection.
//
// A new agent that cannot recover the login (no record of SaslAuthenticate)
// or the session (incremental fetches name no partitions) would move these
// connections to unknown or to the consumer's client-id, whose limits are
// neither 5 nor 3 MB/s.
func TestScenarioIdentityAcrossRestart(t *testing.T) {
	const (
		agentPassword = "sluice-Pw-3d1e"
		alicePassword = "alice-Pw-90ab"
		readerPass    = "reader-Pw-77c2"
		aliceLimit    = 5e6 // alice's producer_byte_rate
		sessionLimit  = 3e6 // events-0's consumer_byte_rate
		fetchCapacity = 40e6
	)
	w := world(t, harness.Options{Topics: []string{"orders", "events"}, SASL: []harness.SASLUser{
		{Mechanism: "PLAIN", User: "sluice", Password: agentPassword},
		{Mechanism: "PLAIN", User: "alice", Password: alicePassword},
		{Mechanism: "SCRAM-SHA-512", User: "reader", Password: readerPass},
	}})
	base := harness.Config{ProduceCapacity: "40MB", FetchCapacity: itoa(fetchCapacity), KeepAttached: true,
		Listeners: "[{port: 9092, protocol: SASL_PLAINTEXT}]",
		Extra: "sasl: {mechanism: PLAIN, username: sluice, password: " + agentPassword + "}\n" +
			"entities:\n  users:\n    alice: {producer_byte_rate: " + itoa(aliceLimit) + "}\n" +
			"  topic-partitions:\n    events-0: {consumer_byte_rate: " + itoa(sessionLimit) + "}\n"}
	exempt := base
	exempt.Extra = "exempt_peers: [" + w.Pair.ClientIP.String() + "/32]\n" + base.Extra
	// Other table sizes: the new agent carries the pinned state over into
	// maps of these sizes (and the next restart back into the defaults').
	resized := base
	resized.Extra = "max_connections: 131072\nmax_entities: 32768\n" + base.Extra
	governed, exempted, resizedConfig := w.WriteConfig("governed", base), w.WriteConfig("exempted", exempt), w.WriteConfig("resized", resized)

	// The first agent is the previous release's (test/release), so the
	// first restart is an upgrade to this tree under traffic.
	root, _ := filepath.Abs("../..")
	previous, previousVersion, err := harness.BuildPrevious(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	said, err := exec.Command(previous, "version").Output()
	if err != nil || !strings.Contains(string(said), previousVersion) {
		t.Fatalf("the previous release's binary says %q (%v), want %s", said, err, previousVersion)
	}
	current := w.Sluice
	w.Sluice = previous
	a, err := w.StartAgent(governed)
	w.Sluice = current
	if err != nil {
		t.Fatal(err)
	}
	// The last agent of the test leaves nothing attached; the world's
	// cleanup removes the namespaces and pins in any case.
	defer func() { a.Stop() }()

	producer := client(t, w, harness.ClientSpec{Name: "alice-producer", Lib: "franz", Mode: "produce", ClientID: "alice-app", Topic: "orders",
		Args: []string{"-sasl-mechanism", "PLAIN", "-sasl-user", "alice", "-sasl-password", alicePassword}})
	consumer := client(t, w, harness.ClientSpec{Name: "session-consumer", Lib: "franz", Mode: "consume", ClientID: "reader-app", Topic: "events",
		Args: []string{"-sasl-mechanism", "SCRAM-SHA-512", "-sasl-user", "reader", "-sasl-password", readerPass}})
	// Readiness: both entities carry bytes (the judge is the kernel's).
	if _, err := w.WaitFor(30*time.Second, func(s *status.Snapshot) bool {
		p, f := entityOf(s, maps.Produce, "user", "alice"), entityOf(s, maps.Fetch, "topic-partition", "events-0")
		return p != nil && p.Bytes > 0 && f != nil && f.Bytes > 0
	}); err != nil {
		t.Fatalf("alice and events-0 never carried bytes: %v", err)
	}
	time.Sleep(3 * time.Second) // settle, as metered does

	produceTrace := w.TraceClient(0, meterEvery, producer)
	fetchTrace := w.TraceClient(1, meterEvery, consumer)
	stopTraces := func() ([]harness.MeterPoint, []harness.MeterPoint) {
		p, perr := produceTrace.Stop()
		f, ferr := fetchTrace.Stop()
		if perr != nil || ferr != nil {
			t.Fatalf("socket meter: %v, %v", perr, ferr)
		}
		return p, f
	}
	defer func() {
		if produceTrace != nil {
			produceTrace.Stop()
			fetchTrace.Stop()
		}
	}()

	// One phase: 5 s under the running agent, the restart, 10 s under the
	// new one. Marks are taken from this process's clock, as the meter's
	// points are.
	type phase struct {
		name                       string
		from, restart, ready, till time.Time
		bindingsBefore             map[string]string
		bindingsAfter              map[string]string
		rebindsAfter               map[string]uint64
		startedIn                  time.Duration
	}
	var phases []*phase
	bindingsOf := func() map[string]string {
		s, _ := w.Status()
		b, _ := w.Bindings()
		owners, _ := w.ClientPorts()
		out := map[string]string{}
		if s == nil {
			return out
		}
		names := map[uint32]string{maps.NotGoverned: "not governed"}
		for _, d := range s.Directions {
			for _, e := range d.Entities {
				names[e.ID] = e.Kind + ":" + e.Name
			}
		}
		name := func(id uint32) string {
			if n, ok := names[id]; ok {
				return n
			}
			return fmt.Sprintf("entity %d", id)
		}
		for _, c := range []*harness.Client{producer, consumer} {
			for _, port := range owners[c.Pid()] {
				v := "no binding"
				for k, bd := range b {
					if k.Peer.Port() == port && k.Peer.Addr() == w.Pair.ClientIP {
						v = "produce " + name(bd.Produce) + ", fetch " + name(bd.Fetch)
					}
				}
				out[fmt.Sprint(c.Name, ":", port)] = v
			}
		}
		return out
	}
	restart := func(name, config string, kill bool) *phase {
		p := &phase{name: name, from: time.Now()}
		time.Sleep(5 * time.Second) // the window before the restart
		p.bindingsBefore = bindingsOf()
		p.restart = time.Now()
		if kill {
			a.Kill()
		} else if err := a.Stop(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if a, err = w.StartAgent(config); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p.ready = time.Now()
		p.startedIn = p.ready.Sub(p.restart)
		time.Sleep(time.Until(p.ready.Add(10 * time.Second))) // the window after
		p.till = time.Now()
		p.bindingsAfter = bindingsOf()
		if s, err := w.Status(); err == nil {
			p.rebindsAfter = s.Connections.Rebinds
		}
		phases = append(phases, p)
		return p
	}
	upgrade := restart("upgrade-from-"+previousVersion, governed, false)
	if log, _ := os.ReadFile(a.Log); !strings.Contains(string(log), "re-adopted programs left attached by the previous agent") {
		t.Errorf("upgrade: the new agent did not adopt what the previous release left:\n%s", log)
	}
	restart("systemctl-restart", governed, false)
	restart("kill-9-and-start", governed, true)
	restart("tables-resized", resizedConfig, false)
	if log, _ := os.ReadFile(a.Log); !strings.Contains(string(log), "carried the pinned state over") {
		t.Errorf("tables-resized: the new agent did not say it carried the pinned state over:\n%s", log)
	}
	// The kernel's word on it: the pinned connection table is the new size.
	if m, err := ebpf.LoadPinnedMap(filepath.Join(w.Pins, "conns4"), &ebpf.LoadPinOptions{ReadOnly: true}); err != nil || m.MaxEntries() != 131072 {
		t.Errorf("tables-resized: pinned conns4 %v, want max_entries 131072", err)
		if m != nil {
			t.Errorf("max_entries %d", m.MaxEntries())
		}
	} else {
		m.Close()
	}
	restart("exempt-added", exempted, false)
	restart("exempt-removed", governed, false)
	producePoints, fetchPoints := stopTraces()
	produceTrace = nil

	pass := true
	measured, expected := map[string]any{}, map[string]any{}
	// The upgrade keeps every binding the previous release made.
	keptBindings := len(upgrade.bindingsBefore) > 0 && len(upgrade.bindingsBefore) == len(upgrade.bindingsAfter)
	for k, v := range upgrade.bindingsBefore {
		keptBindings = keptBindings && upgrade.bindingsAfter[k] == v && !strings.HasPrefix(v, "no binding")
	}
	measured["upgrade_kept_bindings"], expected["upgrade_kept_bindings"] = keptBindings, true
	measured["previous_release"] = strings.TrimSpace(string(said))
	pass = pass && keptBindings
	for _, p := range phases {
		m := map[string]any{"agent_started_in_s": p.startedIn.Seconds(), "bindings_before": p.bindingsBefore, "bindings_after": p.bindingsAfter,
			"rebinds_of_the_new_agent": p.rebindsAfter}
		e := map[string]any{}
		for _, c := range []struct {
			name   string
			points []harness.MeterPoint
			limit  float64
		}{{"alice_produce", producePoints, aliceLimit}, {"events_0_session_fetch", fetchPoints, sessionLimit}} {
			whole := harness.TraceRate(c.points, p.from, p.till)
			before := harness.TraceRate(c.points, p.from, p.restart)
			after := harness.TraceRate(c.points, p.ready, p.till)
			m[c.name+"_bps"] = map[string]float64{"5s_before": before, "whole_window": whole, "10s_after": after}
			var ok bool
			switch p.name {
			case "exempt-added":
				// Ungoverned after the restart: well above the limit.
				ok = after > 1.5*c.limit
				e[c.name+"_bps"] = map[string]any{"10s_after_above": 1.5 * c.limit}
			case "exempt-removed":
				// Governed again (the window before was exempt, so only the
				// 10 s after are judged). alice's login was kept in pinned
				// state, so her quota holds her again. The consumer's
				// session opened long before, and its connection was not
				// followed while exempt: no agent can know the session's
				// partitions until the client opens one again, so it is
				// its client's (docs/design.md §5) — held within the fetch
				// capacity, not at events-0's limit.
				// The 10 s after a restart read up to ~2-3 % under (the new
				// agent's first cycles), so they are held to ±5 % here as
				// in the other phases: unknown (H, shared) or ungoverned
				// would miss by far more.
				if c.name == "alice_produce" {
					ok = within(after, c.limit, 0.05)
					e[c.name+"_bps"] = map[string]any{"10s_after": c.limit, "tolerance": 0.05}
				} else {
					ok = after <= fetchCapacity*1.03
					e[c.name+"_bps"] = map[string]any{"10s_after_at_most": fetchCapacity * 1.03}
				}
			default:
				// The gate: the whole window (5 s before, the
				// restart, 10 s after) within ±3 %. The 10 s after alone
				// read ~2 % under (the first cycle of a new agent), so
				// they are held to ±5 %: a connection moved to unknown
				// (H, shared) or to its client would miss either.
				if c.name == "alice_produce" {
					ok = within(whole, c.limit, 0.03) && within(after, c.limit, 0.05)
					e[c.name+"_bps"] = map[string]any{"whole_window": c.limit, "whole_window_tolerance": 0.03, "10s_after": c.limit, "10s_after_tolerance": 0.05}
					break
				}
				// A consumer waits for each fetch's answer before asking
				// again, so a lone one reads a little under its limit
				// (2-3 % here, run to run): it is held by events-0 when it
				// never exceeds the limit and reads what it read before
				// the restart, within 3 %. Moved to its client entity it
				// would read ten times as much.
				ok = whole <= 1.03*c.limit && after <= 1.03*c.limit && within(whole, before, 0.03) && within(after, before, 0.05)
				e[c.name+"_bps"] = map[string]any{"at_most": 1.03 * c.limit, "whole_window": "the 5 s before ±3 %", "10s_after": "the 5 s before ±5 %"}
			}
			m[c.name+"_within"] = ok
			pass = pass && ok
		}
		measured[p.name], expected[p.name] = m, e
	}
	errs, ok := noErrors(producer, consumer)
	exited := []string{}
	for _, c := range []*harness.Client{producer, consumer} {
		if c.ExitedEarly() {
			exited = append(exited, c.Name)
		}
	}
	measured["client_errors"], measured["clients_that_exited"] = errs, exited
	expected["client_errors"], expected["clients_that_exited"] = 0, "none"
	measured["measured_at"] = fmt.Sprintf("kernel: broker-side tcp_info of each client process's connections, read every %v", meterEvery)
	record(t, Result{Name: "identity-across-restart", Pass: pass && ok && len(exited) == 0, Measured: measured, Expected: expected})
}

// meterEvery is how often the restart scenario reads the broker sockets.
const meterEvery = 250 * time.Millisecond

// entityOf is an entity of a direction in a snapshot, or nil.
func entityOf(s *status.Snapshot, dir maps.Direction, kind, name string) *status.EntityView {
	for i, e := range s.Directions[dir].Entities {
		if e.Kind == kind && e.Name == name {
			return &s.Directions[dir].Entities[i]
		}
	}
	return nil
}
