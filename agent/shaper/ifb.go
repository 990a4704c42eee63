package shaper

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
)

// sluice's IFB devices: their names, how sluice knows one as its own, and
// the one function that deletes them (DeleteIFB). Every IFB sluice removes,
// its own at Close, an earlier agent's left behind, the fq probe's, goes
// through it, so the rule "never delete a device sluice did not make" is
// kept in one place.

// ErrForeignDevice: a device sluice did not make holds one of its names.
var ErrForeignDevice = errors.New("a device sluice did not make holds its name")

// IFBName is the ingress device sluice creates for an interface.
func IFBName(ifindex int) string { return fmt.Sprintf("slifb%d", ifindex) }

// InterfaceOfIFB is the index of the interface one of sluice's IFB names
// (IFBName, and the shared trees' slifbi/slifbe) was made for.
func InterfaceOfIFB(name string) (int, bool) {
	m := ifbNames.FindStringSubmatch(name)
	if m == nil {
		return 0, false
	}
	idx, err := strconv.Atoi(m[1])
	return idx, err == nil
}

var ifbNames = regexp.MustCompile(`^slifb[ie]?([0-9]+)$`)

// LeftIFB finds the IFB device an earlier agent left under one of
// sluice's names: nil when there is none, an error when a device that is
// not an IFB holds the name (not sluice's: never deleted or used).
func LeftIFB(name string) (netlink.Link, error) {
	link, err := netlink.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("find %s: %w", name, err)
	}
	if link.Type() != "ifb" {
		return nil, fmt.Errorf("%w: a %s device named %s exists: sluice names its IFB devices so, and touches no device it did not make; rename or remove it", ErrForeignDevice, link.Type(), name)
	}
	if !IsSluiceIFB(link) {
		return nil, fmt.Errorf("%w: an IFB device named %s exists without sluice's alias (%q) or tree: sluice touches no device it did not make; rename or remove it",
			ErrForeignDevice, name, ifbAlias)
	}
	return link, nil
}

// ifbAlias marks the IFB devices sluice makes: written right after the
// device is created (the kernel ignores an alias in the creating message),
// and kept by the kernel with the device (ip link shows it), so a later
// agent or `sluice unload` knows the device by more than its name.
const ifbAlias = "sluice: ifb"

// IsSluiceIFB says whether an IFB device under one of sluice's names is
// sluice's: it carries an alias sluice wrote ("sluice: …"), or, made by a
// release before the alias (or left between its creation and the alias),
// sluice's own root qdisc on it: an htb with sluice's signature (treeOf,
// marked or not: the device's name is sluice's too), or fq at handle 1:.
func IsSluiceIFB(link netlink.Link) bool {
	return link.Type() == "ifb" && (strings.HasPrefix(link.Attrs().Alias, "sluice:") || treeOf(link) != notOurs || ownRoot(link, "fq"))
}

// MarkIFB writes sluice's alias on an IFB device the pinned record says
// sluice made (sluice unload, when the alias was lost).
func MarkIFB(link netlink.Link) error { return netlink.LinkSetAlias(link, ifbAlias) }

// newIFB creates an IFB device named so and marks it sluice's (ifbAlias).
func newIFB(name string) (netlink.Link, error) {
	if err := netlink.LinkAdd(&netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: name, TxQLen: 1000}}); err != nil {
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("find %s: %w", name, err)
	}
	if err := netlink.LinkSetAlias(link, ifbAlias); err != nil {
		// Not marked, but made by this call: deleted as such.
		return nil, errors.Join(fmt.Errorf("mark %s as sluice's: %w", name, err), deleteIFB(link, true))
	}
	return link, nil
}

// probeNames are the temporary IFB devices ProbeFQ makes (and deletes
// within the same call).
var probeNames = regexp.MustCompile(`^slprobe[0-9]+$`)

// probeIFBName is ProbeFQ's device for this process.
func probeIFBName(pid int) string { return fmt.Sprintf("slprobe%d", pid%100000) }

// DeleteIFB deletes one of sluice's IFB devices, and nothing else. link is
// the caller's handle, possibly stale: the device is looked up again by
// its index and deleted only if it still has the handle's name, is an
// IFB, has one of sluice's IFB names (InterfaceOfIFB) and carries sluice's
// mark (IsSluiceIFB: the alias, or sluice's own root qdisc). Anything else
// is refused with ErrForeignDevice and left as it is; a device that is
// gone is an error too (what the caller meant to delete is not there).
func DeleteIFB(link netlink.Link) error { return deleteIFB(link, false) }

// deleteIFB is DeleteIFB; made says the caller created the device in this
// same call (newIFB before its alias, ProbeFQ's unmarked probe), which
// stands in for sluice's mark. Name and kind are checked either way.
func deleteIFB(link netlink.Link, made bool) error {
	want := link.Attrs().Name
	cur, err := netlink.LinkByIndex(link.Attrs().Index)
	if err != nil {
		return fmt.Errorf("delete IFB %s: find it: %w", want, err)
	}
	name := cur.Attrs().Name
	switch {
	case name != want:
		return fmt.Errorf("%w: delete IFB %s: index %d is now %s: left as it is", ErrForeignDevice, want, link.Attrs().Index, name)
	case cur.Type() != "ifb":
		return fmt.Errorf("%w: delete IFB %s: it is a %s device: left as it is", ErrForeignDevice, name, cur.Type())
	case !ifbNames.MatchString(name) && !(made && probeNames.MatchString(name)):
		return fmt.Errorf("%w: delete IFB %s: not a name sluice gives its IFB devices: left as it is", ErrForeignDevice, name)
	case !made && !IsSluiceIFB(cur):
		return fmt.Errorf("%w: delete IFB %s: it has neither sluice's alias (%q) nor a tree of sluice's: left as it is", ErrForeignDevice, name, ifbAlias)
	}
	if err := netlink.LinkDel(cur); err != nil {
		return fmt.Errorf("delete IFB %s: %w", name, err)
	}
	return nil
}
