package shaper

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/agent/attach"
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

// steerAll puts the egress steering filter on every interface.
func (h *HTB) steerAll(ifindexes []int, selectProg *ebpf.Program) error {
	for _, idx := range ifindexes {
		added, err := attach.Steer(idx, selectProg, h.egressIFB.Attrs().Index)
		if err != nil {
			return fmt.Errorf("htb: %w", err)
		}
		h.steered = append(h.steered, idx)
		if added {
			if link, err := netlink.LinkByIndex(idx); err == nil {
				h.addedClsact[idx] = link.Attrs().Name
			}
		}
	}
	return nil
}

// EgressIFBIndex is the shared egress tree's device, 0 when the egress
// tree sits on the one interface.
func (h *HTB) EgressIFBIndex() int {
	if h.egressIFB == nil {
		return 0
	}
	return h.egressIFB.Attrs().Index
}

// removeSharedLeftovers deletes what an earlier agent's shared trees left
// with this interface: its steering filter and, if the interface was the
// first, the two IFB devices.
func removeSharedLeftovers(ifindex int) error {
	var errs []error
	errs = append(errs, attach.Unsteer(ifindex))
	for _, name := range []string{sharedIngressIFBName(ifindex), sharedEgressIFBName(ifindex)} {
		ifb, err := LeftIFB(name)
		if err != nil {
			errs = append(errs, err)
		}
		if ifb != nil {
			if err := DeleteIFB(ifb); err != nil {
				errs = append(errs, fmt.Errorf("htb: the IFB left by an earlier agent: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}
