package attach

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
)

// What runs ahead of sluice on its hooks. A TC program's verdict other
// than TC_ACT_UNSPEC (TCX_NEXT) ends the chain: with TCX, TC_ACT_OK ends
// the TCX chain and skips the legacy clsact filters too (FIELD-NOTES);
// under clsact, a filter's verdict ends the filters after it. A CNI ahead
// of sluice that passes traffic with TC_ACT_OK (real Cilium does) leaves
// sluice counting, learning and shaping nothing, and nothing else would
// say so: Ahead finds such programs, at attach and every cycle.

// Ahead is a program or filter of another tool that runs before sluice's
// on one of its hooks.
type Ahead struct {
	Interface string
	// Hook is ingress or egress.
	Hook string
	// Kind is tcx (a TCX program, which runs before every clsact filter)
	// or filter (a tc filter under clsact at a lower pref than sluice's),
	// or detached: sluice's own program is no longer on the hook (another
	// tool removed or replaced it), so the hook is blind whatever runs.
	Kind string
	// Name is the program's name (a filter's, with its kind and pref).
	Name      string
	ProgramID uint32
	// Pref is a filter's pref (0 for TCX).
	Pref uint16
	// EndsChain: its verdict can end the chain before sluice sees the
	// segment (or cannot be read, which counts the same).
	EndsChain bool
	// Verdict says what was read of it.
	Verdict string
}

// Blind says whether any of the programs ahead can end the chain.
func Blind(ahead []Ahead) bool {
	for _, x := range ahead {
		if x.EndsChain {
			return true
		}
	}
	return false
}

// Ahead lists, for both hooks, the other tools' programs and filters that
// run before sluice's: with TCX, the programs before sluice's link in the
// hook's chain; with clsact filters, every TCX program on the hook and the
// filters at lower prefs. Each carries whether its verdict can end the
// chain (verdictOf). It runs in the calling thread's network namespace.
func (a *Attachment) Ahead() ([]Ahead, error) {
	a.readMu.Lock()
	defer a.readMu.Unlock()
	a.nextVerdicts = map[ebpf.ProgramID]programRead{}
	defer func() { a.verdicts, a.nextVerdicts = a.nextVerdicts, nil }()
	iface, err := netlink.LinkByIndex(a.Index)
	if err != nil {
		return nil, fmt.Errorf("find interface %s (%d): %w", a.Interface, a.Index, err)
	}
	var out []Ahead
	for i, h := range hooks {
		own := a.ingress
		if i == 1 {
			own = a.egress
		}
		ownID, err := programID(own)
		if err != nil {
			return nil, err
		}
		chain, err := link.QueryPrograms(link.QueryOptions{Target: a.Index, Attach: h.tcx})
		if err != nil {
			return nil, fmt.Errorf("query the tcx %s chain of %s: %w", h.name, a.Interface, err)
		}
		found := a.Mode != TCX
		for _, p := range chain.Programs {
			if a.Mode == TCX && p.ID == ownID {
				found = true
				break // what follows runs after sluice
			}
			if r := a.program(p.ID); !isSluiceName(r.name) { // sluice's own are not listed
				out = append(out, Ahead{Interface: a.Interface, Hook: h.name, Kind: "tcx", ProgramID: uint32(p.ID),
					Name: r.name, EndsChain: r.endsChain, Verdict: r.verdict})
			}
		}
		if a.Mode != TCX {
			var filters []Ahead
			filters, found, err = a.filtersAhead(iface, h, ownID)
			if err != nil {
				return nil, err
			}
			out = append(out, filters...)
		}
		if !found {
			out = append(out, Ahead{Interface: a.Interface, Hook: h.name, Kind: "detached", Name: h.program, EndsChain: true,
				Verdict: "sluice's program is no longer on this hook: another tool removed or replaced it"})
		}
	}
	return out, nil
}

// hooks are sluice's two hooks, each with its TCX attach type, clsact
// parent and program name.
var hooks = []struct {
	name, program string
	tcx           ebpf.AttachType
	parent        uint32
}{
	{"ingress", ingressFilterName, ebpf.AttachTCXIngress, netlink.HANDLE_MIN_INGRESS},
	{"egress", egressFilterName, ebpf.AttachTCXEgress, netlink.HANDLE_MIN_EGRESS},
}

// filtersAhead lists the clsact filters at lower prefs than sluice's filter
// on the hook; found says whether sluice's filter is still there.
func (a *Attachment) filtersAhead(iface netlink.Link, h struct {
	name, program string
	tcx           ebpf.AttachType
	parent        uint32
}, ownID ebpf.ProgramID) (out []Ahead, found bool, err error) {
	filters, err := netlink.FilterList(iface, h.parent)
	if err != nil {
		return nil, false, fmt.Errorf("list %s filters of %s: %w", h.name, a.Interface, err)
	}
	var ownPref uint16
	for _, f := range filters {
		if b, ok := f.(*netlink.BpfFilter); ok && ebpf.ProgramID(b.Id) == ownID {
			ownPref, found = b.Priority, true
			break
		}
	}
	if !found {
		return nil, false, nil
	}
	for _, f := range filters {
		attrs := f.Attrs()
		if attrs.Priority >= ownPref {
			continue
		}
		x := Ahead{Interface: a.Interface, Hook: h.name, Kind: "filter", Name: describeFilter(f), Pref: attrs.Priority, EndsChain: true}
		b, ok := f.(*netlink.BpfFilter)
		switch {
		case !ok:
			// u32, flower, matchall…: a match runs its actions, whose
			// verdict (or, with none, TC_ACT_OK) ends the chain.
			x.Verdict = "a " + f.Type() + " filter: a match ends the chain with its actions' verdict"
		case isSluiceFilter(b, h.program) || isSluiceFilter(b, steerFilterName):
			continue
		case !b.DirectAction:
			x.ProgramID = uint32(b.Id)
			x.Verdict = "a classic (not direct-action) bpf filter: a match ends the chain with its actions' verdict"
		default:
			x.ProgramID = uint32(b.Id)
			r := a.program(ebpf.ProgramID(b.Id))
			x.EndsChain, x.Verdict = r.endsChain, r.verdict
		}
		out = append(out, x)
	}
	return out, true, nil
}

// programRead is what reading a program ahead of sluice found.
type programRead struct {
	name      string
	endsChain bool
	verdict   string
}

// program reads a program by ID once: an ID names one program for the
// kernel's uptime (IDs are not reused) and its instructions never change,
// so the verdict taken at one cycle stands at the next. What the last
// reading did not meet is dropped, so the cache holds only the programs on
// the hooks now.
func (a *Attachment) program(id ebpf.ProgramID) programRead {
	r, ok := a.verdicts[id]
	if !ok {
		r = readProgram(id)
	}
	a.nextVerdicts[id] = r
	return r
}

// readProgram reads a program's name and verdict (verdictOf).
func readProgram(id ebpf.ProgramID) programRead {
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return programRead{name: fmt.Sprintf("program %d", id), endsChain: true, verdict: "unreadable (" + err.Error() + "): counted as able to end the chain"}
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return programRead{name: fmt.Sprintf("program %d", id), endsChain: true, verdict: "unreadable (" + err.Error() + "): counted as able to end the chain"}
	}
	r := programRead{name: info.Name}
	r.endsChain, r.verdict = verdictOf(info)
	return r
}

// verdictOf reads a program's instructions (as the kernel keeps them) and
// says whether it can return anything but TC_ACT_UNSPEC, the one verdict
// that lets the chain go on. The reading is conservative: a program passes
// on only when every exit is reached from a `r0 = -1` with nothing
// between that writes r0 or that a jump lands on, and it makes no tail
// call or call to a subprogram (whose verdicts this does not follow).
// Instructions the kernel does not show (an agent without CAP_SYSLOG under
// kptr_restrict, or BPF_DUMP restrictions) count as able to end the chain.
func verdictOf(info *ebpf.ProgramInfo) (endsChain bool, verdict string) {
	insns, err := info.Instructions()
	if err != nil {
		return true, "instructions unreadable (" + err.Error() + "): counted as able to end the chain"
	}
	if ok, why := passesOn(insns); !ok {
		return true, why
	}
	return false, "returns only TC_ACT_UNSPEC: lets the chain go on"
}

// passesOn is verdictOf's reading of the instructions: every exit must be
// reached, on every path into it, with r0 = -1 (a backward walk over the
// control flow: fall-through and jump edges; a loop or the program's entry
// counts as unknown).
func passesOn(insns asm.Instructions) (bool, string) {
	var list []asm.Instruction
	index := map[asm.RawInstructionOffset]int{}
	iter := insns.Iterate()
	for iter.Next() {
		ins := *iter.Ins
		index[iter.Offset] = len(list)
		list = append(list, ins)
		if ins.IsFunctionCall() {
			return false, "calls a subprogram: its verdict is not followed, counted as able to end the chain"
		}
		if ins.OpCode.Class().IsJump() && ins.OpCode.JumpOp() == asm.Call && ins.Constant == int64(asm.FnTailCall) {
			return false, "makes tail calls: the called program's verdict ends the chain"
		}
	}
	// preds[i]: the instructions control comes to i from.
	preds := make([][]int, len(list))
	iter = insns.Iterate()
	for i := 0; iter.Next(); i++ {
		ins := list[i]
		op := ins.OpCode
		falls := true
		if op.Class().IsJump() {
			switch jo := op.JumpOp(); jo {
			case asm.Exit:
				falls = false
			case asm.Call:
			default:
				off := int64(ins.Offset)
				if jo == asm.Ja {
					falls = false
					if op.Class() == asm.Jump32Class { // gotol: the offset is in the constant
						off = ins.Constant
					}
				}
				to, ok := index[asm.RawInstructionOffset(int64(iter.Offset)+1+off)]
				if !ok {
					return false, "jumps where no instruction starts: counted as able to end the chain"
				}
				preds[to] = append(preds[to], i)
			}
		}
		if falls && i+1 < len(list) {
			preds[i+1] = append(preds[i+1], i)
		}
	}
	const (
		unknown = iota
		walking
		yes
		no
	)
	state := make([]int, len(list))
	// culprit: the first instruction found to set another verdict.
	culprit := -1
	// unspecBefore: r0 is -1 whenever control reaches instruction i.
	var unspecBefore func(i int) bool
	unspecBefore = func(i int) bool {
		switch state[i] {
		case yes:
			return true
		case no, walking:
			return false // a loop is not followed
		}
		state[i] = walking
		ok := len(preds[i]) > 0 // the entry: r0 is not set
		for _, p := range preds[i] {
			if !ok {
				break
			}
			if writesR0(list[p]) {
				if ok = isMovR0Unspec(list[p]); !ok && culprit < 0 {
					culprit = p
				}
			} else {
				ok = unspecBefore(p)
			}
		}
		state[i] = no
		if ok {
			state[i] = yes
		}
		return ok
	}
	exits := 0
	for i, ins := range list {
		if !ins.OpCode.Class().IsJump() || ins.OpCode.JumpOp() != asm.Exit {
			continue
		}
		exits++
		if !unspecBefore(i) {
			return false, describeVerdict(list, culprit)
		}
	}
	if exits == 0 {
		return false, "no exit found: counted as able to end the chain"
	}
	return true, ""
}

// tcVerdicts names the verdicts a tc program returns (linux/pkt_cls.h).
var tcVerdicts = map[int64]string{0: "TC_ACT_OK", 1: "TC_ACT_RECLASSIFY", 2: "TC_ACT_SHOT", 3: "TC_ACT_PIPE", 4: "TC_ACT_STOLEN",
	5: "TC_ACT_QUEUED", 6: "TC_ACT_REPEAT", 7: "TC_ACT_REDIRECT", 8: "TC_ACT_TRAP"}

// describeVerdict says what ends the chain: the verdict a `r0 = k` sets,
// a helper's result returned as the verdict (bpf_redirect…), or a path
// this reading does not follow (culprit < 0).
func describeVerdict(list []asm.Instruction, culprit int) string {
	if culprit < 0 {
		return "returns a verdict on a path this reading does not follow (the entry, a loop): counted as able to end the chain"
	}
	ins := list[culprit]
	op := ins.OpCode
	switch {
	case op.Class().IsALU() && op.ALUOp() == asm.Mov && op.Source() == asm.ImmSource:
		name, ok := tcVerdicts[int64(int32(ins.Constant))]
		if !ok {
			name = fmt.Sprintf("verdict %d", int32(ins.Constant))
		}
		return "returns " + name + ", which ends the chain"
	case op.Class().IsJump() && op.JumpOp() == asm.Call:
		return "returns a helper's result (bpf_redirect and the like) as its verdict: can end the chain"
	}
	return "returns a computed verdict: counted as able to end the chain"
}

// writesR0: the instruction may change r0 (a call returns there, an
// atomic compare-exchange writes it).
func writesR0(ins asm.Instruction) bool {
	op := ins.OpCode
	switch cls := op.Class(); {
	case cls.IsJump():
		return op.JumpOp() == asm.Call
	case cls.IsALU(), cls.IsLoad():
		return ins.Dst == asm.R0
	case cls == asm.StXClass && op.Mode() == asm.AtomicMode:
		return true // cmpxchg writes r0; the fetch forms write their source
	}
	return false
}

// isMovR0Unspec is `r0 = -1` (TC_ACT_UNSPEC, TCX_NEXT), 64 or 32 bits.
func isMovR0Unspec(ins asm.Instruction) bool {
	op := ins.OpCode
	return op.Class().IsALU() && op.ALUOp() == asm.Mov && op.Source() == asm.ImmSource && ins.Dst == asm.R0 &&
		(ins.Constant == -1 || ins.Constant == 0xffffffff)
}

func programID(p *ebpf.Program) (ebpf.ProgramID, error) {
	info, err := p.Info()
	if err != nil {
		return 0, fmt.Errorf("read sluice's program: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		return 0, errors.New("read sluice's program: the kernel gives no id")
	}
	return id, nil
}

// isSluiceName: a program name sluice's data path uses on the hooks (the
// kernel keeps 15 bytes of it; cilium/ebpf gives the whole one with BTF).
func isSluiceName(name string) bool {
	for _, n := range []string{ingressFilterName, egressFilterName} {
		if name == n || name == n[:min(len(n), 15)] {
			return true
		}
	}
	return false
}

// refuseOtherAgent returns ErrOtherAgent when sluice programs of another
// data path are on the interface: on a TCX hook through a link that is
// not one of ours (ours: the links this attachment adopted), or in a
// sluice-named legacy filter whose program shares no map with ours (an
// earlier agent with this pin_path runs programs on the same pinned maps:
// its filters are taken over in place).
func (a *Attachment) refuseOtherAgent(ours []link.ID) error {
	ownMaps := map[ebpf.MapID]bool{}
	for _, p := range []*ebpf.Program{a.ingress, a.egress} {
		if info, err := p.Info(); err == nil {
			ids, _ := info.MapIDs()
			for _, id := range ids {
				ownMaps[id] = true
			}
		}
	}
	iface, err := netlink.LinkByIndex(a.Index)
	if err != nil {
		return fmt.Errorf("find interface %s (%d): %w", a.Interface, a.Index, err)
	}
	for _, h := range hooks {
		chain, err := link.QueryPrograms(link.QueryOptions{Target: a.Index, Attach: h.tcx})
		if err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("query the tcx %s chain of %s: %w", h.name, a.Interface, err)
		}
		if chain != nil {
			for _, p := range chain.Programs {
				id, _ := p.LinkID()
				name, _ := programName(p.ID)
				if isSluiceName(name) && (id == 0 || !containsID(ours, id)) {
					return fmt.Errorf("%w: %s runs sluice's %s program (id %d, tcx link %d) through a link not pinned in this agent's pin_path: another agent (another pin_path) drives it; stop that agent (or `sluice unload` with its configuration) before starting this one",
						ErrOtherAgent, a.Interface, name, p.ID, id)
				}
			}
		}
		filters, err := netlink.FilterList(iface, h.parent)
		if err != nil {
			continue // no clsact
		}
		for _, f := range filters {
			if len(ownMaps) == 0 {
				break // programs without maps (tests): nothing to tell another data path by
			}
			b, ok := f.(*netlink.BpfFilter)
			if !ok || !(isSluiceFilter(b, ingressFilterName) || isSluiceFilter(b, egressFilterName)) {
				continue
			}
			if !sharesMap(ebpf.ProgramID(b.Id), ownMaps) {
				return fmt.Errorf("%w: %s has sluice's %s filter (pref %d, program %d) on maps this agent's pin_path does not hold: another agent (another pin_path) drives it; stop that agent (or `sluice unload` with its configuration) before starting this one",
					ErrOtherAgent, a.Interface, b.Name, b.Priority, b.Id)
			}
		}
	}
	return nil
}

func containsID(ids []link.ID, id link.ID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func programName(id ebpf.ProgramID) (string, error) {
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return "", err
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return "", err
	}
	return info.Name, nil
}

// sharesMap: the program uses one of the maps (an unreadable program is
// taken as sharing: sluice refuses only what it can show is another's).
func sharesMap(id ebpf.ProgramID, maps map[ebpf.MapID]bool) bool {
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return true
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return true
	}
	ids, ok := info.MapIDs()
	if !ok {
		return true
	}
	for _, m := range ids {
		if maps[m] {
			return true
		}
	}
	return false
}
