package daemon

import (
	"errors"
	"fmt"
	stdmaps "maps"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/agent/shaper"
	"github.com/sluice-dev/sluice/maps"
)

// RemoveLeftovers removes everything of sluice's that is left in this
// network namespace once no agent holds it: the pins under pinPath (link
// pins detach their programs), legacy filters (by their name and their
// program's), and on the interfaces in ifindexes, those the link pins name
// and those an IFB of sluice's serves, the htb trees, IFB devices and
// steering filters; last, each clsact qdisc the pinned record says sluice
// added, once no filter is left under it. It is
// `sluice unload`, and the last step of an agent's own stop when it does
// not leave the data path for the next one, so both remove the same
// things the same way. say reports each thing removed or left.
func RemoveLeftovers(pinPath string, ifindexes map[int]bool, say func(string)) error {
	return removeLeftovers(pinPath, ifindexes, nil, nil, say)
}

// removeLeftovers is RemoveLeftovers, with IFB devices and clsact qdiscs
// the host record (RemoveRecorded) says sluice made, in case the pins'
// record of them is gone or unreadable.
func removeLeftovers(pinPath string, ifindexes map[int]bool, recordedIFBs, recordedClsact map[int]string, say func(string)) error {
	// Read before the pins go: the clsact qdiscs and IFB devices sluice
	// recorded as its own.
	added, addedErr := maps.Owned(pinPath, maps.OwnedClsact)
	if addedErr != nil {
		say("the record of the clsact qdiscs sluice added is unreadable (" + addedErr.Error() + "): any it added stay")
	}
	ifbs, ifbErr := maps.Owned(pinPath, maps.OwnedIFB)
	if ifbErr != nil {
		say("the record of sluice's IFB devices is unreadable (" + ifbErr.Error() + "): they are found by name and alias")
	}
	added, ifbs = withRecorded(added, recordedClsact), withRecorded(ifbs, recordedIFBs)
	// The record stays until everything it names is gone: a removal that
	// fails below leaves it for the next `sluice unload`.
	rep, err := maps.Unpin(pinPath, maps.OwnedRecordPin)
	for _, p := range rep.Removed {
		say("removed " + p)
		if idx, ok := maps.InterfaceOfLinkPin(p); ok {
			ifindexes[idx] = true
		}
	}
	for _, p := range rep.Foreign {
		say("left " + p + ": not a pin sluice makes")
	}
	if err != nil {
		return err
	}
	touched, err := attach.RemoveLeftoverFilters()
	for _, name := range touched {
		say("interface " + name + ": sluice's legacy filters removed")
	}
	if err != nil {
		return err
	}
	// The record vouches for its IFBs: one that lost sluice's alias (and
	// has no tree of sluice's to show) is marked again, so the removal
	// below, which goes by name and mark, takes it with its trees.
	for idx, name := range ifbs {
		if l, err := netlink.LinkByIndex(idx); err == nil && l.Attrs().Name == name && l.Type() == "ifb" && !shaper.IsSluiceIFB(l) {
			if err := shaper.MarkIFB(l); err != nil {
				say("IFB device " + name + ": could not mark it as sluice's again: " + err.Error())
			}
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list devices: %w", err)
	}
	for _, l := range links {
		if idx, ok := shaper.InterfaceOfIFB(l.Attrs().Name); ok && shaper.IsSluiceIFB(l) {
			ifindexes[idx] = true
		} else if ok {
			say("left " + l.Attrs().Name + ": a " + l.Type() + " device sluice did not make (no sluice alias or tree), under one of its names")
		}
	}
	var errs []error
	for _, idx := range slices.Sorted(stdmaps.Keys(ifindexes)) {
		name := strconv.Itoa(idx)
		if link, err := netlink.LinkByIndex(idx); err == nil {
			name = link.Attrs().Name
		}
		if err := shaper.RemoveLeftoverTrees(idx, nil); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		say("interface " + name + ": sluice's trees, IFB devices and filters removed")
	}
	// IFB devices the record names that are still there (their trees went
	// with them above, or they had none). They were marked again above: the
	// deleter goes by name and mark like every removal of an IFB.
	for idx, name := range ifbs {
		if l, err := netlink.LinkByIndex(idx); err == nil && l.Attrs().Name == name && l.Type() == "ifb" {
			if err := shaper.DeleteIFB(l); err != nil {
				errs = append(errs, err)
			} else {
				say("IFB device " + name + " (recorded as sluice's) removed")
			}
		}
	}
	// Last, once no filter of sluice's is left under them.
	for idx, name := range added {
		removed, err := attach.RemoveAddedClsact(idx, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		} else if removed {
			say("interface " + name + ": the clsact qdisc sluice added removed")
		}
	}
	if len(errs) > 0 { // an unreadable record is no use kept: it goes
		say("kept " + filepath.Join(pinPath, maps.OwnedRecordPin) + ", the record of what sluice made: run sluice unload again once the errors are fixed")
		return errors.Join(errs...)
	}
	rep, err = maps.Unpin(pinPath)
	for _, p := range rep.Removed {
		say("removed " + p)
	}
	return err
}

// withRecorded adds the host record's entries to the pins' (which win on
// an index both name).
func withRecorded(pinned, recorded map[int]string) map[int]string {
	if len(recorded) == 0 {
		return pinned
	}
	out := map[int]string{}
	for idx, name := range recorded {
		out[idx] = name
	}
	for idx, name := range pinned {
		out[idx] = name
	}
	return out
}
