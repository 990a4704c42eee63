package shaper

import (
	"github.com/sluice-dev/sluice/agent/shaping"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

// sharedSetup joins the pair's namespaces by a second veth and returns both
// broker interfaces' indexes and a stand-in select program (the shaper
// only hands its fd to the filters).
func sharedSetup(t *testing.T) (*netns.Pair, []string, []int, *ebpf.Program) {
	t.Helper()
	netns.RequireRoot(t, "builds namespaces, qdiscs, filters and IFB devices")
	pair := netns.NewPair(t)
	devs := []string{pair.BrokerDev, pair.BrokerDev + "x"}
	if err := netns.Veth(pair.Broker, devs[1], netip.MustParsePrefix("198.18.1.1/24"), pair.Client, pair.ClientDev+"x", netip.MustParsePrefix("198.18.1.2/24")); err != nil {
		t.Fatal(err)
	}
	var idx []int
	for _, d := range devs {
		i, err := pair.Broker.Index(d)
		if err != nil {
			t.Fatal(err)
		}
		idx = append(idx, i)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "sluice_egress_select", Type: ebpf.SchedCLS, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	return pair, devs, idx, prog
}

// hostState is every broker interface's qdiscs and egress filters, and
// the IFB devices, without counters.
func hostState(t *testing.T, pair *netns.Pair, devs []string) string {
	t.Helper()
	// Counters, and the index of the mirred action a replaced filter gets.
	counters := regexp.MustCompile(`direct_packets_stat \d+|index \d+ ref`)
	var b strings.Builder
	for _, d := range devs {
		b.WriteString(tcState(t, pair.Broker, d))
		out, _ := exec.Command("ip", "netns", "exec", pair.Broker.Name, "tc", "filter", "show", "dev", d, "egress").CombinedOutput()
		b.Write(out)
	}
	for _, name := range []string{"slifbi", "slifbe"} {
		out, _ := exec.Command("ip", "netns", "exec", pair.Broker.Name, "sh", "-c", "for d in /sys/class/net/"+name+"*; do [ -e $d ] && tc class show dev $(basename $d); done").CombinedOutput()
		b.Write(out)
	}
	return counters.ReplaceAllString(b.String(), "")
}

// Shared trees come and go without a trace, and an agent restarted with
// keep_attached_on_exit adopts them (same devices, classes and filters,
// one filter per interface), as it adopts a one-interface tree.
func TestSharedHTBAdoptsAndRemovesTheTreesItLeft(t *testing.T) {
	pair, devs, idx, prog := sharedSetup(t)
	before := hostState(t, pair, devs)
	cw := &classes{}
	first, err := NewSharedHTB(idx, cw, 200*time.Millisecond, prog, pair.Broker.Do)
	if err != nil {
		t.Fatal(err)
	}
	// Both IFBs carry sluice's alias: what makes them sluice's to adopt or
	// remove (IsSluiceIFB), beside their names.
	for _, name := range []string{sharedIngressIFBName(idx[0]), sharedEgressIFBName(idx[0])} {
		out, err := exec.Command("ip", "netns", "exec", pair.Broker.Name, "ip", "link", "show", name).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "alias "+ifbAlias) {
			t.Errorf("%s without sluice's alias: %v %s", name, err, out)
		}
	}
	if err := first.SetRates(maps.Fetch, []shaping.Rate{{Entity: 5, BytesPerSecond: 20e6, Guaranteed: 1e6}, {Entity: 6, BytesPerSecond: 1e6}}); err != nil {
		t.Fatal(err)
	}
	if err := first.SetRates(maps.Produce, []shaping.Rate{{Entity: 5, BytesPerSecond: 5e6}}); err != nil {
		t.Fatal(err)
	}
	during := hostState(t, pair, devs)
	if n := strings.Count(during, "sluice_egress_select"); n != len(devs) {
		t.Errorf("%d steering filters, want one per interface:\n%s", n, during)
	}
	if strings.Contains(during, "htb") && strings.Contains(tcState(t, pair.Broker, devs[0]), "qdisc htb") {
		t.Errorf("an interface's root was replaced; the shared trees sit on IFBs:\n%s", during)
	}
	bound := map[[2]uint32]uint32{}
	for k, v := range cw.set {
		bound[k] = v
	}
	if len(bound) != 3 {
		t.Fatalf("classes written to the data path: %v", cw.set)
	}

	// The first agent exits leaving everything; the second adopts it.
	second, err := NewSharedHTB(idx, cw, 200*time.Millisecond, prog, pair.Broker.Do)
	if err != nil {
		t.Fatal(err)
	}
	if now := hostState(t, pair, devs); second.IFBIndex() != first.IFBIndex() || second.EgressIFBIndex() != first.EgressIFBIndex() || now != during {
		t.Errorf("shared trees rebuilt, not adopted: IFBs %d,%d -> %d,%d\nbefore: %s\nafter:  %s",
			first.IFBIndex(), first.EgressIFBIndex(), second.IFBIndex(), second.EgressIFBIndex(), during, now)
	}
	for k, v := range bound {
		if cw.set[k] != v {
			t.Errorf("class of %v: %x before, %x after adoption", k, v, cw.set[k])
		}
	}
	// An agent that shapes without trees (police, shadow) removes them;
	// the clsact qdiscs the first agent added go as the daemon removes
	// them, from its pinned record (maps.RecordOwned).
	for n, i := range idx {
		if err := RemoveLeftoverTrees(i, pair.Broker.Do); err != nil {
			t.Fatal(err)
		}
		if err := pair.Broker.Do(func() error { _, err := attach.RemoveAddedClsact(i, devs[n]); return err }); err != nil {
			t.Fatal(err)
		}
	}
	if after := hostState(t, pair, devs); after != before {
		t.Errorf("leftover shared trees not removed.\nbefore: %s\nafter:  %s", before, after)
	}

	// Built again and closed: the host is as it was.
	third, err := NewSharedHTB(idx, cw, 200*time.Millisecond, prog, pair.Broker.Do)
	if err != nil {
		t.Fatal(err)
	}
	if err := third.Close(); err != nil {
		t.Fatal(err)
	}
	if after := hostState(t, pair, devs); after != before {
		t.Errorf("Close left something.\nbefore: %s\nafter:  %s", before, after)
	}
}
