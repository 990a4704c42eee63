package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
	"github.com/sluice-dev/sluice/test/harness"
)

// A busy broker host: before sluice starts, the broker's (4-queue)
// interface carries what other tools put there: a chained tool's TCX
// programs on both hooks, a Cilium-style legacy filter at pref 1 handle 1
// on ingress and egress, an operator's filters at tc's default pref
// (49152) on ingress and egress, an nftables netdev ingress counter on the
// Kafka port and, in the clsact-police run, an operator's tuned mq root
// (pfifo children, limit 4242: this kernel has no fq). Sluice then starts,
// shapes a producer and a consumer, reloads, restarts (SIGTERM,
// keep_attached), is killed and started, stops and is unloaded, in four
// runs:
//
//   - tcx-htb: TCX links (the default here) and htb, whose ingress
//     redirect to an IFB is terminal;
//   - tcx-htb-police-produce: TCX and htb for fetch with produce_shaper:
//     police, so produce goes on past sluice: the pref 1 filter and the
//     nftables counter must see every produce byte;
//   - clsact-police: clsact filters (attach: clsact, the path of kernels
//     without TCX) and police, which needs no qdisc, beside the tuned mq;
//     first htb is asked for and refuses that mq, changing nothing;
//   - clsact-htb: clsact filters and htb, whose ingress redirect is
//     terminal: sluice's filters take the last position (a pref after
//     every other filter's), so the pref 1 filter and the operator's at
//     49152 still see every produce byte (#48 item 6).
//
// Every foreign program here passes with TC_ACT_UNSPEC: status must say
// no hook is blind. Two more runs put a CNI stand-in that passes with
// TC_ACT_OK (as real Cilium does, ending the chain) on the TCX hooks
// instead (busyHostBehindCNI): at the default position sluice must say it
// is blind (status, sluice_blind_hooks) and, judged by the broker's
// sockets, holds nobody back; with attach_position: first it shapes both
// clients to their limits.
//
// Judged by dumps (tc -j, ip -j, nft -j, bpftool -j) and by counters
// sluice does not control (the foreign programs' own maps, nft's counter,
// the broker sockets' tcp_info): every foreign object is identical at each
// step and its counters keep increasing; the foreign TCX programs run
// before sluice's (it attaches at the tail), so they see every governed
// byte; egress filters after sluice see every byte too (it passes with
// TC_ACT_UNSPEC); after unload every dump equals the one taken before
// sluice started.
func TestScenarioBusyHost(t *testing.T) {
	for _, tool := range []string{"nft", "bpftool", "tc", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (make deps installs it): %v", tool, err)
		}
	}
	for _, run := range []struct{ name, attach, shaper, produceShaper string }{
		{"tcx-htb", "auto", "htb", "auto"},
		{"tcx-htb-police-produce", "auto", "htb", "police"},
		{"clsact-police", "clsact", "police", "auto"},
		{"clsact-htb", "clsact", "htb", "auto"},
	} {
		t.Run(run.name, func(t *testing.T) { busyHost(t, run.name, run.attach, run.shaper, run.produceShaper) })
	}
	t.Run("tcx-behind-cni-ok", busyHostBehindCNI)
}

func busyHost(t *testing.T, name, attachKey, shaper, produceShaper string) {
	const produceLimit, fetchLimit = 5e6, 5e6
	w := world(t, harness.Options{Topics: []string{"orders", "events"}, Queues: 4})
	dev := w.Pair.BrokerDev
	host := &busyHostState{t: t, ns: w.Pair.Broker.Name, dev: dev}
	host.furnish(w, shaper == "police")
	before := host.dump(w)

	cfg := func(limitScale float64) harness.Config {
		return harness.Config{ProduceCapacity: "40MB", FetchCapacity: "40MB", KeepAttached: true,
			Extra: fmt.Sprintf("attach: %s\nshaper: %s\nproduce_shaper: %s\nentities:\n  clients:\n    producer: {producer_byte_rate: %d}\n    consumer: {consumer_byte_rate: %d}\n",
				attachKey, shaper, produceShaper, int(produceLimit*limitScale), int(fetchLimit*limitScale))}
	}
	measured := map[string]any{}
	pass := true
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		pass = false
	}

	if shaper == "police" {
		// htb over an operator's tuned mq: refused at start, exit 78 (the
		// unit does not restart it), nothing changed.
		refusing := cfg(1)
		refusing.Extra = strings.Replace(refusing.Extra, "shaper: police", "shaper: htb", 1)
		a, err := w.LaunchAgent(w.WriteConfig("refused", refusing))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-a.Exited():
		case <-time.After(30 * time.Second):
			a.Kill()
			t.Fatal("htb over the operator's mq: the agent did not exit")
		}
		a.Stop() // reaped: its exit status is the judge
		code := a.Cmd.ProcessState.ExitCode()
		measured["refused_exit_code"] = code
		if code != 78 {
			fail("htb over the operator's mq exited %d, want 78 (refused)", code)
		}
		if diff := diffDumps(before, host.dump(w)); diff != "" {
			fail("the refused start changed the host:\n%s", diff)
		}
	}

	config := w.WriteConfig("busy", cfg(1))
	a, err := w.StartAgent(config)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { a.Stop() }()
	producer := client(t, w, harness.ClientSpec{Name: "producer", Lib: "franz", Mode: "produce", ClientID: "producer", Topic: "orders"})
	consumer := client(t, w, harness.ClientSpec{Name: "consumer", Lib: "franz", Mode: "consume", ClientID: "consumer", Topic: "events"})
	if _, err := w.WaitFor(30*time.Second, func(s *status.Snapshot) bool {
		p, c := entityOf(s, maps.Produce, "client", "producer"), entityOf(s, maps.Fetch, "client", "consumer")
		return p != nil && p.Bytes > 0 && c != nil && c.Bytes > 0
	}); err != nil {
		t.Fatalf("the producer and the consumer were never counted: %v", err)
	}

	// Every step: the foreign objects are as they were, each foreign counter
	// has grown since the last step, and the foreign TCX programs still run
	// before sluice's.
	last := host.counters()
	step := func(step string) {
		t.Helper()
		now := host.dump(w)
		if diff := diffDumps(foreignOnly(before), foreignOnly(now)); diff != "" {
			fail("%s: foreign objects changed:\n%s", step, diff)
		}
		if order := host.tcxOrder(w); !order.foreignFirst {
			fail("%s: on %s the TCX chains are %v; the foreign programs must run before sluice's", step, dev, order.chains)
		}
		// Programs ahead that all pass on (TC_ACT_UNSPEC): not blind, and
		// status says so (read while an agent runs).
		if step != "stop" {
			if s, err := w.Status(); err != nil || s.Hooks == nil || s.Hooks.Blind != 0 || len(s.Hooks.Hooks) != 2 {
				fail("%s: status reads the hooks as %+v (%v); want both read, none blind", step, hooksOf(s), err)
			}
		}
		c := host.countersGrown(last)
		for k, v := range c {
			if v <= last[k] {
				fail("%s: the foreign counter %s did not grow in 10 s (%d, then %d)", step, k, last[k], v)
			}
		}
		last = c
	}

	// Shaping with the foreign objects in place: both clients' rates from
	// the broker's sockets over the same 5 s after a 3 s settle, and what
	// the foreign hooks saw over a window just holding that one.
	time.Sleep(3 * time.Second) // settle into the limits
	seenBefore := host.counters()
	produceRate, fetchRate, sentRate := meterBoth(t, w, producer, consumer)
	seen := host.counters()
	for k := range seen {
		seen[k] -= seenBefore[k]
	}
	// The egress hooks are judged against what the broker sent (meterBoth).
	produced, fetched, sent := produceRate*5, fetchRate*5, sentRate*5
	measured["producer_bps"], measured["consumer_bps"] = produceRate, fetchRate
	measured["foreign_bytes_seen"] = seen
	measured["producer_bytes_in_its_window"], measured["consumer_bytes_in_its_window"] = produced, fetched
	measured["broker_bytes_sent_to_consumer_in_its_window"] = sent
	low := 0.9
	producePoliced := shaper == "police" || produceShaper == "police"
	if shaper == "police" {
		low = 0.2 // a drop policer under greedy TCP (FIELD-NOTES): held, not exact
	}
	produceLow := low
	// A policer passes, over the window, its rate plus what its bucket
	// held at the start: up to the bucket's depth (4 MiB, 0.84 MB/s over
	// 5 s). A run that began with a full bucket measured 5.80 MB/s under a
	// 5 MB/s limit.
	produceHigh, fetchHigh := 1.05*produceLimit, 1.05*fetchLimit
	if producePoliced {
		produceLow = 0.2
		produceHigh += shaping.DefaultPoliceBurst / 5
	}
	if shaper == "police" {
		fetchHigh += shaping.DefaultPoliceBurst / 5
	}
	if produceRate > produceHigh || produceRate < produceLow*produceLimit {
		fail("producer at %.0f B/s under its %.0f limit", produceRate, produceLimit)
	}
	if fetchRate > fetchHigh || fetchRate < low*fetchLimit {
		fail("consumer at %.0f B/s under its %.0f limit", fetchRate, fetchLimit)
	}
	// Who must have seen every governed byte: hooks that run before sluice
	// (the TCX programs attached first; on the clsact path, the filters at
	// pref 1 and 49152 too: sluice's is last), every egress hook (sluice
	// passes with TC_ACT_UNSPEC) and, where produce is policed in place
	// rather than redirected to the IFB, every ingress hook after sluice
	// (the clsact filters after TCX, nft; the IFB's re-injection skips tc
	// and netfilter ingress alike).
	mustSeeAll := map[string]float64{"tcx-ingress": produced, "tcx-egress": sent, "cilium-egress": sent, "operator-egress": sent}
	if attachKey == "clsact" || producePoliced {
		// Under clsact sluice's filter is last, after pref 1 and 49152.
		mustSeeAll["cilium-ingress"] = produced
		mustSeeAll["operator-ingress"] = produced
	}
	if producePoliced {
		mustSeeAll["nft-ingress"] = produced // police passes what it keeps
	}
	// Each hook counts whole packets (headers too) over a window a little
	// longer than the meters': it must have seen at least the payload the
	// client moved, and a hook that missed a tenth of it would not.
	for k, want := range mustSeeAll {
		if float64(seen[k]) < want {
			fail("%s saw %d bytes while the client moved %.0f: it missed governed segments", k, seen[k], want)
		}
	}
	measured["foreign_bytes_seen_over_client_bytes"] = map[string]float64{}
	for k, want := range mustSeeAll {
		measured["foreign_bytes_seen_over_client_bytes"].(map[string]float64)[k] = float64(seen[k]) / want
	}
	step("shaping")

	// Reload to other limits.
	if err := writeFileFrom(w.WriteConfig("busy-next", cfg(0.8)), config); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(w.Sluice, "reload", "--socket", w.Socket).CombinedOutput(); err != nil {
		t.Fatalf("sluice reload: %v\n%s", err, out)
	}
	if _, err := w.WaitFor(10*time.Second, func(s *status.Snapshot) bool {
		p := entityOf(s, maps.Produce, "client", "producer")
		return p != nil && float64(p.Limit) == 0.8*produceLimit
	}); err != nil {
		t.Fatalf("the reload's limit never showed: %v", err)
	}
	step("reload")

	// Restart keeping the data path, then kill -9 and start.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	if a, err = w.StartAgent(config); err != nil {
		t.Fatal(err)
	}
	waitCounted(t, w)
	step("restart")
	a.Kill()
	if a, err = w.StartAgent(config); err != nil {
		t.Fatal(err)
	}
	waitCounted(t, w)
	step("kill-9-and-start")

	// Stop (keep_attached leaves the data path for a next agent), then
	// unload, as `dpkg -r` does.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	step("stop")
	if out, err := exec.Command("ip", "netns", "exec", host.ns, w.Sluice, "unload", "--config", config).CombinedOutput(); err != nil {
		t.Fatalf("sluice unload: %v\n%s", err, out)
	} else {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		measured["unload_said"] = fmt.Sprintf("%d lines; last: %s", len(lines), lines[len(lines)-1])
	}
	after := host.dump(w)
	if diff := diffDumps(before, after); diff != "" {
		fail("after unload the host differs from before sluice started:\n%s", diff)
	}
	c := host.countersGrown(last)
	for k, v := range c {
		if v <= last[k] {
			fail("after unload: the foreign counter %s did not grow in 10 s", k)
		}
	}
	measured["dumps_compared"] = slices.Sorted(func(yield func(string) bool) {
		for k := range before {
			if !yield(k) {
				return
			}
		}
	})
	record(t, Result{Name: "busy-host-" + name, Pass: pass, Measured: measured,
		Expected: map[string]any{"foreign_objects": "identical at every step", "foreign_counters": "growing at every step",
			"after_unload": "every dump equal to before", "must_see_every_governed_byte": sortedKeys(mustSeeAll),
			"hook_bytes_at_least": "ingress: the producer's bytes received by the broker; egress: the bytes the broker sent the consumer (tcp_info bytes_sent)",
			"rates": fmt.Sprintf("producer in [%.1f x limit, %.0f], consumer in [%.1f x limit, %.0f] (1.05 x limit, plus a police bucket's depth over the 5 s)",
				produceLow, produceHigh, low, fetchHigh)}})
}

func waitCounted(t *testing.T, w *harness.World) {
	t.Helper()
	if _, err := w.WaitFor(20*time.Second, func(s *status.Snapshot) bool {
		p := entityOf(s, maps.Produce, "client", "producer")
		return p != nil && p.Bytes > 0 && s.Shaper != "" && s.Shaper != "shadow"
	}); err != nil {
		t.Fatalf("the new agent never counted the producer: %v", err)
	}
}

func writeFileFrom(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o600)
}

// busyHostState is what other tools installed in the broker namespace.
type busyHostState struct {
	t       *testing.T
	ns, dev string
	progs   map[string]*ebpf.Program // by counter name
	counts  map[string]*ebpf.Map
	links   []link.Link
}

// Foreign program names, as `tc filter show` and bpftool report them.
var foreignNames = []string{"tcx_ingress", "tcx_egress", "cil_from_netdev", "cil_to_netdev", "op_ingress", "op_egress", "cni_from_dev", "cni_to_dev"}

// furnish installs the foreign objects: each program counts the packets
// and bytes it sees in its own map and passes them on (TC_ACT_UNSPEC),
// as a chained tool does.
func (h *busyHostState) furnish(w *harness.World, tunedMQ bool) {
	t := h.t
	h.progs, h.counts = map[string]*ebpf.Program{}, map[string]*ebpf.Map{}
	t.Cleanup(func() {
		for _, l := range h.links {
			l.Close()
		}
		for _, p := range h.progs {
			p.Close()
		}
		for _, m := range h.counts {
			m.Close()
		}
	})
	for key, progName := range map[string]string{"tcx-ingress": "tcx_ingress", "tcx-egress": "tcx_egress",
		"cilium-ingress": "cil_from_netdev", "cilium-egress": "cil_to_netdev", "operator-ingress": "op_ingress", "operator-egress": "op_egress"} {
		p, m, err := countingProgram(progName, tcActUnspec)
		if err != nil {
			t.Fatal(err)
		}
		h.progs[key], h.counts[key] = p, m
	}
	if tunedMQ {
		h.cmd("tc", "qdisc", "replace", "dev", h.dev, "root", "handle", "7:", "mq")
		for q := 1; q <= 4; q++ {
			h.cmd("tc", "qdisc", "replace", "dev", h.dev, "parent", fmt.Sprintf("7:%x", q), "pfifo", "limit", "4242")
		}
	}
	err := w.Pair.Broker.Do(func() error {
		l, err := netlink.LinkByName(h.dev)
		if err != nil {
			return err
		}
		idx := l.Attrs().Index
		for _, x := range []struct {
			key string
			typ ebpf.AttachType
		}{{"tcx-ingress", ebpf.AttachTCXIngress}, {"tcx-egress", ebpf.AttachTCXEgress}} {
			tl, err := link.AttachTCX(link.TCXOptions{Interface: idx, Program: h.progs[x.key], Attach: x.typ})
			if err != nil {
				return fmt.Errorf("foreign tcx: %w", err)
			}
			h.links = append(h.links, tl)
		}
		if err := netlink.QdiscAdd(&netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx,
			Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}); err != nil {
			return fmt.Errorf("clsact: %w", err)
		}
		for _, f := range []struct {
			key    string
			parent uint32
			pref   uint16
			name   string
		}{{"cilium-ingress", netlink.HANDLE_MIN_INGRESS, 1, "cil_from_netdev"}, {"cilium-egress", netlink.HANDLE_MIN_EGRESS, 1, "cil_to_netdev"},
			{"operator-ingress", netlink.HANDLE_MIN_INGRESS, 49152, "op_ingress"}, {"operator-egress", netlink.HANDLE_MIN_EGRESS, 49152, "op_egress"}} {
			filter := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: f.parent, Handle: 1, Priority: f.pref,
				Protocol: unix.ETH_P_ALL}, Fd: h.progs[f.key].FD(), Name: f.name, DirectAction: true}
			if err := netlink.FilterAdd(filter); err != nil {
				return fmt.Errorf("foreign filter %s: %w", f.name, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h.cmd("nft", "-f", "-", "<<", fmt.Sprintf(`table netdev operator {
  chain kafka_in { type filter hook ingress device "%s" priority 0; tcp dport 9092 counter; }
}`, h.dev))
}

// cmd runs a command in the broker namespace; "<<" feeds what follows it
// to the command's stdin.
func (h *busyHostState) cmd(argv ...string) string {
	h.t.Helper()
	var stdin string
	if i := slices.Index(argv, "<<"); i >= 0 {
		stdin, argv = argv[i+1], argv[:i]
	}
	c := exec.Command("ip", append([]string{"netns", "exec", h.ns}, argv...)...)
	c.Stdin = strings.NewReader(stdin)
	out, err := c.CombinedOutput()
	if err != nil {
		h.t.Fatalf("%v: %v\n%s", argv, err, out)
	}
	return string(out)
}

// counters reads each foreign hook's byte count, and nft's.
func (h *busyHostState) counters() map[string]uint64 {
	out := map[string]uint64{}
	for k, m := range h.counts {
		var v [2]uint64
		if err := m.Lookup(uint32(0), &v); err != nil {
			h.t.Fatalf("read %s's counter: %v", k, err)
		}
		out[k] = v[1]
	}
	var ruleset struct {
		Nftables []struct {
			Rule *struct {
				Expr []struct {
					Counter *struct{ Bytes uint64 } `json:"counter"`
				} `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(h.cmd("nft", "-j", "list", "ruleset")), &ruleset); err != nil {
		h.t.Fatalf("nft -j: %v", err)
	}
	for _, o := range ruleset.Nftables {
		if o.Rule != nil {
			for _, e := range o.Rule.Expr {
				if e.Counter != nil {
					out["nft-ingress"] = e.Counter.Bytes
				}
			}
		}
	}
	return out
}

// countersGrown reads the counters until each has grown past last, for at
// most 10 s: right after a step a hook may not have seen a packet yet (a
// policed flow can sit in a retransmission timeout), which says nothing.
func (h *busyHostState) countersGrown(last map[string]uint64) map[string]uint64 {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := h.counters()
		grown := true
		for k, v := range c {
			grown = grown && v > last[k]
		}
		if grown || time.Now().After(deadline) {
			return c
		}
		time.Sleep(100 * time.Millisecond) // polling the counters, bounded by the deadline
	}
}

type tcxOrder struct {
	chains       map[string][]string
	foreignFirst bool
}

// meterBoth reads, from the broker's sockets over the same 5 s, the
// producer's rate (bytes received), the consumer's (bytes it acknowledged)
// and what the broker's TCP sent the consumer (bytes_sent). A hook ahead of
// the qdisc is judged against the last: a fetch byte acknowledged in the
// window may have passed the hooks before it began, while it sat in the
// HTB class or in flight (a CI run's tcx-egress read 1.005 x acked).
func meterBoth(t *testing.T, w *harness.World, producer, consumer *harness.Client) (produce, fetch, sent float64) {
	t.Helper()
	rates, err := w.SocketRatesOf(5*time.Second, harness.SocketQuery{Dir: 0, Pid: producer.Pid()},
		harness.SocketQuery{Dir: 1, Pid: consumer.Pid()}, harness.SocketQuery{Dir: harness.FetchSent, Pid: consumer.Pid()})
	if err != nil {
		t.Fatal(err)
	}
	return rates[0], rates[1], rates[2]
}

// tcxChains lists the programs of each TCX hook of the broker's interface,
// in the order they run, by name and id (bpftool 7.1 does not show TCX).
func (h *busyHostState) tcxChains(w *harness.World) map[string][]string {
	out := map[string][]string{}
	err := w.Pair.Broker.Do(func() error {
		l, err := netlink.LinkByName(h.dev)
		if err != nil {
			return err
		}
		for hook, typ := range map[string]ebpf.AttachType{"ingress": ebpf.AttachTCXIngress, "egress": ebpf.AttachTCXEgress} {
			r, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: typ})
			if err != nil {
				return fmt.Errorf("query tcx %s: %w", hook, err)
			}
			out[hook] = []string{}
			for _, p := range r.Programs {
				prog, err := ebpf.NewProgramFromID(p.ID)
				if err != nil {
					return err
				}
				info, err := prog.Info()
				prog.Close()
				if err != nil {
					return err
				}
				out[hook] = append(out[hook], fmt.Sprintf("%s/%d", info.Name, p.ID))
			}
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// tcxOrder reads the TCX chains: every foreign program must come before
// every one of sluice's.
func (h *busyHostState) tcxOrder(w *harness.World) tcxOrder {
	o := tcxOrder{chains: h.tcxChains(w), foreignFirst: true}
	for _, chain := range o.chains {
		sawSluice := false
		for _, entry := range chain {
			foreign := slices.Contains(foreignNames, strings.SplitN(entry, "/", 2)[0])
			if foreign && sawSluice {
				o.foreignFirst = false
			}
			sawSluice = sawSluice || !foreign
		}
	}
	return o
}

var (
	nftCounter = regexp.MustCompile(`"counter": \{"packets": \d+, "bytes": \d+\}`)
	// htb reports how many packets bypassed its classes even without -s.
	directPackets = regexp.MustCompile(`"direct_packets_stat":\d+`)
)

// dump is the namespace's state as the tools print it, by object: devices
// (ip -j link, without counters), each device's qdiscs, classes and
// filters (tc -j), nft's ruleset (counters blanked), tc programs (bpftool
// -j net), the broker interface's TCX chains in order (BPF_PROG_QUERY),
// and the foreign programs (bpftool -j prog).
func (h *busyHostState) dump(w *harness.World) map[string]string {
	out := map[string]string{}
	var links []map[string]any
	if err := json.Unmarshal([]byte(h.cmd("ip", "-j", "link", "show")), &links); err != nil {
		h.t.Fatalf("ip -j link: %v", err)
	}
	var devs []string
	for _, l := range links {
		name, _ := l["ifname"].(string)
		if name == "lo" {
			continue
		}
		devs = append(devs, name)
		delete(l, "stats64")
		data, _ := json.Marshal(l)
		out["link "+name] = string(data)
	}
	sort.Strings(devs)
	out["devices"] = strings.Join(devs, " ")
	for _, d := range devs {
		out["qdisc "+d] = directPackets.ReplaceAllString(h.cmd("tc", "-j", "qdisc", "show", "dev", d), `"direct_packets_stat":0`)
		out["class "+d] = h.cmd("tc", "-j", "class", "show", "dev", d)
		for _, hook := range []string{"ingress", "egress"} {
			out["filter "+d+" "+hook] = h.cmd("tc", "-j", "filter", "show", "dev", d, hook)
		}
	}
	out["nft"] = nftCounter.ReplaceAllString(h.cmd("nft", "-j", "list", "ruleset"), `"counter": _`)
	out["bpftool net"] = h.cmd("bpftool", "-j", "net", "show")
	for hook, chain := range h.tcxChains(w) {
		out["tcx "+hook] = strings.Join(chain, " ")
	}
	for k, p := range h.progs {
		info, err := p.Info()
		if err != nil {
			h.t.Fatal(err)
		}
		id, _ := info.ID()
		out["prog "+k] = h.cmd("bpftool", "-j", "prog", "show", "id", fmt.Sprint(id))
	}
	return out
}

// foreignOnly keeps, of a dump, what other tools own: the foreign programs,
// nft's ruleset, the foreign filters (each tc -j entry naming a foreign
// program, and the pref header entries of their prefs), the foreign TCX
// entries, and each device's qdiscs that are not sluice's (not its htb tree
// under the roots it replaces, nor anything on its IFB devices).
func foreignOnly(d map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range d {
		switch {
		case strings.HasPrefix(k, "prog "), k == "nft":
			out[k] = v
		case strings.HasPrefix(k, "filter "):
			out[k] = foreignEntries(v)
		case k == "bpftool net":
			out[k] = foreignEntries(v)
		case strings.HasPrefix(k, "tcx "):
			var foreign []string
			for _, e := range strings.Fields(v) {
				if slices.Contains(foreignNames, strings.SplitN(e, "/", 2)[0]) {
					foreign = append(foreign, e)
				}
			}
			out[k] = strings.Join(foreign, " ")
		case strings.HasPrefix(k, "qdisc ") && !strings.HasPrefix(k, "qdisc slifb"):
			out[k] = nonSluiceQdiscs(v)
		}
	}
	return out
}

// foreignEntries keeps the JSON objects that name a foreign program and
// are entries of a list (a tc filter, a TCX or tc entry of bpftool net),
// sorted: an object whose values hold lists of objects is looked into.
func foreignEntries(js string) string {
	var v any
	if json.Unmarshal([]byte(js), &v) != nil {
		return "unparsed: " + js
	}
	var keep []string
	var list func(x []any)
	list = func(x []any) {
		for _, e := range x {
			m, ok := e.(map[string]any)
			if !ok {
				continue
			}
			nested := false
			for _, val := range m {
				if l, ok := val.([]any); ok && len(l) > 0 {
					if _, ok := l[0].(map[string]any); ok {
						nested = true
						list(l)
					}
				}
			}
			if nested {
				continue
			}
			data, _ := json.Marshal(m)
			for _, n := range foreignNames {
				if strings.Contains(string(data), `"`+n+`"`) {
					keep = append(keep, string(data))
					break
				}
			}
		}
	}
	if l, ok := v.([]any); ok {
		list(l)
	}
	sort.Strings(keep)
	return strings.Join(keep, "\n")
}

// nonSluiceQdiscs drops the qdiscs sluice's htb tree is made of (htb and
// the bfifo leaves under it) and the root it replaced (noqueue), keeping
// clsact and an operator's mq and its children.
func nonSluiceQdiscs(js string) string {
	var qs []map[string]any
	if json.Unmarshal([]byte(js), &qs) != nil {
		return "unparsed: " + js
	}
	var keep []string
	for _, q := range qs {
		switch q["kind"] {
		case "htb", "bfifo", "noqueue":
			continue
		}
		delete(q, "refcnt")
		data, _ := json.Marshal(q)
		keep = append(keep, string(data))
	}
	return strings.Join(keep, "\n")
}

// diffDumps names each key whose value differs, with both values.
func diffDumps(a, b map[string]string) string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out strings.Builder
	for _, k := range keys {
		if a[k] != b[k] {
			fmt.Fprintf(&out, "%s:\n  before: %s\n  now:    %s\n", k, a[k], b[k])
		}
	}
	return out.String()
}

// TC verdicts the foreign programs return: TC_ACT_UNSPEC lets the chain go
// on (a chained tool); TC_ACT_OK passes the packet and ends the chain (a
// CNI such as Cilium: with TCX it skips the clsact filters too).
const (
	tcActUnspec = -1
	tcActOK     = 0
)

// countingProgram is a tc program that adds each packet and its length to
// its map's one entry and returns verdict.
func countingProgram(name string, verdict int32) (*ebpf.Program, *ebpf.Map, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "cnt_" + name[:min(len(name), 10)], Type: ebpf.Array, KeySize: 4, ValueSize: 16, MaxEntries: 1})
	if err != nil {
		return nil, nil, err
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.SchedCLS, License: "GPL", Instructions: asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, 0, asm.Word), // skb->len
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Add.Imm(asm.R0, 8),
		asm.StoreXAdd(asm.R0, asm.R7, asm.DWord),
		asm.Mov.Imm(asm.R0, verdict).WithSymbol("out"),
		asm.Return(),
	}})
	if err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("load %s: %w", name, err)
	}
	return p, m, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// hooksOf is what status says of the hooks, for messages.
func hooksOf(s *status.Snapshot) any {
	if s == nil || s.Hooks == nil {
		return nil
	}
	return *s.Hooks
}

// busyHostBehindCNI (#48 item 5): a CNI stand-in on both TCX hooks that
// counts and passes every packet with TC_ACT_OK, attached before sluice
// starts, as a CNI is on a Kubernetes node. At the default position
// (last) sluice is behind it and sees nothing: status must name the CNI
// on both hooks as able to end the chain, sluice_blind_hooks must be 1 on
// both, and the broker's sockets must show both clients far above their
// limits (nobody is held back) while the CNI saw every byte. Restarted
// with attach_position: first (the pinned links move to the head of each
// chain), status and the metric must say no hook is blind and the clients
// must run at their limits, judged by the broker's sockets as in the other
// runs; the CNI still sees every fetch byte (sluice passes egress on).
// Stopped and unloaded, the host is as before.
func busyHostBehindCNI(t *testing.T) {
	const produceLimit, fetchLimit = 5e6, 5e6
	w := world(t, harness.Options{Topics: []string{"orders", "events"}, Queues: 4})
	dev := w.Pair.BrokerDev
	host := &busyHostState{t: t, ns: w.Pair.Broker.Name, dev: dev}
	host.furnishCNI(w)
	before := host.dump(w)
	cfg := func(position string) harness.Config {
		return harness.Config{ProduceCapacity: "40MB", FetchCapacity: "40MB", KeepAttached: true,
			Extra: fmt.Sprintf("attach: auto\nattach_position: %s\nshaper: htb\nentities:\n  clients:\n    producer: {producer_byte_rate: %d}\n    consumer: {consumer_byte_rate: %d}\n",
				position, int(produceLimit), int(fetchLimit))}
	}
	measured := map[string]any{}
	pass := true
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		pass = false
	}
	blindMetric := func(hook string) string {
		out, err := w.ScrapeMetrics()
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		m := regexp.MustCompile(`(?m)^sluice_blind_hooks\{hook="` + hook + `",interface="` + regexp.QuoteMeta(dev) + `"\} (\S+)$`).FindSubmatch(out)
		if m == nil {
			return "absent"
		}
		return string(m[1])
	}
	// Default position: behind the CNI.
	a, err := w.StartAgent(w.WriteConfig("behind-cni", cfg("last")))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { a.Stop() }()
	producer := client(t, w, harness.ClientSpec{Name: "producer", Lib: "franz", Mode: "produce", ClientID: "producer", Topic: "orders"})
	consumer := client(t, w, harness.ClientSpec{Name: "consumer", Lib: "franz", Mode: "consume", ClientID: "consumer", Topic: "events"})
	s, err := w.WaitFor(30*time.Second, func(s *status.Snapshot) bool { return s.Hooks != nil && s.Hooks.Blind == 2 })
	if err != nil {
		t.Fatalf("behind a TC_ACT_OK CNI, status never said both hooks are blind: %v (last: %+v)", err, hooksOf(s))
	}
	for _, h := range s.Hooks.Hooks {
		if len(h.Ahead) != 1 || h.Ahead[0].Kind != "tcx" || !strings.HasPrefix(h.Ahead[0].Name, "cni_") || !h.Ahead[0].EndsChain {
			fail("status on %s %s: ahead %+v; want the CNI's TCX program, able to end the chain", h.Interface, h.Hook, h.Ahead)
		}
	}
	measured["status_blind"] = hooksOf(s)
	for _, hook := range []string{"ingress", "egress"} {
		if v := blindMetric(hook); v != "1" {
			fail("behind the CNI: sluice_blind_hooks{hook=%q} is %s, want 1", hook, v)
		}
	}
	seenBefore := host.counters()
	produced, fetched, _ := meterBoth(t, w, producer, consumer)
	seen := host.counters()
	measured["blind_producer_bps"], measured["blind_consumer_bps"] = produced, fetched
	// Nobody held back: well above the limits (unshaped, each runs at
	// what kfake and the veth give, tens of MB/s).
	if produced < 2*produceLimit || fetched < 2*fetchLimit {
		fail("behind the CNI the clients ran at %.0f / %.0f B/s under %.0f limits: sluice, blind, should hold nobody back", produced, fetched, produceLimit)
	}
	if d := seen["cni-ingress"] - seenBefore["cni-ingress"]; float64(d) < produced*5 {
		fail("the CNI saw %d ingress bytes while the producer moved %.0f", d, produced*5)
	}
	if s, err := w.Status(); err == nil {
		if p := entityOf(s, maps.Produce, "client", "producer"); p != nil && p.Bytes > 0 {
			fail("behind the CNI sluice counted the producer (%d bytes): it should see nothing", p.Bytes)
		}
	}

	// attach_position: first, a restart keeping the data path: the pinned
	// links move ahead of the CNI.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	config := w.WriteConfig("ahead-of-cni", cfg("first"))
	if a, err = w.StartAgent(config); err != nil {
		t.Fatal(err)
	}
	// The producer's connection is picked up mid-stream; the consumer's
	// incremental fetch session, begun while sluice saw nothing, names no
	// partitions in its requests (its bytes would stay unresolved): the
	// consumer reconnects, as it does after any broker-side change.
	consumer.Stop()
	consumer = client(t, w, harness.ClientSpec{Name: "consumer-2", Lib: "franz", Mode: "consume", ClientID: "consumer", Topic: "events"})
	if s, err = w.WaitFor(30*time.Second, func(s *status.Snapshot) bool {
		p, c := entityOf(s, maps.Produce, "client", "producer"), entityOf(s, maps.Fetch, "client", "consumer")
		return s.Hooks != nil && s.Hooks.Blind == 0 && p != nil && p.Bytes > 0 && c != nil && c.Bytes > 0
	}); err != nil {
		t.Fatalf("with attach_position: first, the clients were never counted or a hook stayed blind: %v (hooks %+v)", err, hooksOf(s))
	}
	if s.Hooks.Position != "first" {
		fail("status position %q, want first", s.Hooks.Position)
	}
	for _, hook := range []string{"ingress", "egress"} {
		if v := blindMetric(hook); v != "0" {
			fail("ahead of the CNI: sluice_blind_hooks{hook=%q} is %s, want 0", hook, v)
		}
	}
	chains := host.tcxChains(w)
	measured["tcx_chains_first"] = chains
	for hook, chain := range chains {
		if len(chain) != 2 || !strings.HasPrefix(chain[0], "sluice_") || !strings.HasPrefix(chain[1], "cni_") {
			fail("with attach_position: first the %s chain is %v; want sluice's program, then the CNI's", hook, chain)
		}
	}
	time.Sleep(3 * time.Second) // settle into the limits
	seenBefore = host.counters()
	produced, fetched, sent := meterBoth(t, w, producer, consumer)
	seen = host.counters()
	measured["first_producer_bps"], measured["first_consumer_bps"] = produced, fetched
	if produced > 1.05*produceLimit || produced < 0.9*produceLimit {
		fail("ahead of the CNI the producer ran at %.0f B/s under its %.0f limit", produced, produceLimit)
	}
	if fetched > 1.05*fetchLimit || fetched < 0.9*fetchLimit {
		fail("ahead of the CNI the consumer ran at %.0f B/s under its %.0f limit", fetched, fetchLimit)
	}
	if d := seen["cni-egress"] - seenBefore["cni-egress"]; float64(d) < sent*5 {
		fail("the CNI saw %d egress bytes while the broker sent the consumer %.0f: sluice must pass egress on", d, sent*5)
	}

	// Stop (keep_attached) and unload: the host as before.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "exec", host.ns, w.Sluice, "unload", "--config", config).CombinedOutput(); err != nil {
		t.Fatalf("sluice unload: %v\n%s", err, out)
	}
	if diff := diffDumps(before, host.dump(w)); diff != "" {
		fail("after unload the host differs from before sluice started:\n%s", diff)
	}
	record(t, Result{Name: "busy-host-tcx-behind-cni-ok", Pass: pass, Measured: measured,
		Expected: map[string]any{"last": "status and sluice_blind_hooks say both hooks are blind; clients above 2 x limit; the CNI saw every produce byte",
			"first": "no hook blind; clients in [0.9, 1.05] x limit; the CNI saw every fetch byte", "after_unload": "every dump equal to before"}})
}

// furnishCNI attaches the CNI stand-in: on each TCX hook a program that
// counts every packet and passes it with TC_ACT_OK, ending the chain.
func (h *busyHostState) furnishCNI(w *harness.World) {
	t := h.t
	h.progs, h.counts = map[string]*ebpf.Program{}, map[string]*ebpf.Map{}
	t.Cleanup(func() {
		for _, l := range h.links {
			l.Close()
		}
		for _, p := range h.progs {
			p.Close()
		}
		for _, m := range h.counts {
			m.Close()
		}
	})
	for key, name := range map[string]string{"cni-ingress": "cni_from_dev", "cni-egress": "cni_to_dev"} {
		p, m, err := countingProgram(name, tcActOK)
		if err != nil {
			t.Fatal(err)
		}
		h.progs[key], h.counts[key] = p, m
	}
	err := w.Pair.Broker.Do(func() error {
		l, err := netlink.LinkByName(h.dev)
		if err != nil {
			return err
		}
		for key, typ := range map[string]ebpf.AttachType{"cni-ingress": ebpf.AttachTCXIngress, "cni-egress": ebpf.AttachTCXEgress} {
			tl, err := link.AttachTCX(link.TCXOptions{Interface: l.Attrs().Index, Program: h.progs[key], Attach: typ})
			if err != nil {
				return fmt.Errorf("the CNI's tcx %s: %w", key, err)
			}
			h.links = append(h.links, tl)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
