package attach

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Steering: the htb shaper on several interfaces sends each interface's
// classified egress segments through one IFB device. A BPF redirect cannot
// do that (the IFB sends back only what names its device of origin in
// skb_iif, which tc's mirred action sets and bpf_redirect does not), so each
// interface gets a classic cls_bpf egress filter, after sluice_egress,
// running a select program with a mirred action to the IFB.
const (
	// steerFilterName names the egress filter, so that sluice removes
	// exactly its own.
	steerFilterName = "sluice_egress_select"
	// steerFilterPriority runs after sluice_egress's legacy filter.
	steerFilterPriority = 0xc000
)

// Steer puts the egress filter on an interface: selectProg (classic mode:
// a nonzero return is a match) and a mirred egress redirect to target,
// under the interface's clsact qdisc (added if it has none: addedClsact
// says so, and the caller removes it with RemoveAddedClsact when done). An
// earlier agent's filter is replaced in place, so no segment passes
// unsteered meanwhile. On failure nothing is left behind.
func Steer(ifindex int, selectProg *ebpf.Program, target int) (addedClsact bool, err error) {
	link, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return false, fmt.Errorf("find interface %d: %w", ifindex, err)
	}
	if !hasClsact(link) {
		if err := addClsact(link); err != nil {
			return false, fmt.Errorf("add clsact qdisc on %s: %w", link.Attrs().Name, err)
		}
		addedClsact = true
	}
	undo := func() {
		Unsteer(ifindex)
		if addedClsact {
			RemoveAddedClsact(ifindex, link.Attrs().Name)
		}
	}
	s, err := steerSlot(link)
	if err != nil {
		undo()
		return false, err
	}
	if err := addSteerFilter(ifindex, selectProg.FD(), target, s.pref, s.own); err != nil {
		undo()
		if errors.Is(err, unix.EEXIST) {
			return false, fmt.Errorf("add the egress steering filter on %s: pref %d handle 1 was taken meanwhile by another filter; sluice does not replace it: %w", link.Attrs().Name, s.pref, err)
		}
		return false, fmt.Errorf("add the egress steering filter on %s: %w", link.Attrs().Name, err)
	}
	// An earlier agent's steering filter ahead of sluice_egress's goes once
	// the new one runs after it.
	if s.stale != nil {
		if err := deleteFilter(link, s.stale); err != nil && !errors.Is(err, errForeignFilter) {
			undo()
			return false, fmt.Errorf("move the egress steering filter on %s from pref %d: %w", link.Attrs().Name, s.stale.Priority, err)
		}
	}
	return addedClsact, nil
}

// steerSlot is the pref of the steering filter, which must run after
// sluice_egress (it reads the class sluice_egress sets): where an earlier
// agent's is, if that is after sluice_egress's filter (own: replaced in
// place); else steerFilterPriority, or one after sluice_egress's legacy
// filter when that is later, if no filter uses it (what a plain `tc filter
// add … egress` gets, so an operator's filter may well be there), else the
// next pref no filter uses. stale is an earlier agent's steering filter
// elsewhere, deleted once the new one is in.
func steerSlot(link netlink.Link) (s slot, err error) {
	filters, err := netlink.FilterList(link, netlink.HANDLE_MIN_EGRESS)
	if err != nil {
		return slot{}, fmt.Errorf("list egress filters of %s: %w", link.Attrs().Name, err)
	}
	used := map[uint16]bool{}
	base := uint32(steerFilterPriority)
	var mine *netlink.BpfFilter
	for _, f := range filters {
		used[f.Attrs().Priority] = true
		bf, ok := f.(*netlink.BpfFilter)
		switch {
		case ok && isSluiceFilter(bf, steerFilterName) && mine == nil:
			mine = bf
		case ok && isSluiceFilter(bf, egressFilterName):
			base = max(base, uint32(bf.Priority)+1)
		}
	}
	if mine != nil && uint32(mine.Priority) >= base {
		return slot{pref: mine.Priority, own: true}, nil
	}
	for base <= 0xffff && used[uint16(base)] {
		base++
	}
	if base > 0xffff {
		return slot{}, fmt.Errorf("%w: on %s egress no pref after sluice_egress's filter is free for the steering filter", ErrNoSlot, link.Attrs().Name)
	}
	return slot{pref: uint16(base), stale: mine}, nil
}

// addSteerFilter sends what `tc filter add (or, for its own, replace) dev X
// egress pref P handle 1 bpf fd F action mirred egress redirect dev T`
// sends: the netlink package encodes no actions on bpf filters.
func addSteerFilter(ifindex, progFD, target int, pref uint16, own bool) error {
	flags := unix.NLM_F_CREATE | unix.NLM_F_EXCL | unix.NLM_F_ACK // never another's slot
	if own {
		flags = unix.NLM_F_CREATE | unix.NLM_F_REPLACE | unix.NLM_F_ACK // an earlier agent's, in place
	}
	req := nl.NewNetlinkRequest(unix.RTM_NEWTFILTER, flags)
	req.AddData(&nl.TcMsg{
		Family:  nl.FAMILY_ALL,
		Ifindex: int32(ifindex),
		Handle:  netlink.MakeHandle(0, 1),
		Parent:  netlink.HANDLE_MIN_EGRESS,
		Info:    netlink.MakeHandle(pref, nl.Swap16(unix.ETH_P_ALL)),
	})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("bpf")))
	options := nl.NewRtAttr(nl.TCA_OPTIONS, nil)
	options.AddRtAttr(nl.TCA_BPF_FD, nl.Uint32Attr(uint32(progFD)))
	options.AddRtAttr(nl.TCA_BPF_NAME, nl.ZeroTerminated(steerFilterName))
	options.AddRtAttr(nl.TCA_BPF_FLAGS, nl.Uint32Attr(0)) // classic, not direct action
	actions := options.AddRtAttr(nl.TCA_BPF_ACT, nil)
	if err := netlink.EncodeActions(actions, []netlink.Action{netlink.NewMirredAction(target)}); err != nil {
		return err
	}
	req.AddData(options)
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// Unsteer removes every steering filter on the interface (its own, or an
// earlier agent's). The clsact qdisc stays: whether sluice added it is in
// the pinned record (maps.RecordOwned), and the agent that stops
// last, or `sluice unload`, removes it from there once empty
// (RemoveAddedClsact). A missing interface has nothing left to remove.
func Unsteer(ifindex int) error {
	link, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil
	}
	filters, err := netlink.FilterList(link, netlink.HANDLE_MIN_EGRESS)
	if err != nil {
		return nil // no clsact: nothing to remove
	}
	var errs []error
	for _, f := range filters {
		if bf, ok := f.(*netlink.BpfFilter); ok && bf.Name == steerFilterName {
			if err := deleteFilter(link, bf); err != nil && !errors.Is(err, errForeignFilter) {
				errs = append(errs, fmt.Errorf("delete the egress steering filter on %s: %w", link.Attrs().Name, err))
			}
		}
	}
	return errors.Join(errs...)
}
