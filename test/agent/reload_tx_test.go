package agent_test

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/daemon"
	"github.com/sluice-dev/sluice/test/harness"
)

// A reload refused at each of its steps leaves the host as it was: the
// qdiscs, classes and filters of the interface and its IFB (tc -j dumps),
// every pinned map's contents (the heartbeat aside), and what status says
// the data path does. The agent is a fault-injection build (-tags
// faultinject) that fails the step named in a file; `sluice reload`
// exits 2 naming the step and saying every change was undone. The same
// reload applied whole changes the dumps, so they can see a change.
func TestAgentIntegrationRefusedReloadLeavesTheHostAsItWas(t *testing.T) {
	w := newWorldBuiltWith(t, "faultinject")
	faultFile := filepath.Join(w.Dir, "fail-step")
	t.Setenv(daemon.FaultFileEnv, faultFile) // the agent inherits it
	setFault := func(step string) {
		if err := os.WriteFile(faultFile, []byte(step), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	before := harness.Config{ProduceCapacity: "100MB", FetchCapacity: "100MB",
		Listeners: "[9092, {port: 9093, protocol: SSL}]",
		Extra: "samples_per_second: 100\nexempt_peers: [10.0.0.0/8]\n" +
			"entities:\n  clients: {alpha: {producer_byte_rate: 3MB}}\n" +
			"  peers: {198.18.1.0/24: {consumer_byte_rate: 4MB}}\n  listeners: {9093: {consumer_byte_rate: 1MB}}\n"}
	next := harness.Config{ProduceCapacity: "200MB", FetchCapacity: "150MB",
		Listeners: "[9092, {port: 9094, protocol: SSL}]",
		Extra: "samples_per_second: 50\nexempt_peers: [10.0.0.0/8, 192.0.2.0/24]\n" +
			"entities:\n  clients: {alpha: {producer_byte_rate: 6MB}, beta: {consumer_byte_rate: 2MB}}\n" +
			"  peers: {198.18.1.0/24: {consumer_byte_rate: 4MB}, 198.18.2.0/24: {consumer_byte_rate: 5MB}}\n  listeners: {9094: {consumer_byte_rate: 1MB}}\n"}
	cfg := w.WriteConfig("agent", before)
	a, err := w.StartAgent(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()

	first := hostState(t, w)
	same := func(what string) {
		t.Helper()
		now := hostState(t, w)
		differ := 0
		for _, k := range slices.Sorted(keys(first)) {
			if first[k] != now[k] {
				differ++
				t.Errorf("%s: %s changed:\nbefore %s\nafter  %s", what, k, first[k], now[k])
			}
		}
		if differ == 0 {
			t.Logf("%s: %d dumps (%s) equal to before", what, len(first), strings.Join(slices.Sorted(keys(first)), ", "))
		}
	}
	reload := func() string {
		t.Helper()
		out, err := exec.Command(w.Sluice, "reload", "--socket", w.Socket).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("sluice reload exited %v, want 2: %s", err, out)
		}
		return string(out)
	}

	// Bad input: each file is refused whole, by the watcher and by sluice
	// reload (exit 2, naming the key), and the host stays as it was.
	good, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	credentials := t.TempDir()                                // a directory where a password file belongs
	for _, b := range []struct{ name, key, from, to string }{ // from: a regexp
		{"+Inf capacity", "produce.capacity", `produce: {capacity: [^,]+`, "produce: {capacity: .inf"},
		{"NaN capacity", "fetch.capacity", `fetch: {capacity: [^,]+`, "fetch: {capacity: .nan"},
		{"1e300 capacity", "produce.capacity", `produce: {capacity: [^,]+`, "produce: {capacity: 1e300"},
		{"negative duration", "refresh_interval", "refresh_interval: 1s", "refresh_interval: -1s"},
		{"missing CA file", "tls.ca_file", "log_level: debug", "log_level: debug\ntls: {enabled: true, ca_file: /nonexistent/ca.pem}"},
		{"password file a directory", "sasl.password_file", "log_level: debug", "log_level: debug\nsasl: {mechanism: PLAIN, username: u, password_file: " + credentials + "}"},
		{"restart-only key", "max_connections", "log_level: debug", "log_level: debug\nmax_connections: 12345"},
	} {
		text := regexp.MustCompile(b.from).ReplaceAllLiteralString(string(good), b.to)
		if text == string(good) {
			t.Fatalf("%s: the edit did not apply", b.name)
		}
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		out := reload()
		if !strings.Contains(out, b.key) {
			t.Errorf("%s: the refusal does not name %s: %s", b.name, b.key, out)
		}
		t.Logf("%s: sluice reload: %s", b.name, strings.TrimSpace(out))
		same(b.name)
	}
	// The file changes under a fault, so the watcher's own reload is
	// refused too; then each step is failed in turn by `sluice reload`.
	steps := slices.DeleteFunc(slices.Clone(daemon.ReloadStepNames), func(s string) bool { return strings.HasPrefix(s, "shaper") })
	setFault(steps[0])
	if data, err := os.ReadFile(w.WriteConfig("next", next)); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(cfg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WaitFor(10*time.Second, func(s *status.Snapshot) bool { return s.LastReload != nil }); err != nil {
		t.Fatalf("the watcher did not reload the changed file: %v", err)
	}
	for _, step := range steps {
		setFault(step)
		out := reload()
		if !strings.Contains(out, step+": injected fault") ||
			!(strings.Contains(out, "every change was undone") || strings.Contains(out, "nothing changed")) {
			t.Errorf("%s: the verdict does not name the step and say the state is as before: %s", step, out)
		}
		t.Logf("fault at %s: sluice reload: %s", step, strings.TrimSpace(out))
		same("refused at " + step)
	}

	setFault("")
	if out, err := exec.Command(w.Sluice, "reload", "--socket", w.Socket).CombinedOutput(); err != nil {
		t.Fatalf("the reload without a fault: %v %s", err, out)
	}
	applied := hostState(t, w)
	for _, k := range []string{"tc class", "map listeners", "map exempt", "map peer_entities", "map settings", "status"} {
		if first[k] == "" || first[k] == applied[k] {
			t.Errorf("the reload applied whole left %q unchanged (%q): the comparison cannot see it change", k, first[k])
		}
	}
}

func keys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// hostState dumps what a reload may change on the host: tc's view of
// every device in the broker namespace (qdiscs, classes, filters), every
// pinned map's entries (hex; the settings' heartbeat zeroed), and status'
// account of the data path (mode, shaper, entities and their parameters).
func hostState(t *testing.T, w *harness.World) map[string]string {
	t.Helper()
	out := map[string]string{}
	ns := w.Pair.Broker.Name
	tc := func(args ...string) string {
		o, err := exec.Command("ip", append([]string{"netns", "exec", ns, "tc", "-j"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tc %v: %v %s", args, err, o)
		}
		// htb reports how many packets bypassed its classes even without
		// -s: a statistic, not configuration.
		return directPackets.ReplaceAllString(string(o), `"direct_packets_stat":_`)
	}
	links, err := exec.Command("ip", "netns", "exec", ns, "ip", "-o", "link").Output()
	if err != nil {
		t.Fatal(err)
	}
	var devs []string
	for _, l := range strings.Split(string(links), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] != "lo:" {
			devs = append(devs, strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":"))
		}
	}
	sort.Strings(devs)
	out["devices"] = strings.Join(devs, " ")
	for _, d := range devs {
		out["tc qdisc"] += d + " " + tc("qdisc", "show", "dev", d) + "\n"
		out["tc class"] += d + " " + tc("class", "show", "dev", d) + "\n"
		for _, hook := range []string{"ingress", "egress"} {
			out["tc filter"] += d + " " + hook + " " + tc("filter", "show", "dev", d, hook) + "\n"
		}
	}
	pins, err := os.ReadDir(w.Pins)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pins {
		if inFlux[p.Name()] {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(w.Pins, p.Name()), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			continue // a link or program pin
		}
		switch m.Type() {
		case ebpf.PerCPUArray, ebpf.PerCPUHash, ebpf.LRUCPUHash, ebpf.RingBuf, ebpf.PerfEventArray:
			m.Close() // caches and sample rings: per CPU, in flux
			continue
		}
		var entries []string
		var k, v []byte
		it := m.Iterate()
		for it.Next(&k, &v) {
			if p.Name() == "settings" && len(v) >= 8 {
				v = slices.Clone(v)
				clear(v[:8]) // heartbeat_ns: written every cycle
			}
			entries = append(entries, hex.EncodeToString(k)+"="+hex.EncodeToString(v))
		}
		if err := it.Err(); err != nil {
			t.Fatalf("iterate pinned map %s: %v", p.Name(), err)
		}
		m.Close()
		sort.Strings(entries)
		out["map "+p.Name()] = strings.Join(entries, " ")
	}
	s, err := w.Status()
	if err != nil {
		t.Fatal(err)
	}
	type entityParams struct{ Kind, Name, Reservation, Limit string }
	view := map[string]any{"mode": s.Mode, "shaper": s.Shaper}
	for _, d := range s.Directions {
		var es []string
		for _, e := range d.Entities {
			es = append(es, fmt.Sprintf("%d %s %s res=%v limit=%v weight=%v", e.ID, e.Kind, e.Name, e.Reservation, e.Limit, e.Weight))
		}
		sort.Strings(es)
		view[d.Direction] = map[string]any{"capacity": d.Capacity, "entities": es}
	}
	data, _ := json.Marshal(view)
	out["status"] = string(data)
	return out
}

var directPackets = regexp.MustCompile(`"direct_packets_stat":[0-9]+`)

// inFlux are the pinned maps that change by themselves, reload or not:
// packet statistics and counters, clocks, the flow cache and its epochs,
// the sample slots, and the queue that carries bind requests (it holds the
// last batch, not state).
var inFlux = map[string]bool{"stats": true, "counters": true, "coarse_clocks": true, "flows4": true, "flows6": true,
	"flow_epochs": true, "sample_slots": true, "sample_rings": true, "bind_queue": true}
