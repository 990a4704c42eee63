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
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/maps"
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

func (a *Attachment) attachLegacy(iface netlink.Link) error {
	if _, err := netlink.QdiscList(iface); err != nil {
		return fmt.Errorf("list qdiscs of %s: %w", a.Interface, err)
	}
	if !hasClsact(iface) {
		if err := addClsact(iface); err != nil {
			return fmt.Errorf("add clsact qdisc on %s: %w", a.Interface, err)
		}
		a.createdClsact = true
	}
	for _, f := range []struct {
		prog   *ebpf.Program
		parent uint32
		name   string
	}{{a.ingress, netlink.HANDLE_MIN_INGRESS, ingressFilterName}, {a.egress, netlink.HANDLE_MIN_EGRESS, egressFilterName}} {
		slot, err := legacySlot(iface, f.parent, f.name, a.Position)
		if err != nil {
			a.detachLegacy()
			return err
		}
		filter := &netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{
				LinkIndex: a.Index,
				Parent:    f.parent,
				Handle:    netlink.MakeHandle(0, 1),
				Protocol:  unix.ETH_P_ALL,
				Priority:  slot.pref,
			},
			Fd:           f.prog.FD(),
			Name:         f.name,
			DirectAction: true,
		}
		// An earlier agent's filter at the right position is replaced in
		// place (no segment passes uncounted meanwhile); anywhere else
		// sluice creates exclusively, so it never takes another's slot.
		add := netlink.FilterAdd
		if slot.own {
			add = netlink.FilterReplace
		}
		if err := add(filter); err != nil {
			a.detachLegacy()
			if errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("add %s filter on %s: pref %d handle 1 was taken meanwhile by another filter; sluice does not replace it: %w", f.name, a.Interface, slot.pref, err)
			}
			return fmt.Errorf("add %s filter on %s: %w", f.name, a.Interface, err)
		}
		a.filters = append(a.filters, filter)
		// An earlier agent's filter at the wrong position (a release that
		// took the first free pref, or the other attach_position) goes once
		// the new one runs: make before break.
		if slot.stale != nil {
			if err := deleteFilter(iface, slot.stale); err != nil && !errors.Is(err, errForeignFilter) {
				a.detachLegacy()
				return fmt.Errorf("move %s filter on %s from pref %d to %d: delete the old one: %w", f.name, a.Interface, slot.stale.Priority, slot.pref, err)
			}
		}
	}
	return nil
}

// slot is where a legacy filter of sluice's goes: its pref; own when an
// earlier agent's filter of that name is there already (replaced in
// place); stale, an earlier agent's filter of that name elsewhere, deleted
// once the new one is in.
type slot struct {
	pref  uint16
	own   bool
	stale *netlink.BpfFilter
}

// legacySlot is the slot of sluice's filter named name under parent, at
// position pos among the other tools' filters (sluice's own other filters,
// the egress steering filter, do not count):
//
//   - Last: a pref after every other filter's, and at least lastFloor;
//     ErrNoSlot when another holds 65535.
//   - First: the pref just below the lowest other filter's (firstEmptyPref
//     on a hook without any); ErrNoSlot when another holds pref 1.
//
// An earlier agent's filter of that name already at the position is kept
// (own). Filters another tool put there are never moved.
func legacySlot(iface netlink.Link, parent uint32, name string, pos Position) (slot, error) {
	filters, err := netlink.FilterList(iface, parent)
	if err != nil {
		return slot{}, fmt.Errorf("list filters of %s: %w", iface.Attrs().Name, err)
	}
	used := map[uint16]bool{}
	var mine *netlink.BpfFilter
	var lo, hi uint16
	var lowest, highest string
	others := 0
	for _, f := range filters {
		a := f.Attrs()
		used[a.Priority] = true
		if b, ok := f.(*netlink.BpfFilter); ok {
			if isSluiceFilter(b, name) {
				if mine == nil {
					mine = b
				}
				continue
			}
			if isSluiceFilter(b, steerFilterName) || isSluiceFilter(b, ingressFilterName) || isSluiceFilter(b, egressFilterName) {
				continue
			}
		}
		if others == 0 || a.Priority < lo {
			lo, lowest = a.Priority, describeFilter(f)
		}
		if others == 0 || a.Priority > hi {
			hi, highest = a.Priority, describeFilter(f)
		}
		others++
	}
	hook := "ingress"
	if parent == netlink.HANDLE_MIN_EGRESS {
		hook = "egress"
	}
	var s slot
	switch pos {
	case First:
		if mine != nil && (others == 0 || mine.Priority < lo) {
			return slot{pref: mine.Priority, own: true}, nil
		}
		switch {
		case others == 0:
			s.pref = firstEmptyPref
		case lo <= 1:
			return slot{}, fmt.Errorf("%w: attach_position: first on %s %s: %s holds pref 1, so no filter can run before it; remove or move it, or use attach_position: last",
				ErrNoSlot, iface.Attrs().Name, hook, lowest)
		default:
			s.pref = lo - 1
		}
		for used[s.pref] && s.pref > 1 {
			s.pref-- // only sluice's own filters sit below the lowest other
		}
	default:
		if mine != nil && mine.Priority >= lastFloor && (others == 0 || mine.Priority > hi) {
			return slot{pref: mine.Priority, own: true}, nil
		}
		if others > 0 && hi == 0xffff {
			return slot{}, fmt.Errorf("%w: on %s %s, %s holds the last pref (65535): no filter can run after it; move it, or use attach_position: first",
				ErrNoSlot, iface.Attrs().Name, hook, highest)
		}
		next := uint32(lastFloor)
		if others > 0 {
			next = max(next, uint32(hi)+1)
		}
		for next <= 0xffff && used[uint16(next)] {
			next++
		}
		if next > 0xffff {
			return slot{}, fmt.Errorf("%w: on %s %s no pref after %s is free", ErrNoSlot, iface.Attrs().Name, hook, highest)
		}
		s.pref = uint16(next)
	}
	if used[s.pref] {
		return slot{}, fmt.Errorf("%w: on %s %s no free pref before %s", ErrNoSlot, iface.Attrs().Name, hook, lowest)
	}
	s.stale = mine
	return s, nil
}

// firstEmptyPref is where sluice's filter goes at the First position on a
// hook with no other filter: not pref 1, which tools such as Cilium's
// legacy mode hard-code and replace in place (that would swap sluice's
// program out from under it); one of them arriving later runs ahead, and
// Ahead names it.
const firstEmptyPref = 2

// isSluiceFilter says whether a bpf filter is sluice's filter of that name:
// the name it was attached under and the name of the program it runs both
// say so. A filter another tool named alike runs another program and is
// not taken.
func isSluiceFilter(b *netlink.BpfFilter, name string) bool {
	if b.Name != name || b.Id == 0 {
		return false
	}
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(b.Id))
	if err != nil {
		return false
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil || info.Name == "" {
		return false
	}
	// The kernel keeps 15 bytes of the name; cilium/ebpf reports the whole
	// one when the program carries BTF (sluice's do).
	return info.Name == name || info.Name == name[:min(len(name), 15)]
}

func describeFilter(f netlink.Filter) string {
	a := f.Attrs()
	if b, ok := f.(*netlink.BpfFilter); ok {
		return fmt.Sprintf("bpf filter %q (pref %d handle %x)", b.Name, a.Priority, a.Handle)
	}
	return fmt.Sprintf("%s filter (pref %d handle %x)", f.Type(), a.Priority, a.Handle)
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

func (a *Attachment) detachLegacy() error {
	var errs []error
	for _, f := range a.filters {
		// Delete the filter at sluice's slot only if it is still sluice's:
		// one another tool put there since is left.
		iface, err := netlink.LinkByIndex(a.Index)
		if err != nil {
			errs = append(errs, fmt.Errorf("delete %s filter on %s: %w", f.Name, a.Interface, err))
			continue
		}
		if err := deleteFilter(iface, f); err != nil && !errors.Is(err, errForeignFilter) {
			errs = append(errs, fmt.Errorf("delete %s filter on %s: %w", f.Name, a.Interface, err))
		}
	}
	a.filters = nil
	if a.createdClsact {
		iface, err := netlink.LinkByIndex(a.Index)
		if err == nil && !hasFilters(iface) {
			errs = append(errs, deleteClsact(iface))
		}
		a.createdClsact = false
	}
	return errors.Join(errs...)
}

// addClsact adds the interface's clsact qdisc. The kernel gives a device
// whose txqueuelen is 0 (veth and other IFF_NO_QUEUE devices) a length of
// 1000 when it creates any qdisc on it, clsact included, and keeps that
// length once the qdisc goes: the device's own length is put back, so that
// a clsact sluice adds and later removes leaves the device as it found it
// (and the htb shaper notes the device's length, not the kernel's).
func addClsact(iface netlink.Link) error {
	if err := netlink.QdiscAdd(clsactOf(iface.Attrs().Index)); err != nil {
		return err
	}
	cur, err := netlink.LinkByIndex(iface.Attrs().Index)
	if err != nil || cur.Attrs().TxQLen == iface.Attrs().TxQLen {
		return nil
	}
	if err := netlink.LinkSetTxQLen(cur, iface.Attrs().TxQLen); err != nil {
		deleteClsact(cur)
		return fmt.Errorf("restore txqueuelen %d after adding clsact: %w", iface.Attrs().TxQLen, err)
	}
	return nil
}

func clsactOf(ifindex int) *netlink.GenericQdisc {
	return &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
}

// AddedClsact says whether this attachment added the interface's clsact
// qdisc (legacy attach on a device that had none): the daemon records it
// (maps.RecordOwned), so a later agent or unload removes it once empty.
func (a *Attachment) AddedClsact() bool { return a.createdClsact }

// HasClsact says whether the interface has a clsact qdisc.
func HasClsact(ifindex int) bool {
	link, err := netlink.LinkByIndex(ifindex)
	return err == nil && hasClsact(link)
}

// RemoveAddedClsact deletes the clsact qdisc sluice added on the interface
// (index and name as recorded) once no filter is left under it; it says
// whether it did. A device that is gone, renamed (the index reused), or
// whose clsact still holds a filter, is left.
func RemoveAddedClsact(ifindex int, name string) (bool, error) {
	link, err := netlink.LinkByIndex(ifindex)
	if err != nil || link.Attrs().Name != name || !hasClsact(link) || hasFilters(link) {
		return false, nil
	}
	if err := deleteClsact(link); err != nil {
		return false, err
	}
	return true, nil
}

func hasClsact(iface netlink.Link) bool {
	qdiscs, err := netlink.QdiscList(iface)
	if err != nil {
		return false
	}
	for _, q := range qdiscs {
		if q.Type() == "clsact" {
			return true
		}
	}
	return false
}

func deleteClsact(iface netlink.Link) error {
	if err := netlink.QdiscDel(clsactOf(iface.Attrs().Index)); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("delete clsact qdisc on %s: %w", iface.Attrs().Name, err)
	}
	return nil
}

// hasFilters: some filter, sluice's or another's, is under the clsact qdisc.
func hasFilters(iface netlink.Link) bool {
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		if fs, err := netlink.FilterList(iface, parent); err == nil && len(fs) > 0 {
			return true
		}
	}
	return false
}

// Pin pins the TCX links under dir so they outlive the agent (an agent
// exiting with keep_attached_on_exit); Adopt takes them back. Legacy
// filters outlive the process by themselves.
func (a *Attachment) Pin(dir string) error {
	if a.Mode != TCX {
		return nil
	}
	for i, l := range a.links {
		if err := l.Pin(filepath.Join(dir, linkPinName(a.Index, i))); err != nil {
			return fmt.Errorf("pin link on %s: %w", a.Interface, err)
		}
	}
	return nil
}

// Release forgets the attachment without detaching it (after Pin, or for
// legacy filters): the programs stay on the device.
func (a *Attachment) Release() {
	for _, l := range a.links {
		l.Close() // a pinned link stays attached
	}
	a.links = nil
	a.filters = nil
	a.createdClsact = false
}

// Adopt re-opens pinned TCX links left on an interface by an earlier agent
// and updates them to run the given programs, at the Last position.
func Adopt(dir string, ifindex int, ingress, egress *ebpf.Program) (*Attachment, error) {
	return AdoptAt(dir, ifindex, ingress, egress, Last)
}

// AdoptAt is Adopt at position pos: a link found elsewhere in its chain
// (the other attach_position, or another tool's program attached since at
// the end sluice should hold) is replaced by a new link at pos, made
// before the old one is closed and pinned under the old one's name. It
// refuses (ErrOtherAgent) an interface where another data path's sluice
// programs are attached too, leaving the pinned links as they were.
func AdoptAt(dir string, ifindex int, ingress, egress *ebpf.Program, pos Position) (*Attachment, error) {
	iface, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("find interface %d: %w", ifindex, err)
	}
	a := &Attachment{Interface: iface.Attrs().Name, Index: ifindex, Mode: TCX, Position: pos, ingress: ingress, egress: egress}
	var ids []link.ID
	for i := range 2 {
		l, err := link.LoadPinnedLink(filepath.Join(dir, linkPinName(ifindex, i)), nil)
		if err != nil {
			a.closeLinks()
			return nil, fmt.Errorf("adopt pinned link on %s: %w", a.Interface, err)
		}
		a.links = append(a.links, l)
		if info, err := l.Info(); err == nil {
			ids = append(ids, info.ID)
		}
	}
	if err := a.refuseOtherAgent(ids); err != nil {
		a.closeLinks() // pinned: they stay as they were
		return nil, err
	}
	for i, prog := range []*ebpf.Program{ingress, egress} {
		l := a.links[i]
		if placed(l, hooks[i].tcx, ifindex, pos) {
			if err := l.Update(prog); err != nil {
				a.closeLinks()
				return nil, fmt.Errorf("update adopted link on %s: %w", a.Interface, err)
			}
			continue
		}
		path := filepath.Join(dir, linkPinName(ifindex, i))
		opts := link.TCXOptions{Interface: ifindex, Program: prog, Attach: hooks[i].tcx, Anchor: tcxAnchor(pos)}
		moved, err := link.AttachTCX(opts)
		sameProgram := errors.Is(err, unix.EEXIST) // a hook holds a program once: the old link runs this one
		if err != nil && !sameProgram {
			a.closeLinks()
			return nil, fmt.Errorf("move the %s link on %s to the %s position: %w", hooks[i].name, a.Interface, pos, err)
		}
		a.links[i] = nil
		if err := detachLink(l); err != nil { // the old position
			if moved != nil {
				moved.Close()
			}
			a.closeLinks()
			return nil, fmt.Errorf("move the %s link on %s: detach the old one: %w", hooks[i].name, a.Interface, err)
		}
		if sameProgram {
			// Break before make: the program could not run twice.
			if moved, err = link.AttachTCX(opts); err != nil {
				a.closeLinks()
				return nil, fmt.Errorf("move the %s link on %s to the %s position: %w", hooks[i].name, a.Interface, pos, err)
			}
		}
		a.links[i] = moved
		if err := moved.Pin(path); err != nil {
			a.closeLinks()
			return nil, fmt.Errorf("move the %s link on %s: pin the new one: %w", hooks[i].name, a.Interface, err)
		}
	}
	return a, nil
}

// placed says whether the link stands at pos in its hook's chain: no other
// tool's program after it (Last) or before it (First). sluice's own
// programs do not count; a chain that cannot be read counts as placed
// (the link is kept, not moved on a guess).
func placed(l link.Link, typ ebpf.AttachType, ifindex int, pos Position) bool {
	info, err := l.Info()
	if err != nil {
		return true
	}
	chain, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: typ})
	if err != nil {
		return true
	}
	seen := false
	for _, p := range chain.Programs {
		if id, _ := p.LinkID(); id == info.ID {
			seen = true
			continue
		}
		if name, err := programName(p.ID); err == nil && isSluiceName(name) {
			continue
		}
		if (pos == First) != seen {
			return false // another's before sluice's (First), or after it (Last)
		}
	}
	return true
}

// PinnedInterfaces lists the interfaces (by index) whose TCX links an
// earlier agent pinned under dir.
func PinnedInterfaces(dir string) []int {
	names, _ := filepath.Glob(filepath.Join(dir, "link_*"))
	seen := map[int]bool{}
	var out []int
	for _, n := range names {
		if idx, ok := maps.InterfaceOfLinkPin(n); ok && !seen[idx] {
			seen[idx] = true
			out = append(out, idx)
		}
	}
	return out
}

// DetachPinned detaches the programs an earlier agent left on an
// interface through pinned TCX links, and removes the pins.
func DetachPinned(dir string, ifindex int) error {
	var errs []error
	for i := range 2 {
		path := filepath.Join(dir, linkPinName(ifindex, i))
		l, err := link.LoadPinnedLink(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("open pinned link %s: %w", path, err))
			continue
		}
		errs = append(errs, detachLink(l))
	}
	return errors.Join(errs...)
}

// detachLink is the one place a TCX link of sluice's leaves the kernel: its
// pin removed (already gone is fine), then its last reference closed,
// which detaches the program.
func detachLink(l link.Link) error {
	if l == nil {
		return nil
	}
	var errs []error
	if err := l.Unpin(); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("unpin: %w", err))
	}
	return errors.Join(append(errs, l.Close())...)
}

// linkPinName names link i (0 ingress, 1 egress) in the pin directory,
// whose layout maps knows (sluice unload removes what it names).
func linkPinName(ifindex, i int) string {
	hook := "ingress"
	if i == 1 {
		hook = "egress"
	}
	return maps.LinkPinName(ifindex, hook)
}

// RemoveLeftoverFilters deletes, on every device of this namespace, the
// legacy filters an agent that is gone left attached (sluice_ingress and
// sluice_egress, known by their name and their program's: legacy filters
// have no pins to find them by), and returns the devices it touched. The
// clsact qdiscs they sat under stay here; the ones sluice added go by the
// pinned record (RemoveAddedClsact).
func RemoveLeftoverFilters() (touched []string, err error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list devices: %w", err)
	}
	var errs []error
	for _, link := range links {
		removed, err := removeLeftoverFiltersOn(link)
		errs = append(errs, err)
		if removed {
			touched = append(touched, link.Attrs().Name)
		}
	}
	return touched, errors.Join(errs...)
}

// RemoveLeftoverFiltersOn is RemoveLeftoverFilters on one device: an agent
// that attaches with TCX where an earlier one (attach: clsact) left its
// filters removes them, else both would run.
func RemoveLeftoverFiltersOn(ifindex int) (removed bool, err error) {
	link, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return false, fmt.Errorf("find interface %d: %w", ifindex, err)
	}
	return removeLeftoverFiltersOn(link)
}

func removeLeftoverFiltersOn(link netlink.Link) (removed bool, err error) {
	var errs []error
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		filters, err := netlink.FilterList(link, parent)
		if err != nil {
			continue // no clsact
		}
		for _, f := range filters {
			if b, ok := f.(*netlink.BpfFilter); ok && (b.Name == ingressFilterName || b.Name == egressFilterName) {
				if err := deleteFilter(link, b); errors.Is(err, errForeignFilter) {
					continue // named alike, another program: not sluice's
				} else if err != nil {
					errs = append(errs, fmt.Errorf("delete %s on %s: %w", b.Name, link.Attrs().Name, err))
					continue
				}
				removed = true
			}
		}
	}
	return removed, errors.Join(errs...)
}
