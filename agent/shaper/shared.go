package shaper

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/maps"
)

// htb on several interfaces: one tree per direction for the whole host,
// each on an IFB device every interface sends its governed segments
// through. The control loop allocates one capacity per direction across
// the host, and an entity's connections may arrive on any interface; a
// tree per interface would give an entity its ceiling once per interface
// (a client that spreads its connections would multiply its limit) and
// would need the capacity split by a traffic mix nobody configures.
//
// Ingress needs nothing new: every interface's sluice_ingress redirects to
// the one ingress IFB. Egress cannot go there by a BPF redirect (the IFB
// sends a segment back only to the device its skb_iif names, which only
// tc's mirred action sets for locally sent packets), so each interface
// gets a classic cls_bpf egress filter, after sluice_egress, running
// sluice_egress_select with a mirred action to the egress IFB. The
// interfaces' own root qdiscs (mq on a NIC) stay as they are.
//
// A restarted agent adopts the shared trees an earlier one left
// (keep_attached_on_exit) as it adopts a one-interface tree, and puts its
// own select program in each interface's filter in place of the old one.

// Names of the shared IFB devices, after the first configured interface.
func sharedIngressIFBName(ifindex int) string { return fmt.Sprintf("slifbi%d", ifindex) }
func sharedEgressIFBName(ifindex int) string  { return fmt.Sprintf("slifbe%d", ifindex) }

const (
	// steerFilterName names the egress filter on each interface, so that
	// sluice removes exactly its own.
	steerFilterName = "sluice_egress_select"
	// steerFilterPriority runs after sluice_egress's legacy filter (1).
	steerFilterPriority = 0xc000
)

// steer is the egress filter on one interface.
type steer struct {
	ifindex int
}

// NewSharedHTB builds the htb backend for several interfaces: the ingress
// and egress trees on two new IFB devices, and on each interface an egress
// filter running selectProg (maps.Datapath.EgressSelectProgram) that moves
// classified segments to the egress IFB. On failure nothing is left behind.
func NewSharedHTB(ifindexes []int, classes ClassWriter, delay time.Duration, selectProg *ebpf.Program, in func(func() error) error) (*HTB, error) {
	if len(ifindexes) < 2 {
		return nil, fmt.Errorf("htb: a shared tree is for several interfaces, %d given", len(ifindexes))
	}
	if in == nil {
		in = InCurrentNamespace
	}
	var h *HTB
	err := in(func() (err error) {
		h, err = newSharedHTB(ifindexes, classes, delay, selectProg)
		return err
	})
	if h != nil {
		h.in = in
	}
	return h, err
}

func newSharedHTB(ifindexes []int, classes ClassWriter, delay time.Duration, selectProg *ebpf.Program) (*HTB, error) {
	for _, idx := range ifindexes {
		if _, err := netlink.LinkByIndex(idx); err != nil {
			return nil, fmt.Errorf("htb: find interface %d: %w", idx, err)
		}
	}
	h, err := openHTB(classes, delay)
	if err != nil {
		return nil, err
	}
	// Trees an earlier agent left (keep_attached_on_exit) are adopted with
	// their classes; anything less than both is removed and rebuilt.
	ingress, ierr := netlink.LinkByName(sharedIngressIFBName(ifindexes[0]))
	egress, eerr := netlink.LinkByName(sharedEgressIFBName(ifindexes[0]))
	if ierr == nil && eerr == nil && ownTree(ingress) && ownTree(egress) {
		if err := h.adopt(egress, ingress); err == nil {
			h.egressIFB = egress
			if err := h.steerAll(ifindexes, selectProg); err != nil {
				h.close()
				return nil, err
			}
			return h, nil
		}
		h.trees = [2]*htbTree{}
		h.ifb = nil
	}
	for _, idx := range ifindexes {
		if err := removeSharedLeftovers(idx); err != nil {
			h.close()
			return nil, err
		}
	}
	if err := classes.ClearClasses(); err != nil {
		h.close()
		return nil, err
	}
	if h.ifb, h.trees[maps.Produce], err = newIFBTree(sharedIngressIFBName(ifindexes[0])); err != nil {
		h.close()
		return nil, err
	}
	if h.egressIFB, h.trees[maps.Fetch], err = newIFBTree(sharedEgressIFBName(ifindexes[0])); err != nil {
		h.close()
		return nil, err
	}
	if err := h.steerAll(ifindexes, selectProg); err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

// steerAll puts the egress filter on every interface.
func (h *HTB) steerAll(ifindexes []int, selectProg *ebpf.Program) error {
	for _, idx := range ifindexes {
		s, err := addSteer(idx, selectProg, h.egressIFB.Attrs().Index)
		if err != nil {
			return err
		}
		h.steers = append(h.steers, s)
	}
	return nil
}

// newIFBTree creates an IFB device, brings it up and puts a tree on it.
func newIFBTree(name string) (netlink.Link, *htbTree, error) {
	if err := netlink.LinkAdd(&netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: name, TxQLen: 1000}}); err != nil {
		return nil, nil, fmt.Errorf("htb: create %s: %w", name, err)
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		return nil, nil, fmt.Errorf("htb: find %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		netlink.LinkDel(link)
		return nil, nil, fmt.Errorf("htb: bring up %s: %w", name, err)
	}
	t, err := newTree(link)
	if err != nil {
		netlink.LinkDel(link)
		return nil, nil, fmt.Errorf("htb on %s: %w", name, err)
	}
	return link, t, nil
}

// EgressIFBIndex is the shared egress tree's device, 0 when the egress
// tree sits on the one interface.
func (h *HTB) EgressIFBIndex() int {
	if h.egressIFB == nil {
		return 0
	}
	return h.egressIFB.Attrs().Index
}

// addSteer puts the egress filter on an interface, under its clsact qdisc
// (added if it has none); an earlier agent's filter is replaced in place,
// so no segment passes unsteered meanwhile.
func addSteer(ifindex int, selectProg *ebpf.Program, egressIFB int) (steer, error) {
	s := steer{ifindex: ifindex}
	link, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return s, fmt.Errorf("htb: find interface %d: %w", ifindex, err)
	}
	if !hasClsact(link) {
		if err := netlink.QdiscAdd(clsactOf(ifindex)); err != nil {
			return s, fmt.Errorf("htb: add clsact qdisc on %s: %w", link.Attrs().Name, err)
		}
	}
	if err := addSelectFilter(ifindex, selectProg.FD(), egressIFB); err != nil {
		s.remove()
		return s, fmt.Errorf("htb: add the egress filter on %s: %w", link.Attrs().Name, err)
	}
	return s, nil
}

// addSelectFilter adds a cls_bpf filter in classic mode (a nonzero return
// is a match) with a mirred egress redirect to the IFB: what `tc filter add
// dev X egress bpf fd F action mirred egress redirect dev IFB` sends. The
// netlink package encodes no actions on bpf filters, so the request is
// built here.
func addSelectFilter(ifindex, progFD, egressIFB int) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{
		Family:  nl.FAMILY_ALL,
		Ifindex: int32(ifindex),
		Handle:  netlink.MakeHandle(0, 1),
		Parent:  netlink.HANDLE_MIN_EGRESS,
		Info:    netlink.MakeHandle(steerFilterPriority, nl.Swap16(unix.ETH_P_ALL)),
	})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("bpf")))
	options := nl.NewRtAttr(nl.TCA_OPTIONS, nil)
	options.AddRtAttr(nl.TCA_BPF_FD, nl.Uint32Attr(uint32(progFD)))
	options.AddRtAttr(nl.TCA_BPF_NAME, nl.ZeroTerminated(steerFilterName))
	options.AddRtAttr(nl.TCA_BPF_FLAGS, nl.Uint32Attr(0)) // classic, not direct action
	actions := options.AddRtAttr(nl.TCA_BPF_ACT, nil)
	if err := netlink.EncodeActions(actions, []netlink.Action{netlink.NewMirredAction(egressIFB)}); err != nil {
		return err
	}
	req.AddData(options)
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// remove deletes the filter (and the clsact qdisc, if nothing is left
// under it).
func (s steer) remove() error {
	link, err := netlink.LinkByIndex(s.ifindex)
	if err != nil {
		return nil // the interface is gone, and its filters with it
	}
	return deleteSteerFilters(link)
}

// deleteSteerFilters removes every egress filter sluice_egress_select
// runs on the link (its own, or an earlier agent's), then the clsact
// qdisc if no filter at all is left under it. Whoever added the clsact,
// an empty one does nothing; sluice_egress's own legacy filters, if any,
// keep it (attach removes it with them).
func deleteSteerFilters(link netlink.Link) error {
	filters, err := netlink.FilterList(link, netlink.HANDLE_MIN_EGRESS)
	if err != nil {
		return nil // no clsact: nothing to remove
	}
	var errs []error
	removed := false
	for _, f := range filters {
		if bf, ok := f.(*netlink.BpfFilter); ok && bf.Name == steerFilterName {
			if err := netlink.FilterDel(bf); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("htb: delete the egress filter on %s: %w", link.Attrs().Name, err))
			}
			removed = true
		}
	}
	if removed && len(errs) == 0 && !hasEgressOrIngressFilters(link) {
		if err := netlink.QdiscDel(clsactOf(link.Attrs().Index)); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("htb: delete clsact qdisc on %s: %w", link.Attrs().Name, err))
		}
	}
	return errors.Join(errs...)
}

// removeSharedLeftovers deletes what an earlier agent's shared trees left
// with this interface: its steering filter and, if the interface was the
// first, the two IFB devices.
func removeSharedLeftovers(ifindex int) error {
	var errs []error
	if link, err := netlink.LinkByIndex(ifindex); err == nil {
		errs = append(errs, deleteSteerFilters(link))
	}
	for _, name := range []string{sharedIngressIFBName(ifindex), sharedEgressIFBName(ifindex)} {
		if ifb, err := netlink.LinkByName(name); err == nil {
			if err := netlink.LinkDel(ifb); err != nil {
				errs = append(errs, fmt.Errorf("htb: delete %s left by an earlier agent: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func clsactOf(ifindex int) *netlink.GenericQdisc {
	return &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
}

func hasClsact(link netlink.Link) bool {
	qdiscs, err := netlink.QdiscList(link)
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

func hasEgressOrIngressFilters(link netlink.Link) bool {
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		if fs, err := netlink.FilterList(link, parent); err == nil && len(fs) > 0 {
			return true
		}
	}
	return false
}
