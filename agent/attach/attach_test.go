package attach

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/internal/netns"
)

// sluicePrograms are pass programs under the names of sluice's own, which
// (with the filters' names) are how sluice knows its legacy filters.
func sluicePrograms(t *testing.T) (ingress, egress *ebpf.Program) {
	t.Helper()
	return namedPass(t, "sluice_ingress"), namedPass(t, "sluice_egress")
}

func namedPass(t *testing.T, name string) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.SchedCLS, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func passProgram(t *testing.T) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.SchedCLS,
		License:      "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// tcState is what `tc` shows of a device: qdiscs and both hooks' filters.
func tcState(t *testing.T, ns *netns.NS, dev string) string {
	t.Helper()
	var out strings.Builder
	for _, args := range [][]string{{"qdisc", "show", "dev", dev}, {"filter", "show", "dev", dev, "ingress"}, {"filter", "show", "dev", dev, "egress"}} {
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name, "tc"}, args...)...)
		b, err := cmd.CombinedOutput()
		if err != nil && !strings.Contains(string(b), "Cannot find specified qdisc") && !strings.Contains(string(b), "Invalid argument") {
			t.Fatalf("tc %v: %v: %s", args, err, b)
		}
		out.WriteString(strings.Join(args, " ") + ":\n" + string(b))
	}
	return out.String()
}

func TestDetachRestoresDevice(t *testing.T) {
	netns.RequireRoot(t, "attaches TC programs")
	for _, mode := range []Mode{TCX, Legacy} {
		t.Run(mode.String(), func(t *testing.T) {
			pair := netns.NewPair(t)
			sin, seg := sluicePrograms(t)
			idx, err := pair.Broker.Index(pair.BrokerDev)
			if err != nil {
				t.Fatal(err)
			}
			before := tcState(t, pair.Broker, pair.BrokerDev)
			// The kernel gives a queueless device (a veth's txqueuelen 0) a
			// length of 1000 with any qdisc, clsact too, and keeps it after.
			qlen := func() int {
				var n int
				pair.Broker.Do(func() error {
					l, err := netlink.LinkByIndex(idx)
					if err == nil {
						n = l.Attrs().TxQLen
					}
					return err
				})
				return n
			}
			qlenBefore := qlen()
			var a *Attachment
			if err := pair.Broker.Do(func() (err error) { a, err = Attach(idx, sin, seg, mode); return err }); err != nil {
				t.Fatal(err)
			}
			if n := qlen(); n != qlenBefore {
				t.Errorf("attach changed the device's txqueuelen from %d to %d", qlenBefore, n)
			}
			if a.Mode != mode {
				t.Fatalf("attached with %v, want %v", a.Mode, mode)
			}
			during := tcState(t, pair.Broker, pair.BrokerDev)
			if mode == Legacy && (!strings.Contains(during, "clsact") || !strings.Contains(during, "sluice_ingress") || !strings.Contains(during, "sluice_egress")) {
				t.Errorf("legacy attach not visible in tc:\n%s", during)
			}
			if err := pair.Broker.Do(a.Detach); err != nil {
				t.Fatal(err)
			}
			if after := tcState(t, pair.Broker, pair.BrokerDev); after != before {
				t.Errorf("device not restored.\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if n := qlen(); n != qlenBefore {
				t.Errorf("txqueuelen %d after detach, %d before", n, qlenBefore)
			}
		})
	}
}

// A clsact qdisc and a filter that someone else put on the device survive
// sluice attaching and detaching.
func TestDetachKeepsForeignQdiscsAndFilters(t *testing.T) {
	netns.RequireRoot(t, "attaches TC programs")
	pair := netns.NewPair(t)
	prog := passProgram(t)
	sin, seg := sluicePrograms(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	foreign := &netlink.BpfFilter{
		FilterAttrs:  netlink.FilterAttrs{LinkIndex: idx, Parent: netlink.HANDLE_MIN_INGRESS, Handle: netlink.MakeHandle(0, 1), Protocol: unix.ETH_P_ALL, Priority: 7},
		Fd:           prog.FD(),
		Name:         "someone_elses",
		DirectAction: true,
	}
	err := pair.Broker.Do(func() error {
		if err := netlink.QdiscAdd(&netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}); err != nil {
			return err
		}
		return netlink.FilterAdd(foreign)
	})
	if err != nil {
		t.Fatal(err)
	}
	before := tcState(t, pair.Broker, pair.BrokerDev)
	var a *Attachment
	if err := pair.Broker.Do(func() (err error) { a, err = Attach(idx, sin, seg, Legacy); return err }); err != nil {
		t.Fatal(err)
	}
	if err := pair.Broker.Do(a.Detach); err != nil {
		t.Fatal(err)
	}
	after := tcState(t, pair.Broker, pair.BrokerDev)
	if after != before || !strings.Contains(after, "someone_elses") {
		t.Errorf("foreign state changed.\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// A Cilium-style filter at pref 1 handle 1 on both hooks keeps its slot and
// program: sluice's legacy filters take the last position (created
// exclusively), say who runs before them, are found again by name when a
// restarted agent attaches (replaced in place, not doubled), and detaching
// leaves the device as it was with the foreign filters in place.
func TestLegacyAttachNeverTakesAnotherFiltersSlot(t *testing.T) {
	netns.RequireRoot(t, "attaches TC programs")
	pair := netns.NewPair(t)
	foreignProg := passProgram(t)
	sin, seg := sluicePrograms(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	err := pair.Broker.Do(func() error {
		if err := netlink.QdiscAdd(&netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}); err != nil {
			return err
		}
		for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
			if err := netlink.FilterAdd(&netlink.BpfFilter{
				FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: parent, Handle: netlink.MakeHandle(0, 1), Protocol: unix.ETH_P_ALL, Priority: 1},
				Fd:          foreignProg.FD(), Name: "cil_from_netdev", DirectAction: true,
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	before := tcState(t, pair.Broker, pair.BrokerDev)
	foreignID := func() string {
		info, err := foreignProg.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := info.ID()
		return fmt.Sprintf("id %d", id)
	}()
	var a *Attachment
	if err := pair.Broker.Do(func() (err error) { a, err = Attach(idx, sin, seg, Legacy); return err }); err != nil {
		t.Fatal(err)
	}
	during := tcState(t, pair.Broker, pair.BrokerDev)
	for _, hook := range []string{"ingress", "egress"} {
		section := during[strings.Index(during, "filter show dev "+pair.BrokerDev+" "+hook):]
		if !strings.Contains(section, "pref 1 bpf chain 0 handle 0x1 cil_from_netdev") || !strings.Contains(section, foreignID) {
			t.Errorf("%s: the foreign filter left pref 1 handle 1 or changed program:\n%s", hook, section)
		}
		// The last position (after every filter, and after tc's default
		// pref 49152), not the first free pref.
		if !strings.Contains(section, "pref 49153 bpf chain 0 handle 0x1 sluice_"+hook) {
			t.Errorf("%s: sluice's filter is not at the last position (pref 49153):\n%s", hook, section)
		}
	}
	var first string
	pair.Broker.Do(func() error { first = a.FirstForeign(); return nil })
	if !strings.Contains(first, "cil_from_netdev") {
		t.Errorf("FirstForeign %q, want the foreign filter named", first)
	}
	// A restarted agent finds its filters by name and replaces them.
	a.Release()
	if err := pair.Broker.Do(func() (err error) { a, err = Attach(idx, sin, seg, Legacy); return err }); err != nil {
		t.Fatal(err)
	}
	if again := tcState(t, pair.Broker, pair.BrokerDev); strings.Count(again, "handle 0x1 sluice_ingress") != 1 || strings.Count(again, "handle 0x1 sluice_egress") != 1 {
		t.Errorf("a second attach doubled sluice's filters:\n%s", again)
	}
	if err := pair.Broker.Do(a.Detach); err != nil {
		t.Fatal(err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != before {
		t.Errorf("detach did not leave the device as it was.\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// An operator's egress filter at the pref a plain `tc filter add … egress`
// gets (49152) keeps its slot: the steering filter takes the next free one,
// is found again by name (replaced in place), and Unsteer leaves the
// operator's filter and the clsact it needs.
func TestSteerNeverTakesAnotherFiltersSlot(t *testing.T) {
	netns.RequireRoot(t, "attaches TC programs")
	pair := netns.NewPair(t)
	prog := passProgram(t)
	classic, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "sluice_egress_select", Type: ebpf.SchedCLS, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer classic.Close()
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	err = pair.Broker.Do(func() error {
		if err := netlink.QdiscAdd(clsactOf(idx)); err != nil {
			return err
		}
		return netlink.FilterAdd(&netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: netlink.HANDLE_MIN_EGRESS, Handle: netlink.MakeHandle(0, 1), Protocol: unix.ETH_P_ALL, Priority: steerFilterPriority},
			Fd:          prog.FD(), Name: "operators_egress", DirectAction: true,
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	before := tcState(t, pair.Broker, pair.BrokerDev)
	for i := 0; i < 2; i++ { // the second time as a restarted agent
		var added bool
		if err := pair.Broker.Do(func() (err error) { added, err = Steer(idx, classic, idx); return err }); err != nil || added {
			t.Fatalf("Steer beside the operator's clsact: added %v, %v; want the clsact it found", added, err)
		}
	}
	during := tcState(t, pair.Broker, pair.BrokerDev)
	if !strings.Contains(during, "pref 49152 bpf chain 0 handle 0x1 operators_egress") {
		t.Errorf("the operator's filter lost its slot:\n%s", during)
	}
	if strings.Count(during, "sluice_egress_select") != 1 || !strings.Contains(during, "pref 49153 bpf chain 0 handle 0x1 sluice_egress_select") {
		t.Errorf("the steering filter is not once at the next free pref:\n%s", during)
	}
	if err := pair.Broker.Do(func() error { return Unsteer(idx) }); err != nil {
		t.Fatal(err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != before {
		t.Errorf("Unsteer did not leave the device as it was.\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// The operator's clsact, emptied, is still theirs: it stays. On a
	// device with none, Steer says it added one, and only
	// RemoveAddedClsact (from that record) takes it away again.
	if err := pair.Broker.Do(func() error {
		fs, err := netlink.FilterList(mustLink(idx), netlink.HANDLE_MIN_EGRESS)
		for _, f := range fs {
			netlink.FilterDel(f)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	emptied := tcState(t, pair.Broker, pair.BrokerDev)
	if err := pair.Broker.Do(func() error { return Unsteer(idx) }); err != nil {
		t.Fatal(err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != emptied || !strings.Contains(after, "clsact") {
		t.Errorf("Unsteer took the operator's empty clsact:\nbefore:\n%s\nafter:\n%s", emptied, after)
	}
	pair.Broker.Do(func() error { return deleteClsact(mustLink(idx)) })
	bare := tcState(t, pair.Broker, pair.BrokerDev)
	var added, removed bool
	err = pair.Broker.Do(func() (err error) {
		if added, err = Steer(idx, classic, idx); err != nil {
			return err
		}
		if err := Unsteer(idx); err != nil {
			return err
		}
		removed, err = RemoveAddedClsact(idx, pair.BrokerDev)
		return err
	})
	if err != nil || !added || !removed {
		t.Fatalf("Steer on a bare device: added %v, then removed %v: %v", added, removed, err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != bare {
		t.Errorf("the clsact sluice added was not removed.\nbefore:\n%s\nafter:\n%s", bare, after)
	}
}

func mustLink(idx int) netlink.Link {
	l, err := netlink.LinkByIndex(idx)
	if err != nil {
		panic(err)
	}
	return l
}

// The legacy filters of an agent that is gone (no pins name them) are
// found by name and removed; another tool's filter stays.
func TestRemoveLeftoverFilters(t *testing.T) {
	netns.RequireRoot(t, "attaches TC programs")
	pair := netns.NewPair(t)
	prog := passProgram(t)
	sin, seg := sluicePrograms(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	var a *Attachment
	err := pair.Broker.Do(func() (err error) {
		if err := netlink.QdiscAdd(clsactOf(idx)); err != nil {
			return err
		}
		if err := netlink.FilterAdd(&netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: netlink.HANDLE_MIN_INGRESS, Handle: netlink.MakeHandle(0, 1), Protocol: unix.ETH_P_ALL, Priority: 1},
			Fd:          prog.FD(), Name: "someone_elses", DirectAction: true,
		}); err != nil {
			return err
		}
		// Another tool's filter under sluice's filter name, running another
		// program: not sluice's by identity, so kept.
		if err := netlink.FilterAdd(&netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: netlink.HANDLE_MIN_INGRESS, Handle: netlink.MakeHandle(0, 1), Protocol: unix.ETH_P_ALL, Priority: 9},
			Fd:          prog.FD(), Name: "sluice_ingress", DirectAction: true,
		}); err != nil {
			return err
		}
		a, err = Attach(idx, sin, seg, Legacy)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	a.Release() // the agent is gone; its filters stay
	var touched []string
	if err := pair.Broker.Do(func() (err error) { touched, err = RemoveLeftoverFilters(); return err }); err != nil {
		t.Fatal(err)
	}
	state := tcState(t, pair.Broker, pair.BrokerDev)
	if len(touched) != 1 || touched[0] != pair.BrokerDev || strings.Contains(state, "name sluice_") || !strings.Contains(state, "someone_elses") ||
		!strings.Contains(state, "pref 9 bpf chain 0 handle 0x1 sluice_ingress") || strings.Contains(state, "pref 2 ") {
		t.Errorf("touched %v; state:\n%s", touched, state)
	}
}
