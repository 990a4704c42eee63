package daemon

import (
	"errors"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/maps"
)

// Teardown: what the daemon created, recorded as it is created, and removed
// on exit or after a failed start, unless kept attached on purpose.

// cleanup detaches everything, unless keep_attached_on_exit leaves the
// programs, trees and pins for the next agent to adopt. After a failure
// (a refused or failed start, a run that ended in error) it undoes what
// this attempt made and leaves what an earlier agent left running as it
// was: links it adopted stay, links it attached go; a data path whose
// pins it found stays attached and pinned, one it created goes whole.
func (r *daemon) cleanup(failed bool) {
	for _, c := range r.closers {
		c.Close()
	}
	if r.metricsHold != nil {
		r.metricsHold.Close()
	}
	removeDirs(r.socketDirs) // the socket is gone with its listener
	if r.dp == nil && len(r.atts) == 0 && r.agent == nil {
		// A start refused before the data path loaded: nothing to detach,
		// and the refusal is the one line to log.
		if failed {
			r.unmountBPFFS()
		}
		r.host.finish(!r.host.had) // this start made nothing
		return
	}
	if r.samples != nil {
		r.samples.Close()
	}
	if r.latencies != nil {
		r.latencies.Close()
	}
	if r.agent != nil {
		r.agent.StopMetadata()
	}
	if r.metrics != nil {
		r.metrics.Close()
	}
	keep := r.cfg.KeepAttachedOnExit
	if r.agent != nil { // a reload may have changed it
		keep = r.agent.Config().KeepAttachedOnExit
	}
	if failed {
		keep = r.dp != nil && r.dp.Adopted()
	}
	var errs []error
	for i, a := range r.atts {
		if keep && (!failed || r.adopted[i]) {
			a.Release() // the links are pinned since attach
			continue
		}
		errs = append(errs, a.Detach())
	}
	if r.agent != nil && !keep {
		errs = append(errs, r.agent.CloseShaper())
	}
	if r.dp != nil {
		errs = append(errs, r.dp.Close())
		if !keep {
			// What `sluice unload` does, with the same code: pins, and on
			// the interfaces this agent drove anything still left.
			ifindexes := map[int]bool{}
			for _, a := range r.atts {
				ifindexes[a.Index] = true
			}
			errs = append(errs, RemoveLeftovers(r.cfg.PinPath, ifindexes, func(line string) { r.log.Debug("cleanup: " + line) }))
		}
	}
	if failed && !keep {
		r.unmountBPFFS()
	}
	err := errors.Join(errs...)
	r.host.finish(!keep && err == nil)
	if err != nil {
		r.log.Error("cleanup", "err", err)
	} else if keep {
		r.log.Info("left attached for the next agent (keep_attached_on_exit)", "pins", r.cfg.PinPath)
	} else {
		r.log.Info("detached; devices restored")
	}
}

// recordIFBs notes the shaper's IFB devices in the pinned record (a later
// agent and `sluice unload` find them there), and drops the entries of
// IFBs that are gone.
func (r *daemon) recordIFBs(indexes ...int) {
	if recorded, err := maps.Owned(r.cfg.PinPath, maps.OwnedIFB); err == nil {
		for idx, name := range recorded {
			if l, err := netlink.LinkByIndex(idx); err != nil || l.Attrs().Name != name {
				maps.ForgetOwned(r.cfg.PinPath, maps.OwnedIFB, idx)
			}
		}
	}
	for _, idx := range indexes {
		if idx == 0 {
			continue
		}
		l, err := netlink.LinkByIndex(idx)
		if err == nil {
			err = maps.RecordOwned(r.cfg.PinPath, maps.OwnedIFB, idx, l.Attrs().Name)
		}
		if err != nil {
			r.log.Warn("an IFB device of sluice's is not recorded (it is still known by its name and alias)", "ifindex", idx, "err", err)
		}
	}
	r.host.mirrorOwned()
}

// recordAddedClsact notes in the pinned record the interfaces whose clsact
// qdisc sluice has just added (index → name, as the attachment or the
// shaper that added it says), so that the agent that stops last, or
// `sluice unload`, removes each once empty, and only those. Entries whose
// clsact sluice has since removed (a shaper closed, a legacy detach) go,
// so that a clsact an operator adds there later is never taken for
// sluice's.
func (r *daemon) recordAddedClsact(added map[int]string) {
	if recorded, err := maps.Owned(r.cfg.PinPath, maps.OwnedClsact); err == nil {
		for idx := range recorded {
			if !attach.HasClsact(idx) {
				maps.ForgetOwned(r.cfg.PinPath, maps.OwnedClsact, idx)
			}
		}
	}
	for idx, name := range added {
		if err := maps.RecordOwned(r.cfg.PinPath, maps.OwnedClsact, idx, name); err != nil {
			r.log.Warn("the clsact qdisc sluice added is not recorded: it stays after sluice", "interface", name, "err", err)
		}
	}
	r.host.mirrorOwned()
}

// isBPFFS reports whether dir is a mounted bpffs.
func isBPFFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

// unmountBPFFS unmounts the bpffs this start mounted, once it holds
// nothing but what the kernel puts in a fresh one, and removes the
// directories it made for it.
func (r *daemon) unmountBPFFS() {
	if r.mountedBPFFS == "" {
		return
	}
	entries, err := os.ReadDir(r.mountedBPFFS)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Name() != "maps.debug" && e.Name() != "progs.debug" {
			return
		}
	}
	if err := unix.Unmount(r.mountedBPFFS, 0); err == nil {
		r.mountedBPFFS = ""
		removeDirs(r.bpffsDirs)
	}
}
