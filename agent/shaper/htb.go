package shaper

import (
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/maps"
)

// The HTB backend. Egress (fetch): an HTB root qdisc on the device with a
// class per shaped entity, chosen by the data path through skb->priority
// (HTB picks the class straight from the priority when its major number is
// the qdisc's handle, so no tc filter is needed). Ingress (produce): the
// data path redirects governed segments to an IFB device carrying the same
// kind of tree; the IFB re-injects them into the receive path. Everything
// not classified takes HTB's direct queue: never shaped.
//
// Each tree is a hierarchy (the seed design's Phase 2 at the NIC): under
// the root, one parent class 1:1 at the direction's capacity; under it,
// every entity's class, with a guaranteed rate equal to its effective
// reservation and a ceiling equal to its dynamic limit (both converted to
// wire bytes), and a bfifo leaf sized from the ceiling and the delay bound.
// HTB serves each class's guarantee first and lends what is left of the
// parent up to each ceiling, so between control cycles reservations hold
// and the direction's total never passes its capacity, however many new
// entities arrive before the loop sees them. The control loop still moves
// the ceilings each second.
//
// What survives an agent restart: the data path's pinned maps
// (connection attribution, classes) and, with keep_attached_on_exit, the
// trees and the IFB. A restarted agent recognises its own trees (root
// 1: htb on the device and on the IFB it names) and adopts them with their
// classes, so every entity stays held at its last rate while the new agent
// starts; nothing is dropped or let through by the restart itself.

const (
	// rootMajor is HTB_MAJOR in bpf/types.h: sluice_egress_select steers
	// the segments whose class id has it.
	rootMajor = 1
	// parentMinor is the class at the direction's capacity every entity's
	// class hangs under.
	parentMinor = 1
	// minors 1..0xfffe; 0 and 0xffff are reserved by tc
	firstMinor = 2
	lastMinor  = 0xfffe
	// classQuantum is the bytes a class may send per round: a GSO segment.
	classQuantum = 64 << 10
	// directQueue bounds HTB's unshaped direct queue (packets).
	directQueue = 10000
	// minRate is the least rate any shaper sets (bytes/s): a limit of 0
	// would stop an entity outright and leave HTB's arithmetic undefined.
	// It is also the guarantee of a class that is promised nothing: HTB
	// needs a rate, and its burst in time (128 KiB at 1 KiB/s) must fit the
	// kernel's 32-bit tick count.
	minRate = 1024
	// unlimitedWire is the parent's rate while no capacity is set: 100 Gbit/s.
	unlimitedWire = 100e9 / 8
)

// ErrForeignRootQdisc: the device's root qdisc was configured by someone
// else; sluice never replaces it.
var ErrForeignRootQdisc = errors.New("device has a root qdisc sluice did not create")

// HTB is the htb backend for one interface.
type HTB struct {
	classes ClassWriter
	delay   time.Duration
	trees   [2]*htbTree // indexed by maps.Direction
	ifb     netlink.Link
	// Several interfaces (shared.go): the IFB carrying the egress tree,
	// and the filters on each interface that steer segments to it.
	egressIFB netlink.Link
	steered   []int // interface indexes
	// addedClsact: the interfaces whose clsact qdisc this shaper added for
	// its steering filter (index → name), removed again once empty.
	addedClsact map[int]string
	// in runs netlink work in the interface's network namespace (netlink
	// acts in the calling thread's namespace).
	in func(func() error) error
	// nl keeps one netlink socket open (in that namespace) for the class
	// changes of every cycle: a socket per request costs more than the
	// change itself.
	nl *netlink.Handle
	// sock carries batched class changes (see batch).
	sock *nl.NetlinkSocket
}

// InCurrentNamespace runs fn as is: for an agent in the host namespace.
func InCurrentNamespace(fn func() error) error { return fn() }

var _ shaping.Shaper = (*HTB)(nil)

type htbTree struct {
	link     netlink.Link
	capacity float64 // the parent's wire bytes/s
	entity   map[uint32]*htbClass
	free     []uint16
	next     uint16
	removed  bool
}

type htbClass struct {
	minor      uint16
	wire       float64 // ceiling set, wire bytes/s
	guaranteed float64 // rate set, wire bytes/s
	queue      uint32  // leaf limit set
	drops      uint32
	overlimits uint32
}

// NewHTB builds the egress tree on the interface and the ingress tree on
// a new IFB device. delay bounds each entity's queueing delay. On failure
// nothing is left behind.
func NewHTB(ifindex int, classes ClassWriter, delay time.Duration, in func(func() error) error) (*HTB, error) {
	if in == nil {
		in = InCurrentNamespace
	}
	var h *HTB
	err := in(func() (err error) {
		h, err = newHTB(ifindex, classes, delay)
		return err
	})
	if h != nil {
		h.in = in
	}
	return h, err
}

func newHTB(ifindex int, classes ClassWriter, delay time.Duration) (*HTB, error) {
	dev, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("htb: find interface %d: %w", ifindex, err)
	}
	if err := checkRootQdisc(dev, ifindex); err != nil {
		return nil, err
	}
	if err := removeSharedLeftovers(ifindex); err != nil {
		return nil, err
	}
	h, err := openHTB(classes, delay)
	if err != nil {
		return nil, err
	}
	// A tree left by an earlier sluice agent (keep_attached_on_exit) is
	// adopted as it stands: its classes keep holding their entities at the
	// last rates while this agent starts, and the data path's class ids
	// stay valid. Anything less than both of our trees is rebuilt.
	ifb, err := LeftIFB(IFBName(ifindex))
	if err != nil {
		h.close()
		return nil, err
	}
	if ifb != nil {
		if ownTree(dev) && ownTree(ifb) {
			if err := h.adopt(dev, ifb); err == nil {
				return h, nil
			}
			h.trees = [2]*htbTree{}
		}
		restoreRoot(dev, ifb)
		DeleteIFB(ifb)
	}
	// Class ids pinned by an earlier agent or backend mean nothing to a new tree.
	if err := classes.ClearClasses(); err != nil {
		h.close()
		return nil, err
	}
	egress, err := newTree(dev)
	if err != nil {
		h.close()
		return nil, fmt.Errorf("htb on %s: %w", dev.Attrs().Name, err)
	}
	h.trees[maps.Fetch] = egress
	if h.ifb, h.trees[maps.Produce], err = newIFBTree(IFBName(ifindex)); err != nil {
		h.close()
		return nil, err
	}
	if err := noteQueueLen(h.ifb, dev); err != nil {
		h.close()
		return nil, fmt.Errorf("htb: note %s's queue length: %w", dev.Attrs().Name, err)
	}
	return h, nil
}

// openHTB opens the netlink sockets an htb backend keeps (in the calling
// thread's namespace), before it has any tree.
func openHTB(classes ClassWriter, delay time.Duration) (*HTB, error) {
	nlh, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("htb: netlink: %w", err)
	}
	sock, err := newBatchSocket()
	if err != nil {
		nlh.Close()
		return nil, fmt.Errorf("htb: netlink: %w", err)
	}
	return &HTB{classes: classes, delay: delay, in: InCurrentNamespace, nl: nlh, sock: sock, addedClsact: map[int]string{}}, nil
}

// adopt takes over the trees an earlier agent left: each entity the data
// path steers into one of its classes keeps that class (and its rate until
// the first cycle writes one); entries pointing at no class are unset, and
// classes no entity uses are removed.
func (h *HTB) adopt(dev, ifb netlink.Link) error {
	for dir, link := range map[maps.Direction]netlink.Link{maps.Fetch: dev, maps.Produce: ifb} {
		list, err := h.nl.ClassList(link, netlink.MakeHandle(rootMajor, 0))
		if err != nil {
			return fmt.Errorf("htb: list classes of %s: %w", link.Attrs().Name, err)
		}
		existing := map[uint16]*netlink.HtbClass{}
		var parent *netlink.HtbClass
		for _, cl := range list {
			htb, ok := cl.(*netlink.HtbClass)
			minor := uint16(cl.Attrs().Handle & 0xffff)
			switch {
			case !ok || cl.Attrs().Handle>>16 != rootMajor:
			case minor == parentMinor: // its parent reads as the root (TC_H_ROOT)
				parent = htb
			case minor >= firstMinor && minor <= lastMinor && cl.Attrs().Parent == netlink.MakeHandle(rootMajor, parentMinor):
				existing[minor] = htb
			}
		}
		if parent == nil {
			// A flat tree from an agent before the hierarchy: classes
			// cannot change parent, so it is rebuilt.
			return fmt.Errorf("htb: %s has no parent class 1:%d", link.Attrs().Name, parentMinor)
		}
		bound, err := h.classes.Classes(dir)
		if err != nil {
			return err
		}
		t := &htbTree{link: link, capacity: float64(parent.Rate), entity: map[uint32]*htbClass{}, next: firstMinor}
		used := map[uint16]bool{}
		for entity, classID := range bound {
			minor := uint16(classID & 0xffff)
			cl := existing[minor]
			if classID>>16 != rootMajor || cl == nil || used[minor] {
				if err := h.classes.SetClass(dir, entity, 0); err != nil {
					return err
				}
				continue
			}
			used[minor] = true
			c := &htbClass{minor: minor, wire: float64(cl.Ceil), guaranteed: float64(cl.Rate)} // the kernel reports bytes/s
			if st := cl.Attrs().Statistics; st != nil && st.Queue != nil {
				c.drops, c.overlimits = st.Queue.Drops, st.Queue.Overlimits
			}
			t.entity[entity] = c
			t.next = max(t.next, minor+1)
		}
		for minor, cl := range existing {
			if !used[minor] {
				h.deleteClass(cl) // a class no entity uses: best effort, it holds nobody
			}
		}
		for minor := uint16(firstMinor); minor < t.next; minor++ {
			if !used[minor] {
				t.free = append(t.free, minor)
			}
		}
		h.trees[dir] = t
	}
	h.ifb = ifb
	return nil
}

// IFBIndex is the ingress redirect target the data path needs.
func (h *HTB) IFBIndex() int { return h.ifb.Attrs().Index }

// Kind implements Shaper.
func (h *HTB) Kind() shaping.Kind { return shaping.KindHTB }

func newTree(link netlink.Link) (*htbTree, error) {
	qlen := uint32(directQueue)
	root := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(rootMajor, 0), Parent: netlink.HANDLE_ROOT})
	root.Defcls = 0 // unclassified traffic: HTB's direct queue, never shaped
	root.DirectQlen = &qlen
	root.Rate2Quantum = treeMarker // sluice's mark (every class sets its quantum)
	if err := netlink.QdiscReplace(root); err != nil {
		return nil, fmt.Errorf("add root htb: %w", err)
	}
	t := &htbTree{link: link, capacity: unlimitedWire, entity: map[uint32]*htbClass{}, next: firstMinor}
	if err := netlink.ClassReplace(t.parentClass()); err != nil {
		return nil, fmt.Errorf("add the parent class: %w", err)
	}
	return t, nil
}

// AddedClsact lists the interfaces whose clsact qdisc this shaper added for
// its steering filters (index → name): the daemon records them
// (maps.RecordOwned).
func (h *HTB) AddedClsact() map[int]string {
	out := make(map[int]string, len(h.addedClsact))
	for idx, name := range h.addedClsact {
		out[idx] = name
	}
	return out
}

// newIFBTree creates an IFB device, brings it up and puts a tree on it.
func newIFBTree(name string) (netlink.Link, *htbTree, error) {
	link, err := newIFB(name)
	if err != nil {
		return nil, nil, fmt.Errorf("htb: %w", err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("htb: bring up %s: %w", name, err), DeleteIFB(link))
	}
	t, err := newTree(link)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("htb on %s: %w", name, err), DeleteIFB(link))
	}
	return link, t, nil
}

// Close implements Shaper: classes are unset in the data path, the root
// qdisc sluice added is deleted (the kernel restores its default), and the
// IFB is removed.
func (h *HTB) Close() error {
	return h.in(h.close)
}

func (h *HTB) close() error {
	var errs []error
	for dir, t := range h.trees {
		if t == nil {
			continue
		}
		for entity := range t.entity {
			errs = append(errs, h.classes.SetClass(maps.Direction(dir), entity, 0))
		}
		t.entity = map[uint32]*htbClass{}
	}
	// Nothing is steered to the egress IFB once it is going.
	for _, idx := range h.steered {
		errs = append(errs, attach.Unsteer(idx))
	}
	h.steered = nil
	for idx, name := range h.addedClsact {
		_, err := attach.RemoveAddedClsact(idx, name)
		errs = append(errs, err)
	}
	h.addedClsact = nil
	if h.egressIFB != nil {
		if err := DeleteIFB(h.egressIFB); err != nil {
			errs = append(errs, fmt.Errorf("htb: %w", err))
		}
		h.egressIFB = nil
		h.trees[maps.Fetch] = nil // it went with its device
	}
	if t := h.trees[maps.Fetch]; t != nil {
		if err := restoreRoot(t.link, h.ifb); err != nil {
			errs = append(errs, fmt.Errorf("htb: delete root qdisc of %s: %w", t.link.Attrs().Name, err))
		}
	}
	if h.ifb != nil {
		if err := DeleteIFB(h.ifb); err != nil {
			errs = append(errs, fmt.Errorf("htb: %w", err))
		}
		h.ifb = nil
	}
	h.trees = [2]*htbTree{}
	if h.nl != nil {
		h.nl.Close()
		h.nl = nil
	}
	if h.sock != nil {
		h.sock.Close()
		h.sock = nil
	}
	return errors.Join(errs...)
}
