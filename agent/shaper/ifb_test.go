package shaper

import (
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/internal/netns"
)

// DeleteIFB, the one deleter of IFB devices, deletes sluice's own and
// refuses every device that only looks like one: an IFB under sluice's
// name without its mark (or with an operator's alias), another kind of
// device under that name, and a stale handle whose index the kernel has
// given to another device.
func TestDeleteIFBDeletesOnlySluices(t *testing.T) {
	netns.RequireRoot(t, "creates IFB devices in a namespace")
	ns := netns.New(t, "ifb"+netns.Suffix())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"netns", "exec", ns.Name, "ip", "link"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip link %v: %v %s", args, err, out)
		}
	}
	exists := func(name string) bool {
		t.Helper()
		var found bool
		ns.Do(func() error {
			_, err := netlink.LinkByName(name)
			found = err == nil
			return nil
		})
		return found
	}
	byName := func(name string) netlink.Link {
		t.Helper()
		var l netlink.Link
		if err := ns.Do(func() (err error) { l, err = netlink.LinkByName(name); return err }); err != nil {
			t.Fatalf("find %s: %v", name, err)
		}
		return l
	}
	refused := func(l netlink.Link, made bool, why string) {
		t.Helper()
		err := ns.Do(func() error { return deleteIFB(l, made) })
		if !errors.Is(err, ErrForeignDevice) || !strings.Contains(err.Error(), why) {
			t.Errorf("deleting %s (made %v): %v, want ErrForeignDevice saying %q", l.Attrs().Name, made, err, why)
		}
	}

	// An operator's IFB under sluice's name, unmarked, then with an alias of its own.
	ip("add", "slifb7", "type", "ifb")
	refused(byName("slifb7"), false, "neither sluice's alias")
	ip("set", "slifb7", "alias", "operator: mirror")
	refused(byName("slifb7"), false, "neither sluice's alias")
	if !exists("slifb7") {
		t.Fatal("a foreign IFB named slifb7 was deleted")
	}
	ip("del", "slifb7")

	// Another kind of device under sluice's name, even one sluice made
	// (made only stands in for the mark, never for the kind or the name).
	ip("add", "slifbe8", "type", "veth", "peer", "name", "op-peer8")
	refused(byName("slifbe8"), true, "it is a veth device")
	ip("add", "opifb9", "type", "ifb")
	refused(byName("opifb9"), true, "not a name sluice gives")
	if !exists("slifbe8") || !exists("opifb9") {
		t.Fatal("a foreign device was deleted")
	}

	// sluice's own IFB goes.
	var own netlink.Link
	if err := ns.Do(func() (err error) { own, err = newIFB("slifb7"); return err }); err != nil {
		t.Fatal(err)
	}
	if err := ns.Do(func() error { return DeleteIFB(own) }); err != nil {
		t.Fatalf("deleting sluice's own IFB: %v", err)
	}
	if exists("slifb7") {
		t.Fatal("sluice's own IFB is still there")
	}

	// A stale handle: the device went and its index now belongs to an
	// operator's IFB, under another name or under sluice's name unmarked.
	if err := ns.Do(func() (err error) { own, err = newIFB("slifb7"); return err }); err != nil {
		t.Fatal(err)
	}
	idx := strconv.Itoa(own.Attrs().Index)
	ip("del", "slifb7")
	ip("add", "name", "opifb7", "index", idx, "type", "ifb")
	refused(own, false, "index "+idx+" is now opifb7")
	ip("del", "opifb7")
	ip("add", "name", "slifb7", "index", idx, "type", "ifb")
	refused(own, false, "neither sluice's alias")
	if !exists("slifb7") {
		t.Fatal("the device now under the stale handle's index was deleted")
	}

	// The fq probe's IFB, never marked, goes with the call that made it.
	ip("add", probeIFBName(12345), "type", "ifb")
	if err := ns.Do(func() error { return deleteIFB(byName(probeIFBName(12345)), true) }); err != nil {
		t.Fatalf("deleting the probe's IFB: %v", err)
	}
	if exists(probeIFBName(12345)) {
		t.Fatal("the probe's IFB is still there")
	}
}
