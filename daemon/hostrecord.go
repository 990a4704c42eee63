package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/internal/hoststate"
	sluicemaps "github.com/sluice-dev/sluice/maps"
)

// hostRecord is the agent's entry in the host record (internal/hoststate):
// where it pins and what it attached to and created, written before each
// thing is made (or, for what the shaper creates, right after), so that
// `sluice unload` finds it all without the configuration. A write that
// fails is logged, not fatal: the pins' own record still serves an unload
// given the right pin_path.
type hostRecord struct {
	log   *slog.Logger
	dir   string
	scope hoststate.Scope
	pin   string
	// begun: the entry is this agent's to keep up; had: an earlier agent's
	// entry for the same pins was there (what it left may still be).
	begun, had bool
}

// begin notes pinPath before the data path is loaded (and its directory
// made).
func (h *hostRecord) begin(log *slog.Logger, pinPath string) {
	h.log, h.dir, h.scope, h.pin, h.begun = log, hoststate.Dir(), hoststate.Here(), pinPath, true
	h.update(func(r *hoststate.Record) { h.had = r.Find(h.scope, h.pin) != nil }, func(*hoststate.Entry) {})
}

// change changes the entry (made if missing).
func (h *hostRecord) change(f func(e *hoststate.Entry)) { h.update(nil, f) }

// update runs found on the record as read (nil: nothing), then f on the
// entry (made if missing).
func (h *hostRecord) update(found func(*hoststate.Record), f func(e *hoststate.Entry)) {
	if !h.begun {
		return
	}
	err := hoststate.Update(h.dir, func(r *hoststate.Record) {
		if found != nil {
			found(r)
		}
		e := r.Ensure(h.scope, h.pin)
		f(e)
		e.Updated = time.Now()
	})
	if err != nil {
		h.log.Warn("the host record is not written: if the configuration is lost, sluice unload needs --pin-path "+h.pin, "dir", h.dir, "err", err)
	}
}

// droppedDetached: what an earlier agent attached to outside the
// configuration is detached (detachDropped), and forgotten in the pins'
// record; the entry now lists only the interfaces this agent attaches to.
func (h *hostRecord) droppedDetached() {
	h.change(func(e *hoststate.Entry) { e.Interfaces = nil })
	h.mirrorOwned()
}

// attaching notes an interface before the programs go on it.
func (h *hostRecord) attaching(index int, name string) {
	h.change(func(e *hoststate.Entry) { e.AddInterface(index, name) })
}

// mirrorOwned copies the pins' record of the IFB devices and clsact qdiscs
// sluice made, as it stands now (entries are added and forgotten there).
func (h *hostRecord) mirrorOwned() {
	ifbs, ierr := sluicemaps.Owned(h.pin, sluicemaps.OwnedIFB)
	clsact, cerr := sluicemaps.Owned(h.pin, sluicemaps.OwnedClsact)
	h.change(func(e *hoststate.Entry) {
		if ierr == nil {
			e.IFBs = hoststate.Devices(ifbs)
		}
		if cerr == nil {
			e.Clsact = hoststate.Devices(clsact)
		}
	})
}

// finish ends the entry: it goes when everything it names was removed
// (gone), and stays otherwise (left for the next agent, or a removal
// failed). An entry this agent found stays whatever this agent did.
func (h *hostRecord) finish(gone bool) {
	if !h.begun {
		return
	}
	if !gone {
		h.mirrorOwned()
		return
	}
	if err := hoststate.Update(h.dir, func(r *hoststate.Record) { r.Forget(h.scope, h.pin) }); err != nil {
		h.log.Warn("the host record keeps an entry for what is removed (sluice unload finds nothing there)", "dir", h.dir, "err", err)
	}
}

// RemoveRecorded is RemoveLeftovers for one entry of the host record: its
// pins, the interfaces it names (and those in ifindexes), and the IFB
// devices and clsact qdiscs it says sluice created, each only while the
// device at its index still has the recorded name. say reports what it
// removed and what it left. ifindexes gains every interface it went
// through (as RemoveLeftovers').
func RemoveRecorded(e hoststate.Entry, ifindexes map[int]bool, say func(string)) error {
	for _, d := range e.Interfaces {
		if sameDevice(d) {
			ifindexes[d.Index] = true
		} else {
			say(fmt.Sprintf("left interface index %d: it is no longer %s, which sluice attached to", d.Index, d.Name))
		}
	}
	extra := func(devs []hoststate.Device) map[int]string {
		out := map[int]string{}
		for _, d := range devs {
			if sameDevice(d) {
				out[d.Index] = d.Name
			}
		}
		return out
	}
	return removeLeftovers(e.PinPath, ifindexes, extra(e.IFBs), extra(e.Clsact), say)
}

// sameDevice: the device at d's index still has d's name.
func sameDevice(d hoststate.Device) bool {
	l, err := netlink.LinkByIndex(d.Index)
	return err == nil && l.Attrs().Name == d.Name
}

// UnloadAll is `sluice unload`: RemoveLeftovers on pinPath (the
// configuration's or the flag's, with the configuration's interfaces), then
// on every entry of the host record in this boot and network namespace;
// each entry whose removal succeeded is forgotten. A pin directory is
// removed once: the entry of pinPath adds its objects to that removal.
// Entries of other network namespaces are left, and said.
func UnloadAll(pinPath string, ifindexes map[int]bool, say func(string)) error {
	dir, here := hoststate.Dir(), hoststate.Here()
	rec, err := hoststate.Read(dir)
	if err != nil {
		say(err.Error() + ": removing what the pins, the configuration and the kernel say sluice made")
	}
	mine, others := rec.In(here)
	if others > 0 {
		say(fmt.Sprintf("left %d entries of %s/%s: agents in other network namespaces (run sluice unload in each)", others, dir, hoststate.FileName))
	}
	first := hoststate.Entry{Scope: here, PinPath: pinPath}
	if e := rec.Find(here, pinPath); e != nil {
		first = *e
	}
	entries := append([]hoststate.Entry{first}, slices.DeleteFunc(mine, func(e hoststate.Entry) bool { return e.PinPath == pinPath })...)
	// Nothing is touched while an agent runs on any of them: the removal
	// of one entry takes sluice's legacy filters and IFB devices wherever
	// they are, a running agent's included.
	for _, e := range entries {
		if err := agentHolds(e.PinPath); err != nil {
			return err
		}
	}
	var errs []error
	done := map[int]bool{} // interfaces an earlier entry's removal went through
	for i, e := range entries {
		ifs := maps.Clone(ifindexes)
		if i > 0 {
			say("recorded in " + dir + "/" + hoststate.FileName + ": " + e.String())
			ifs = map[int]bool{}
			e.Interfaces = slices.DeleteFunc(slices.Clone(e.Interfaces), func(d hoststate.Device) bool { return done[d.Index] })
		}
		if ifs == nil {
			ifs = map[int]bool{}
		}
		err := RemoveRecorded(e, ifs, say)
		maps.Copy(done, ifs)
		if err != nil {
			errs = append(errs, fmt.Errorf("pin_path %s: %w", e.PinPath, err))
			continue
		}
		if rec.Find(here, e.PinPath) == nil {
			continue // nothing to forget (not recorded, or the record is unreadable)
		}
		if err := hoststate.Update(dir, func(r *hoststate.Record) { r.Forget(here, e.PinPath) }); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// agentHolds refuses a pin directory a running agent holds (its flock,
// maps.ErrPinDirBusy); a directory that is not there is no agent's.
func agentHolds(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("%w: %s: stop the agent first (systemctl stop sluice); nothing was removed", sluicemaps.ErrPinDirBusy, dir)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return nil
}
