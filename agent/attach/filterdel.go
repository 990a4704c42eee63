package attach

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// errForeignFilter: the filter at the slot is not (or no longer) sluice's.
var errForeignFilter = errors.New("not a filter of sluice's")

// deleteFilter is the one deleter of sluice's tc filters (the legacy
// ingress/egress filters and the egress steering filter): it deletes the
// filter now at f's slot (parent, pref, handle) on iface only if that one
// is sluice's by its name and its program's name (isSluiceFilter), so a
// filter another tool put there since is never taken. It returns
// errForeignFilter for such a one (callers leave it, as they always
// have), and nothing when the filter is already gone.
func deleteFilter(iface netlink.Link, f *netlink.BpfFilter) error {
	filters, err := netlink.FilterList(iface, f.Parent)
	if err != nil {
		return nil // no clsact: the filter went with it
	}
	for _, g := range filters {
		if g.Attrs().Priority != f.Priority || g.Attrs().Handle != f.Handle {
			continue
		}
		if b, ok := g.(*netlink.BpfFilter); !ok || !isSluiceFilter(b, f.Name) {
			return fmt.Errorf("%w: %s on %s", errForeignFilter, describeFilter(g), iface.Attrs().Name)
		}
		if err := netlink.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		return nil
	}
	return nil // already gone
}
