package shaper

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Finding sluice's own HTB trees by identity, and the root qdiscs it may
// replace, restore or delete: only ones it created.

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
	q, err := installedRoot(dev)
	if err != nil {
		return fmt.Errorf("htb: %w", err)
	}
	if q == nil || ownTree(dev) {
		return nil // the default, or ours from an earlier agent: known by its mark, not its handle
	}
	return fmt.Errorf("%w: %s root is %s %x:; remove it, run with shaper: police or shadow, or let sluice replace it with replace_root_qdisc: true",
		ErrForeignRootQdisc, dev.Attrs().Name, q.Type(), q.Attrs().Handle>>16)
}

// installedRoot is link's root qdisc when one was installed (a handle
// other than the kernel's default 0:), else nil.
func installedRoot(link netlink.Link) (netlink.Qdisc, error) {
	qdiscs, err := netlink.QdiscList(link)
	if err != nil {
		return nil, fmt.Errorf("list qdiscs of %s: %w", link.Attrs().Name, err)
	}
	for _, q := range qdiscs {
		if a := q.Attrs(); a.Parent == netlink.HANDLE_ROOT && a.Handle != 0 {
			return q, nil
		}
	}
	return nil, nil
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
		q, err := installedRoot(dev)
		if err != nil || q == nil {
			return err
		}
		if err := deleteRootQdisc(q); err != nil {
			return fmt.Errorf("replace_root_qdisc: delete %s's root %s %x:: %w", dev.Attrs().Name, q.Type(), q.Attrs().Handle>>16, err)
		}
		replaced = fmt.Sprintf("%s %x: on %s", q.Type(), q.Attrs().Handle>>16, dev.Attrs().Name)
		return nil
	})
	return replaced, err
}

// deleteRoot is the one deleter of the root qdiscs sluice adds: it deletes
// link's root when it is sluice's, its htb tree (ownTree: by the mark, not
// the handle) or the edt backend's fq at sluice's handle (ownRoot), and the
// kernel's default takes its place. A default root (handle 0:) is nothing
// to delete; any other root is refused with ErrForeignRootQdisc and left.
// (ReplaceForeignRoot deletes an operator's root only when
// replace_root_qdisc asks it to.)
func deleteRoot(link netlink.Link) error {
	q, err := installedRoot(link)
	if err != nil || q == nil {
		return err
	}
	if !ownTree(link) && !ownRoot(link, "fq") {
		return fmt.Errorf("%w: %s root is %s %x:: left as it is", ErrForeignRootQdisc, link.Attrs().Name, q.Type(), q.Attrs().Handle>>16)
	}
	return deleteRootQdisc(q)
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
