package shaper

import (
	"errors"
	"fmt"
	"github.com/sluice-dev/sluice/agent/shaping"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/agent/config"
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

// RemoveLeftoverTrees deletes the htb trees an earlier agent left on the
// interface (keep_attached_on_exit) when this one shapes without them
// (shadow, police): its IFB and the root htb it names.
func RemoveLeftoverTrees(ifindex int, in func(func() error) error) error {
	if in == nil {
		in = InCurrentNamespace
	}
	return in(func() error {
		if err := removeSharedLeftovers(ifindex); err != nil {
			return err
		}
		ifb, err := LeftIFB(IFBName(ifindex))
		if ifb == nil {
			return err // none left (or the name is not an IFB's: left alone)
		}
		dev, err := netlink.LinkByIndex(ifindex)
		if err != nil {
			return fmt.Errorf("htb: find interface %d: %w", ifindex, err)
		}
		if ownTree(dev) {
			if err := restoreRoot(dev, ifb); err != nil {
				return fmt.Errorf("htb: delete the tree left on %s: %w", dev.Attrs().Name, err)
			}
		}
		if err := DeleteIFB(ifb); err != nil {
			return fmt.Errorf("htb: the IFB left by an earlier agent: %w", err)
		}
		return nil
	})
}

// treeMarker is the r2q sluice sets on every htb root it creates, its
// mark on the tree. A root is known as sluice's by this mark together with
// sluice's handle (1:), default class 0 and direct queue (directQueue),
// never by the handle alone: `tc qdisc add … root handle 1: htb` is what
// an operator types too. r2q is the mark because it is kept and dumped by
// the kernel verbatim, survives the agent (a kept tree carries it for the
// next one), and changes nothing sluice does: it only derives the quantum
// of classes created without one, and every class sluice makes sets its
// quantum (classQuantum). An operator's htb has r2q 10 (tc's default) or a
// value chosen for its own classes; 0x51ce ("slce") is none of tc's.
const treeMarker = 0x51ce

// earlierR2Q is the r2q of trees from releases before treeMarker (tc's and
// the netlink package's default): such a tree is sluice's only beside
// sluice's IFB for the device carrying one as well (earlierTree).
const earlierR2Q = 10

type treeIdentity int

const (
	notOurs treeIdentity = iota
	// marked: an htb root with sluice's mark (treeMarker).
	marked
	// earlier: sluice's signature (handle, default class, direct queue)
	// without the mark, as releases before it made it; sluice's only with
	// sluice's IFB beside it (earlierTree).
	earlier
)

// treeOf reads the link's root qdisc as sluice's htb tree or not.
func treeOf(link netlink.Link) treeIdentity {
	qdiscs, err := netlink.QdiscList(link)
	if err != nil {
		return notOurs
	}
	for _, q := range qdiscs {
		a := q.Attrs()
		if a.Parent != netlink.HANDLE_ROOT {
			continue
		}
		h, ok := q.(*netlink.Htb)
		if !ok || a.Handle != netlink.MakeHandle(rootMajor, 0) || h.Defcls != 0 || h.DirectQlen == nil || *h.DirectQlen != directQueue {
			return notOurs
		}
		switch h.Rate2Quantum {
		case treeMarker:
			return marked
		case earlierR2Q:
			return earlier
		}
		return notOurs
	}
	return notOurs
}

// ownTree: the link's root qdisc is the htb tree sluice puts there (its
// mark), or an earlier release's beside that release's IFB.
func ownTree(link netlink.Link) bool {
	switch treeOf(link) {
	case marked:
		return true
	case earlier:
		return earlierTree(link)
	}
	return false
}

// earlierTree: an unmarked tree with sluice's signature on link is an
// earlier release's when it is on one of sluice's IFB devices (alias
// "sluice: …", or sluice's IFB name), or on an interface whose IFB (IFBName, or the shared
// trees' slifbi) is sluice's and carries such a tree too.
func earlierTree(link netlink.Link) bool {
	if link.Type() == "ifb" {
		// Releases before the alias left their IFB without it: the name
		// and the whole signature on it say sluice made it.
		return strings.HasPrefix(link.Attrs().Alias, "sluice:") || ifbNames.MatchString(link.Attrs().Name)
	}
	for _, name := range []string{IFBName(link.Attrs().Index), sharedIngressIFBName(link.Attrs().Index)} {
		ifb, err := netlink.LinkByName(name)
		if err == nil && ifb.Type() == "ifb" && strings.HasPrefix(ifb.Attrs().Alias, "sluice:") && treeOf(ifb) != notOurs {
			return true
		}
	}
	return false
}

// ownRoot: the link's root qdisc is one sluice puts there, of that kind
// (htb, or the edt backend's fq), at sluice's handle.
func ownRoot(link netlink.Link, kind string) bool {
	qdiscs, err := netlink.QdiscList(link)
	if err != nil {
		return false
	}
	for _, q := range qdiscs {
		if a := q.Attrs(); a.Parent == netlink.HANDLE_ROOT {
			return q.Type() == kind && a.Handle == netlink.MakeHandle(rootMajor, 0)
		}
	}
	return false
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

// CheckRoot says whether the htb backend would accept the interface's
// root qdisc (nil) or refuse it, and why (check-config's prediction).
func CheckRoot(ifname string) error {
	dev, err := netlink.LinkByName(ifname)
	if err != nil {
		return err
	}
	return checkRootQdisc(dev, dev.Attrs().Index)
}

// checkRootQdisc allows only the kernel's default root (handle 0:, which
// deleting our root restores) or a tree sluice left itself.
func checkRootQdisc(dev netlink.Link, ifindex int) error {
	qdiscs, err := netlink.QdiscList(dev)
	if err != nil {
		return fmt.Errorf("htb: list qdiscs of %s: %w", dev.Attrs().Name, err)
	}
	for _, q := range qdiscs {
		a := q.Attrs()
		if a.Parent != netlink.HANDLE_ROOT || a.Handle == 0 {
			continue
		}
		if ownTree(dev) {
			return nil // ours, from an earlier agent: known by its mark, not its handle
		}
		return fmt.Errorf("%w: %s root is %s %x:; remove it, run with shaper: police or shadow, or let sluice replace it with replace_root_qdisc: true",
			ErrForeignRootQdisc, dev.Attrs().Name, q.Type(), a.Handle>>16)
	}
	return nil
}

// ReplaceForeignRoot deletes a root qdisc sluice did not create on the
// interface, so that the kernel's default takes its place and the htb or
// edt backend accepts the device: what replace_root_qdisc: true asks for.
// It returns what it deleted ("" when the root was the kernel's default or
// sluice's own). The operator's root is not put back when sluice's tree
// goes: the kernel's default is.
func ReplaceForeignRoot(ifindex int, in func(func() error) error) (replaced string, err error) {
	if in == nil {
		in = InCurrentNamespace
	}
	err = in(func() error {
		dev, err := netlink.LinkByIndex(ifindex)
		if err != nil {
			return fmt.Errorf("find interface %d: %w", ifindex, err)
		}
		if checkRootQdisc(dev, ifindex) == nil {
			return nil
		}
		qdiscs, err := netlink.QdiscList(dev)
		if err != nil {
			return fmt.Errorf("list qdiscs of %s: %w", dev.Attrs().Name, err)
		}
		for _, q := range qdiscs {
			if a := q.Attrs(); a.Parent == netlink.HANDLE_ROOT && a.Handle != 0 {
				if err := deleteRootQdisc(q); err != nil {
					return fmt.Errorf("replace_root_qdisc: delete %s's root %s %x:: %w", dev.Attrs().Name, q.Type(), a.Handle>>16, err)
				}
				replaced = fmt.Sprintf("%s %x: on %s", q.Type(), a.Handle>>16, dev.Attrs().Name)
			}
		}
		return nil
	})
	return replaced, err
}

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

// deleteRoot is the one deleter of the root qdiscs sluice adds: it deletes
// link's root when it is sluice's, its htb tree (ownTree: by the mark, not
// the handle) or the edt backend's fq at sluice's handle (ownRoot), and the
// kernel's default takes its place. A default root (handle 0:) is nothing
// to delete; any other root is refused with ErrForeignRootQdisc and left.
// (ReplaceForeignRoot deletes an operator's root only when
// replace_root_qdisc asks it to.)
func deleteRoot(link netlink.Link) error {
	qdiscs, err := netlink.QdiscList(link)
	if err != nil {
		return fmt.Errorf("list qdiscs of %s: %w", link.Attrs().Name, err)
	}
	for _, q := range qdiscs {
		a := q.Attrs()
		if a.Parent != netlink.HANDLE_ROOT || a.Handle == 0 {
			continue
		}
		if !ownTree(link) && !ownRoot(link, "fq") {
			return fmt.Errorf("%w: %s root is %s %x:: left as it is", ErrForeignRootQdisc, link.Attrs().Name, q.Type(), a.Handle>>16)
		}
		return deleteRootQdisc(q)
	}
	return nil
}

// deleteRootQdisc is the one place a root qdisc leaves a device: sluice's
// own tree (deleteRoot), or an operator's that replace_root_qdisc named.
// Already gone is done.
func deleteRootQdisc(q netlink.Qdisc) error {
	if err := netlink.QdiscDel(q); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return err
	}
	return nil
}

// The kernel gives a device whose tx_queue_len is 0 (veth, and other
// IFF_NO_QUEUE devices) a length of 1000 when a queueing root such as
// htb replaces its default, and keeps it when the root goes. sluice notes
// the length it found in its IFB's alias (the IFB outlives an agent that
// keeps its trees, so a later agent or `sluice unload` reads it) and puts
// it back with the default root.
const queueLenAlias = "sluice: txqueuelen of %s was %d"

func noteQueueLen(ifb, dev netlink.Link) error {
	return netlink.LinkSetAlias(ifb, fmt.Sprintf(queueLenAlias, dev.Attrs().Name, dev.Attrs().TxQLen))
}

// restoreRoot deletes sluice's root on dev and gives the device back the
// queue length it had before sluice (ifb nil: none noted).
func restoreRoot(dev, ifb netlink.Link) error {
	if err := deleteRoot(dev); err != nil {
		return err
	}
	if ifb == nil {
		return nil
	}
	if fresh, err := netlink.LinkByIndex(ifb.Attrs().Index); err == nil {
		ifb = fresh // the alias as the kernel has it now
	}
	rest, _ := strings.CutPrefix(ifb.Attrs().Alias, "sluice: txqueuelen of ")
	name, n, noted := strings.Cut(rest, " was ")
	qlen, err := strconv.Atoi(n)
	if !noted || err != nil || name != dev.Attrs().Name {
		return nil // nothing noted (an IFB from an earlier version)
	}
	if cur, err := netlink.LinkByIndex(dev.Attrs().Index); err == nil && cur.Attrs().TxQLen != qlen {
		if err := netlink.LinkSetTxQLen(cur, qlen); err != nil {
			return fmt.Errorf("restore %s's txqueuelen %d: %w", dev.Attrs().Name, qlen, err)
		}
	}
	return nil
}

// SetRates implements Shaper.
func (h *HTB) SetRates(dir maps.Direction, rates []shaping.Rate) error {
	return h.in(func() error { return h.setRates(dir, rates) })
}

func (h *HTB) setRates(dir maps.Direction, rates []shaping.Rate) error {
	t := h.trees[dir]
	var errs []error
	// Changes to existing classes go out in batches (see batch).
	b := &batch{sock: h.sock}
	for _, r := range rates {
		if math.IsInf(r.BytesPerSecond, 1) {
			errs = append(errs, h.remove(dir, r.Entity))
			continue
		}
		wire := math.Max(wireRate(r.BytesPerSecond), minRate)
		guaranteed := math.Min(math.Max(wireRate(r.Guaranteed), minRate), wire)
		c := t.entity[r.Entity]
		if c == nil {
			var err error
			if c, err = h.addClass(dir, t, r.Entity, guaranteed, wire); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if c.wire == wire && c.guaranteed == guaranteed {
			continue
		}
		if err := b.add(classChange(t.htbClass(c.minor, guaranteed, wire))); err != nil {
			return err
		}
		c.wire, c.guaranteed = wire, guaranteed
		// Keep the queue bound to the delay bound as the rate moves.
		if q := queueBytes(wire, h.delay); q > c.queue*5/4 || q < c.queue*4/5 {
			if err := b.add(t.leaf(c.minor, q).request(unix.NLM_F_CREATE | unix.NLM_F_REPLACE)); err != nil {
				return err
			}
			c.queue = q
		}
	}
	if err := b.flush(); err != nil {
		return err
	}
	if err := b.err(); err != nil {
		errs = append(errs, fmt.Errorf("htb: change rates: %w", err))
	}
	return errors.Join(errs...)
}

func (h *HTB) addClass(dir maps.Direction, t *htbTree, entity uint32, guaranteed, wire float64) (*htbClass, error) {
	var minor uint16
	if n := len(t.free); n > 0 {
		minor, t.free = t.free[n-1], t.free[:n-1]
	} else {
		if t.next > lastMinor {
			return nil, fmt.Errorf("htb: no class left for entity %d (%d in use)", entity, len(t.entity))
		}
		minor = t.next
		t.next++
	}
	c := &htbClass{minor: minor, wire: wire, guaranteed: guaranteed, queue: queueBytes(wire, h.delay)}
	if err := h.nl.ClassReplace(t.htbClass(minor, guaranteed, wire)); err != nil {
		t.free = append(t.free, minor)
		return nil, fmt.Errorf("htb: add class for entity %d: %w", entity, err)
	}
	if err := t.leaf(minor, c.queue).replace(); err != nil {
		h.deleteClass(t.htbClass(minor, guaranteed, wire))
		t.free = append(t.free, minor)
		return nil, fmt.Errorf("htb: add queue for entity %d: %w", entity, err)
	}
	if err := h.classes.SetClass(dir, entity, netlink.MakeHandle(rootMajor, minor)); err != nil {
		h.deleteClass(t.htbClass(minor, guaranteed, wire))
		t.free = append(t.free, minor)
		return nil, err
	}
	t.entity[entity] = c
	return c, nil
}

// htbClass describes entity class 1:minor under the parent, guaranteed a
// wire rate and capped at a ceiling. Each burst covers 10 ms at its rate
// and at least two GSO segments, so large segments do not stall the class.
func (t *htbTree) htbClass(minor uint16, guaranteed, ceil float64) *netlink.HtbClass {
	return netlink.NewHtbClass(netlink.ClassAttrs{
		LinkIndex: t.link.Attrs().Index,
		Parent:    netlink.MakeHandle(rootMajor, parentMinor),
		Handle:    netlink.MakeHandle(rootMajor, minor),
	}, netlink.HtbClassAttrs{Rate: htbBits(guaranteed), Ceil: htbBits(ceil), Buffer: burst(guaranteed), Cbuffer: burst(ceil), Quantum: classQuantum})
}

// parentClass is 1:1 at the tree's capacity.
func (t *htbTree) parentClass() *netlink.HtbClass {
	bits := htbBits(t.capacity)
	return netlink.NewHtbClass(netlink.ClassAttrs{
		LinkIndex: t.link.Attrs().Index,
		Parent:    netlink.MakeHandle(rootMajor, 0),
		Handle:    netlink.MakeHandle(rootMajor, parentMinor),
	}, netlink.HtbClassAttrs{Rate: bits, Ceil: bits, Buffer: burst(t.capacity), Cbuffer: burst(t.capacity), Quantum: classQuantum})
}

func burst(wire float64) uint32 {
	return uint32(math.Min(math.Max(wire*0.01, 2*64<<10), math.MaxUint32))
}

// htbBits is a rate in bytes/s as HTB's bits/s, held to [1 byte/s,
// config.MaxRate]: configuration refuses anything beyond, and this keeps
// a computed rate (a ceiling of +Inf, a NaN) from wrapping the kernel's
// field.
func htbBits(bytes float64) uint64 {
	if !(bytes >= 1) { // NaN too
		return 8
	}
	return uint64(math.Min(bytes, config.MaxRate) * 8)
}

// SetCapacity implements Shaper: the parent class's rate and ceiling.
func (h *HTB) SetCapacity(dir maps.Direction, bytesPerSecond float64) error {
	return h.in(func() error {
		t := h.trees[dir]
		wire := unlimitedWire
		if !math.IsInf(bytesPerSecond, 1) && bytesPerSecond > 0 {
			wire = math.Max(wireRate(bytesPerSecond), minRate)
		}
		if t.capacity == wire {
			return nil
		}
		old := t.capacity
		t.capacity = wire
		if err := h.nl.ClassChange(t.parentClass()); err != nil {
			t.capacity = old
			return fmt.Errorf("htb: set the capacity of %s: %w", t.link.Attrs().Name, err)
		}
		return nil
	})
}

func (t *htbTree) leaf(minor uint16, limit uint32) bfifo {
	return bfifo{ifindex: t.link.Attrs().Index, handle: netlink.MakeHandle(minor, 0), parent: netlink.MakeHandle(rootMajor, minor), limit: limit}
}

// Remove implements Shaper.
func (h *HTB) Remove(dir maps.Direction, entity uint32) error {
	return h.in(func() error { return h.remove(dir, entity) })
}

func (h *HTB) remove(dir maps.Direction, entity uint32) error {
	t := h.trees[dir]
	c := t.entity[entity]
	if c == nil {
		return nil
	}
	// Unclassify first, so no packet is steered to a class that is going.
	if err := h.classes.SetClass(dir, entity, 0); err != nil {
		return err
	}
	delete(t.entity, entity)
	if err := h.deleteClass(t.htbClass(c.minor, c.guaranteed, c.wire)); err != nil {
		return fmt.Errorf("htb: remove class of entity %d: %w", entity, err)
	}
	t.free = append(t.free, c.minor)
	return nil
}

// deleteClass is the one place an entity class of sluice's tree is
// deleted (its leaf queue goes with it), through the tree's netlink
// socket; a class already gone is not an error. Only classes under
// sluice's own root (found by identity, treeOf) come here.
func (h *HTB) deleteClass(cl *netlink.HtbClass) error {
	if err := h.nl.ClassDel(cl); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// releaseAll removes every entity's class in one direction.
func (h *HTB) releaseAll(dir maps.Direction) error {
	return h.in(func() error {
		t := h.trees[dir]
		if t == nil {
			return nil
		}
		for entity := range t.entity {
			if err := h.remove(dir, entity); err != nil {
				return err
			}
		}
		return nil
	})
}

// Held implements Shaper from the classes' statistics: queued bytes now,
// and drops and overlimit events since the last call.
func (h *HTB) Held(dir maps.Direction) (out []shaping.Held, err error) {
	err = h.in(func() error { out, err = h.held(dir); return err })
	return out, err
}

func (h *HTB) held(dir maps.Direction) ([]shaping.Held, error) {
	t := h.trees[dir]
	list, err := h.nl.ClassList(t.link, netlink.MakeHandle(rootMajor, 0))
	if err != nil {
		return nil, fmt.Errorf("htb: read class statistics: %w", err)
	}
	byMinor := map[uint16]*netlink.ClassStatistics{}
	for _, cl := range list {
		a := cl.Attrs()
		if a.Handle>>16 == rootMajor && a.Statistics != nil {
			byMinor[uint16(a.Handle&0xffff)] = a.Statistics
		}
	}
	out := make([]shaping.Held, 0, len(t.entity))
	for entity, c := range t.entity {
		st := byMinor[c.minor]
		if st == nil || st.Queue == nil {
			continue
		}
		q := st.Queue
		held := shaping.Held{Entity: entity, Backlog: uint64(q.Backlog), Dropped: uint64(q.Drops - c.drops)}
		if st.Basic != nil {
			held.Sent = payloadBytes(st.Basic.Bytes)
		}
		overlimits := q.Overlimits - c.overlimits
		c.drops, c.overlimits = q.Drops, q.Overlimits
		held.Throttled = q.Backlog > 0 || overlimits > 0 || held.Dropped > 0
		if c.wire > 0 {
			held.Delay = time.Duration(float64(q.Backlog) / c.wire * float64(time.Second))
		}
		out = append(out, held)
	}
	return out, nil
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
