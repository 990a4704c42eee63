package attach

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/internal/netns"
)

// verdictProgram is a tc program named so that returns the verdict
// (TC_ACT_UNSPEC -1, TC_ACT_OK 0…) after touching the map (nil: none): a
// data path's programs share their maps, which is how sluice tells its own
// from another agent's.
func verdictProgram(t *testing.T, name string, verdict int32, m *ebpf.Map) *ebpf.Program {
	t.Helper()
	var insns asm.Instructions
	if m != nil {
		insns = append(insns, asm.LoadMapPtr(asm.R2, m.FD()))
	}
	insns = append(insns, asm.Mov.Imm(asm.R0, verdict), asm.Return())
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.SchedCLS, License: "MIT", Instructions: insns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dataPathMap(t *testing.T) *ebpf.Map {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "settings", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// agentPrograms are one data path's sluice_ingress and sluice_egress.
func agentPrograms(t *testing.T) (ingress, egress *ebpf.Program) {
	m := dataPathMap(t)
	return verdictProgram(t, "sluice_ingress", -1, m), verdictProgram(t, "sluice_egress", -1, m)
}

// bpffs mounts a bpffs of the test's own for link pins, unmounted at
// cleanup (after the namespace is gone, so nothing pinned outlives it).
func bpffs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=700"); err != nil {
		t.Fatalf("mount bpffs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func addClsactAndFilters(t *testing.T, pair *netns.Pair, idx int, filters ...*netlink.BpfFilter) {
	t.Helper()
	err := pair.Broker.Do(func() error {
		if !hasClsact(mustLink(idx)) {
			if err := netlink.QdiscAdd(clsactOf(idx)); err != nil {
				return err
			}
		}
		for _, f := range filters {
			f.LinkIndex, f.Handle, f.Protocol, f.DirectAction = idx, netlink.MakeHandle(0, 1), unix.ETH_P_ALL, true
			if err := netlink.FilterAdd(f); err != nil {
				return fmt.Errorf("add %s at pref %d: %w", f.Name, f.Priority, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func filterAt(parent uint32, pref uint16, name string, p *ebpf.Program) *netlink.BpfFilter {
	return &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{Parent: parent, Priority: pref}, Fd: p.FD(), Name: name}
}

// chainOf names the programs of a TCX hook in the order they run.
func chainOf(t *testing.T, pair *netns.Pair, idx int, typ ebpf.AttachType) []string {
	t.Helper()
	var out []string
	err := pair.Broker.Do(func() error {
		r, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: typ})
		if err != nil {
			return err
		}
		for _, p := range r.Programs {
			name, err := programName(p.ID)
			if err != nil {
				return err
			}
			out = append(out, name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// #48 item 6. On the legacy path sluice's filters take the last position:
// after a Cilium-style filter at pref 1 and an operator's filters at tc's
// default pref 49152 (and one at 49160 on egress), so every one of them
// sees each segment before sluice (whose htb ingress redirect is
// terminal). An earlier release's filter at pref 2 is moved there (one
// filter left, the foreign ones untouched); the steering filter goes after
// sluice_egress; detaching restores the device. (Before: pref 2, ahead of
// the operator's filters.)
func TestLegacyAttachTakesTheLastPosition(t *testing.T) {
	netns.RequireRoot(t, "attaches TC programs")
	pair := netns.NewPair(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	pass := verdictProgram(t, "op_filter", -1, nil)
	addClsactAndFilters(t, pair, idx,
		filterAt(netlink.HANDLE_MIN_INGRESS, 1, "cil_from_netdev", pass), filterAt(netlink.HANDLE_MIN_EGRESS, 1, "cil_to_netdev", pass),
		filterAt(netlink.HANDLE_MIN_INGRESS, 49152, "op_ingress", pass), filterAt(netlink.HANDLE_MIN_EGRESS, 49152, "op_egress", pass),
		filterAt(netlink.HANDLE_MIN_EGRESS, 49160, "op_egress_late", pass))
	before := tcState(t, pair.Broker, pair.BrokerDev)
	sin, seg := agentPrograms(t)
	// An earlier release's filters, at the first free pref.
	addClsactAndFilters(t, pair, idx, filterAt(netlink.HANDLE_MIN_INGRESS, 2, "sluice_ingress", sin), filterAt(netlink.HANDLE_MIN_EGRESS, 2, "sluice_egress", seg))

	var a *Attachment
	if err := pair.Broker.Do(func() (err error) { a, err = AttachWith(idx, sin, seg, Options{Mode: Legacy}); return err }); err != nil {
		t.Fatal(err)
	}
	during := tcState(t, pair.Broker, pair.BrokerDev)
	for hook, want := range map[string]string{"ingress": "pref 49153 bpf chain 0 handle 0x1 sluice_ingress", "egress": "pref 49161 bpf chain 0 handle 0x1 sluice_egress"} {
		section := during[strings.Index(during, "filter show dev "+pair.BrokerDev+" "+hook):]
		if hook == "ingress" {
			section = section[:strings.Index(section, "filter show dev "+pair.BrokerDev+" egress")]
		}
		if !strings.Contains(section, want) || strings.Count(section, "handle 0x1 sluice_") != 1 {
			t.Errorf("%s: want exactly one sluice filter, %q:\n%s", hook, want, section)
		}
	}
	for _, foreign := range []string{"pref 1 bpf chain 0 handle 0x1 cil_from_netdev", "pref 1 bpf chain 0 handle 0x1 cil_to_netdev",
		"pref 49152 bpf chain 0 handle 0x1 op_ingress", "pref 49152 bpf chain 0 handle 0x1 op_egress", "pref 49160 bpf chain 0 handle 0x1 op_egress_late"} {
		if !strings.Contains(during, foreign) {
			t.Errorf("the foreign filter %q moved:\n%s", foreign, during)
		}
	}
	// Every foreign filter runs ahead; all pass on (TC_ACT_UNSPEC): not blind.
	var ahead []Ahead
	if err := pair.Broker.Do(func() (err error) { ahead, err = a.Ahead(); return err }); err != nil {
		t.Fatal(err)
	}
	if len(ahead) != 5 || Blind(ahead) {
		t.Errorf("ahead of sluice: %+v; want the 5 foreign filters, none able to end the chain", ahead)
	}
	// The steering filter reads the class sluice_egress sets: it goes after it.
	sel := verdictProgram(t, "sluice_egress_select", 0, nil)
	if err := pair.Broker.Do(func() error { _, err := Steer(idx, sel, idx); return err }); err != nil {
		t.Fatal(err)
	}
	if s := tcState(t, pair.Broker, pair.BrokerDev); !strings.Contains(s, "pref 49162 bpf chain 0 handle 0x1 sluice_egress_select") {
		t.Errorf("the steering filter is not right after sluice_egress (49162):\n%s", s)
	}
	if err := pair.Broker.Do(func() error { return Unsteer(idx) }); err != nil {
		t.Fatal(err)
	}
	if err := pair.Broker.Do(a.Detach); err != nil {
		t.Fatal(err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != before {
		t.Errorf("detach did not leave the device as it was.\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// #48 item 5 (attach_position: first). On a legacy hook sluice goes just
// below the lowest other filter, and where another filter holds pref 1 it
// refuses (ErrNoSlot) changing nothing; with TCX it goes to the head of
// the chain, ahead of a program already there, and a restarted agent that
// finds its pinned links at the tail moves them to the head (and back).
func TestAttachFirst(t *testing.T) {
	netns.RequireRoot(t, "attaches TC programs")
	t.Run("legacy", func(t *testing.T) {
		pair := netns.NewPair(t)
		idx, _ := pair.Broker.Index(pair.BrokerDev)
		ok := verdictProgram(t, "cni_ok", 0, nil)
		addClsactAndFilters(t, pair, idx, filterAt(netlink.HANDLE_MIN_INGRESS, 5, "cni_in", ok), filterAt(netlink.HANDLE_MIN_EGRESS, 5, "cni_out", ok))
		sin, seg := agentPrograms(t)
		var a *Attachment
		if err := pair.Broker.Do(func() (err error) {
			a, err = AttachWith(idx, sin, seg, Options{Mode: Legacy, Position: First})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		state := tcState(t, pair.Broker, pair.BrokerDev)
		if !strings.Contains(state, "pref 4 bpf chain 0 handle 0x1 sluice_ingress") || !strings.Contains(state, "pref 4 bpf chain 0 handle 0x1 sluice_egress") {
			t.Errorf("sluice is not just below the CNI's pref 5:\n%s", state)
		}
		var ahead []Ahead
		pair.Broker.Do(func() (err error) { ahead, err = a.Ahead(); return err })
		if len(ahead) != 0 {
			t.Errorf("ahead of sluice at the first position: %+v", ahead)
		}
		pair.Broker.Do(a.Detach)
		// pref 1 held: nothing can go before it.
		addClsactAndFilters(t, pair, idx, filterAt(netlink.HANDLE_MIN_INGRESS, 1, "cil_from_netdev", ok))
		before := tcState(t, pair.Broker, pair.BrokerDev)
		err := pair.Broker.Do(func() (err error) {
			_, err = AttachWith(idx, sin, seg, Options{Mode: Legacy, Position: First})
			return err
		})
		if !errors.Is(err, ErrNoSlot) || !strings.Contains(err.Error(), "cil_from_netdev") {
			t.Errorf("first with pref 1 taken: %v; want ErrNoSlot naming the filter", err)
		}
		if after := tcState(t, pair.Broker, pair.BrokerDev); after != before {
			t.Errorf("a refused attach changed the device.\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
	t.Run("tcx", func(t *testing.T) {
		pair := netns.NewPair(t)
		idx, _ := pair.Broker.Index(pair.BrokerDev)
		dir := bpffs(t)
		cni := verdictProgram(t, "cni_ok", 0, nil)
		err := pair.Broker.Do(func() error {
			for _, typ := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
				l, err := link.AttachTCX(link.TCXOptions{Interface: idx, Program: cni, Attach: typ})
				if err != nil {
					return err
				}
				t.Cleanup(func() { l.Close() })
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sin, seg := agentPrograms(t)
		var a *Attachment
		if err := pair.Broker.Do(func() (err error) { a, err = AttachWith(idx, sin, seg, Options{Mode: TCX}); return err }); err != nil {
			t.Fatal(err)
		}
		if c := chainOf(t, pair, idx, ebpf.AttachTCXIngress); !slices.Equal(c, []string{"cni_ok", "sluice_ingress"}) {
			t.Errorf("last: ingress chain %v", c)
		}
		var ahead []Ahead
		pair.Broker.Do(func() (err error) { ahead, err = a.Ahead(); return err })
		if len(ahead) != 2 || !Blind(ahead) || ahead[0].Name != "cni_ok" || ahead[0].Kind != "tcx" {
			t.Errorf("behind a TC_ACT_OK program: ahead %+v; want it on both hooks, able to end the chain", ahead)
		}
		if err := pair.Broker.Do(func() error { return a.Pin(dir) }); err != nil {
			t.Fatal(err)
		}
		a.Release()
		// A restarted agent told first moves its links to the head.
		sin2, seg2 := agentProgramsOn(t, sin)
		if err := pair.Broker.Do(func() (err error) { a, err = AdoptAt(dir, idx, sin2, seg2, First); return err }); err != nil {
			t.Fatal(err)
		}
		for typ, own := range map[ebpf.AttachType]string{ebpf.AttachTCXIngress: "sluice_ingress", ebpf.AttachTCXEgress: "sluice_egress"} {
			if c := chainOf(t, pair, idx, typ); !slices.Equal(c, []string{own, "cni_ok"}) {
				t.Errorf("first: chain %v", c)
			}
		}
		pair.Broker.Do(func() (err error) { ahead, err = a.Ahead(); return err })
		if len(ahead) != 0 {
			t.Errorf("ahead of sluice at the head: %+v", ahead)
		}
		if _, err := os.Stat(dir + "/" + linkPinName(idx, 0)); err != nil {
			t.Errorf("the moved link is not pinned under the old name: %v", err)
		}
		a.Release()
		// Adopted again at first: kept where it is; then last: back to the tail.
		if err := pair.Broker.Do(func() (err error) { a, err = AdoptAt(dir, idx, sin2, seg2, First); return err }); err != nil {
			t.Fatal(err)
		}
		a.Release()
		if err := pair.Broker.Do(func() (err error) { a, err = AdoptAt(dir, idx, sin, seg, Last); return err }); err != nil {
			t.Fatal(err)
		}
		if c := chainOf(t, pair, idx, ebpf.AttachTCXEgress); !slices.Equal(c, []string{"cni_ok", "sluice_egress"}) {
			t.Errorf("back to last: chain %v", c)
		}
		if err := pair.Broker.Do(a.Detach); err != nil {
			t.Fatal(err)
		}
		if c := chainOf(t, pair, idx, ebpf.AttachTCXIngress); !slices.Equal(c, []string{"cni_ok"}) {
			t.Errorf("after detach: chain %v", c)
		}
	})
}

// agentProgramsOn are a restarted agent's programs on the same data path
// (the maps of p).
func agentProgramsOn(t *testing.T, p *ebpf.Program) (ingress, egress *ebpf.Program) {
	t.Helper()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := info.MapIDs()
	m, err := ebpf.NewMapFromID(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return verdictProgram(t, "sluice_ingress", -1, m), verdictProgram(t, "sluice_egress", -1, m)
}

// #48 item 5: what a program's verdict can do is read from its
// instructions as the kernel keeps them: only a program whose every exit
// returns TC_ACT_UNSPEC lets the chain go on.
func TestVerdictOf(t *testing.T) {
	netns.RequireRoot(t, "loads BPF programs")
	m := dataPathMap(t)
	branch := func(name string, a, b int32) *ebpf.Program {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.SchedCLS, License: "MIT", Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // skb->len
			asm.JGT.Imm(asm.R2, 100, "big"),
			asm.Mov.Imm(asm.R0, a),
			asm.Return(),
			asm.Mov.Imm(asm.R0, b).WithSymbol("big"),
			asm.Return(),
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	shared := func(name string, v int32) *ebpf.Program {
		// Two paths into one exit: r0 set before the join.
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.SchedCLS, License: "MIT", Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
			asm.Mov.Imm(asm.R0, -1),
			asm.JGT.Imm(asm.R2, 100, "out"),
			asm.Mov.Imm(asm.R0, v),
			asm.Return().WithSymbol("out"),
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	counting := func() *ebpf.Program {
		// The busy-host scenario's chained tool: a map update, then -1.
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "counting", Type: ebpf.SchedCLS, License: "GPL", Instructions: asm.Instructions{
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, -1).WithSymbol("out"),
			asm.Return(),
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	for _, c := range []struct {
		name string
		prog *ebpf.Program
		ends bool
	}{
		{"unspec", verdictProgram(t, "unspec", -1, nil), false},
		{"ok", verdictProgram(t, "ok", 0, nil), true},
		{"shot", verdictProgram(t, "shot", 2, nil), true},
		{"both unspec", branch("both", -1, -1), false},
		{"ok on one branch", branch("okbranch", -1, 0), true},
		{"joined, unspec", shared("joined_unspec", -1), false},
		{"joined, ok on one path", shared("joined_ok", 0), true},
		{"counting then unspec", counting(), false},
	} {
		info, err := c.prog.Info()
		if err != nil {
			t.Fatal(err)
		}
		ends, why := verdictOf(info)
		if ends != c.ends {
			t.Errorf("%s: ends the chain %v (%s), want %v", c.name, ends, why, c.ends)
		}
		if c.name == "ok" && !strings.Contains(why, "TC_ACT_OK") {
			t.Errorf("a TC_ACT_OK program read as %q; want the verdict named", why)
		}
	}
}

// #48 item 7: a second agent (another pin_path: another data path's maps)
// is refused on an interface the first drives, with TCX and with clsact
// filters, changing nothing; the first agent restarted (same maps, its
// pins) takes its own programs back. (Before: the second TCX agent
// appended a second pair of links; the second legacy agent replaced the
// first's filters in place.)
func TestSecondAgentRefused(t *testing.T) {
	netns.RequireRoot(t, "attaches TC programs")
	for _, mode := range []Mode{TCX, Legacy} {
		t.Run(mode.String(), func(t *testing.T) {
			pair := netns.NewPair(t)
			idx, _ := pair.Broker.Index(pair.BrokerDev)
			dir := bpffs(t)
			in1, eg1 := agentPrograms(t)
			in2, eg2 := agentPrograms(t) // another data path
			var first *Attachment
			if err := pair.Broker.Do(func() (err error) {
				if first, err = AttachWith(idx, in1, eg1, Options{Mode: mode}); err != nil {
					return err
				}
				return first.Pin(dir)
			}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pair.Broker.Do(first.Detach) })
			before := tcState(t, pair.Broker, pair.BrokerDev)
			chain := chainOf(t, pair, idx, ebpf.AttachTCXIngress)
			for _, m := range []Mode{TCX, Legacy} {
				err := pair.Broker.Do(func() (err error) { _, err = AttachWith(idx, in2, eg2, Options{Mode: m}); return err })
				if !errors.Is(err, ErrOtherAgent) {
					t.Errorf("a second agent (%v) beside a first (%v): %v; want ErrOtherAgent", m, mode, err)
				}
			}
			if after, c := tcState(t, pair.Broker, pair.BrokerDev), chainOf(t, pair, idx, ebpf.AttachTCXIngress); after != before || !slices.Equal(c, chain) {
				t.Errorf("the refused agent changed the device.\nbefore:\n%s %v\nafter:\n%s %v", before, chain, after, c)
			}
			// The first agent restarted: its own pins (TCX) or filters on
			// its maps (legacy) are its own.
			first.Release()
			rin, reg := agentProgramsOn(t, in1)
			err := pair.Broker.Do(func() (err error) {
				if mode == TCX {
					first, err = AdoptAt(dir, idx, rin, reg, Last)
				} else {
					first, err = AttachWith(idx, rin, reg, Options{Mode: Legacy})
				}
				return err
			})
			if err != nil {
				t.Fatalf("the first agent restarted: %v", err)
			}
			// An adopt of another agent's pins is refused as well.
			if mode == TCX {
				other := bpffs(t)
				err := pair.Broker.Do(func() error {
					a, err := AttachWith(idx, in2, eg2, Options{Mode: TCX})
					if err == nil {
						a.Detach()
					}
					return err
				})
				if !errors.Is(err, ErrOtherAgent) {
					t.Errorf("second agent after the restart: %v", err)
				}
				_ = other
			}
		})
	}
}
