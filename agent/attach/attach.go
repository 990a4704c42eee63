// Package attach puts the data path's TC programs on an interface and takes
// them off again, leaving the device as it found it. TCX links are
// preferred; on kernels without TCX a netlink clsact qdisc with cls_bpf
// filters (direct action) is used. Only what sluice created is ever
// removed: its own links, its own filters (by their name and their
// program's), and a clsact qdisc only if sluice added it (known in the
// process, or from the pinned record, maps.RecordOwned) and no
// filter is left under it.
package attach

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
)

// Mode chooses the attach mechanism.
type Mode int

const (
	// Auto uses TCX where the kernel has it, else Legacy.
	Auto Mode = iota
	// TCX attaches BPF links (Linux 6.6+).
	TCX
	// Legacy attaches cls_bpf filters under a clsact qdisc.
	Legacy
)

func (m Mode) String() string {
	switch m {
	case TCX:
		return "tcx"
	case Legacy:
		return "clsact"
	default:
		return "auto"
	}
}

// Position is where sluice's programs go among those already on a hook.
type Position int

const (
	// Last, the default: after every program and filter already attached,
	// so each of them sees every segment before sluice counts, delays or
	// redirects it (docs/design.md §3). A program ahead that ends the
	// chain (a CNI passing with TC_ACT_OK) leaves sluice blind; Ahead
	// names it.
	Last Position = iota
	// First: before every program and filter already attached (TCX
	// BPF_F_BEFORE with no anchor; a legacy pref lower than every other
	// filter's), for hosts that choose to have sluice see traffic a CNI
	// would end. Programs attached later may still go ahead of it.
	First
)

func (p Position) String() string {
	if p == First {
		return "first"
	}
	return "last"
}

// Options say how Attach puts the programs on an interface.
type Options struct {
	Mode     Mode
	Position Position
}

// Filter names identify sluice's legacy filters, so detaching removes
// exactly those.
const (
	ingressFilterName = "sluice_ingress"
	egressFilterName  = "sluice_egress"
	// lastFloor is the least pref sluice's legacy filters take at the Last
	// position: one after tc's default (49152, what `tc filter add` without
	// a pref gets on an empty hook), so an operator's later filter with the
	// default pref still lands ahead of sluice's, as it would without it.
	lastFloor = 0xc001
	// firstPref is the pref sluice's filters take at the First position
	// on a hook with no filter.
	firstPref = 1
)

// ErrNoSlot: the position asked for has no free pref on a legacy hook
// (another tool's filter holds pref 1, or 65535); sluice moves no other
// tool's filter.
var ErrNoSlot = errors.New("no free filter pref at the position asked for")

// ErrOtherAgent: sluice programs of another data path (another agent,
// with another pin_path) are already attached to the interface; two would
// count, shape and redirect the same segments twice.
var ErrOtherAgent = errors.New("another sluice agent's programs are attached to this interface")

// Attachment is the programs on one interface.
type Attachment struct {
	Interface string
	Index     int
	Mode      Mode
	// Position is where the programs were put among the hook's others.
	Position Position
	links    []link.Link // TCX
	// legacy state
	filters         []*netlink.BpfFilter
	createdClsact   bool
	ingress, egress *ebpf.Program
	// verdicts: the programs ahead of sluice's as the last Ahead read them
	// (by ID); readMu serialises Ahead.
	readMu                 sync.Mutex
	verdicts, nextVerdicts map[ebpf.ProgramID]programRead
}

// Attach puts ingress and egress on the interface with the given index,
// at the Last position. On failure nothing is left attached.
func Attach(ifindex int, ingress, egress *ebpf.Program, mode Mode) (*Attachment, error) {
	return AttachWith(ifindex, ingress, egress, Options{Mode: mode})
}

// AttachWith puts ingress and egress on the interface with the given index
// as opts say. It refuses (ErrOtherAgent) an interface where another
// data path's sluice programs are attached, and, at the First position on
// a legacy hook whose pref 1 another filter holds, returns ErrNoSlot. On
// failure nothing is left attached.
func AttachWith(ifindex int, ingress, egress *ebpf.Program, opts Options) (*Attachment, error) {
	iface, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("find interface %d: %w", ifindex, err)
	}
	a := &Attachment{Interface: iface.Attrs().Name, Index: ifindex, ingress: ingress, egress: egress, Position: opts.Position}
	if err := a.refuseOtherAgent(nil); err != nil {
		return nil, err
	}
	mode := opts.Mode
	if mode == Auto || mode == TCX {
		err := a.attachTCX()
		if err == nil {
			a.Mode = TCX
			return a, nil
		}
		if mode == TCX || !errors.Is(err, ebpf.ErrNotSupported) {
			return nil, err
		}
	}
	if err := a.attachLegacy(iface); err != nil {
		return nil, err
	}
	a.Mode = Legacy
	return a, nil
}

func (a *Attachment) attachTCX() error {
	for _, p := range []struct {
		prog *ebpf.Program
		typ  ebpf.AttachType
		name string
	}{{a.ingress, ebpf.AttachTCXIngress, "ingress"}, {a.egress, ebpf.AttachTCXEgress, "egress"}} {
		l, err := link.AttachTCX(link.TCXOptions{Interface: a.Index, Program: p.prog, Attach: p.typ, Anchor: tcxAnchor(a.Position)})
		if err != nil {
			a.closeLinks()
			return fmt.Errorf("attach tcx %s on %s: %w", p.name, a.Interface, err)
		}
		a.links = append(a.links, l)
	}
	return nil
}

// tcxAnchor: at the tail of the hook's chain by default, so programs
// already attached (a CNI's, an operator's policer) run first and see
// every segment before sluice counts, delays or redirects it
// (docs/design.md §3); at its head (BPF_F_BEFORE, no anchor) when the
// host chose First.
func tcxAnchor(p Position) link.Anchor {
	if p == First {
		return link.Head()
	}
	return link.Tail()
}

func (a *Attachment) closeLinks() {
	for _, l := range a.links {
		if l != nil {
			l.Close()
		}
	}
	a.links = nil
}

// FirstForeign names the filter that runs before sluice's on the
// attachment's ingress or egress hook ("" when sluice's runs first).
func (a *Attachment) FirstForeign() string {
	iface, err := netlink.LinkByIndex(a.Index)
	if err != nil {
		return ""
	}
	for _, own := range a.filters {
		filters, err := netlink.FilterList(iface, own.Parent)
		if err != nil {
			continue
		}
		for _, f := range filters {
			if f.Attrs().Priority < own.Priority {
				return describeFilter(f)
			}
		}
	}
	return ""
}

// Detach takes the programs off, restoring the device: TCX links are
// closed; legacy filters named by sluice are deleted, and the clsact qdisc
// too if sluice created it and no other filter remains under it.
func (a *Attachment) Detach() error {
	if a.Mode == TCX {
		var errs []error
		for _, l := range a.links {
			errs = append(errs, detachLink(l))
		}
		a.links = nil
		return errors.Join(errs...)
	}
	return a.detachLegacy()
}
