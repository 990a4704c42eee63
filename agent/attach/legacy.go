package attach

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The fallback attachment on kernels without TCX: a clsact qdisc (added only
// when the interface had none) and tc BPF filters at a free pref, found
// again by their name, never by their position.

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
