package attach

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/maps"
)

// TCX links pinned across agent restarts: adopted by the next agent at the
// position it asked for, or detached by their pins.

// Pin pins the TCX links under dir so they outlive the agent (an agent
// exiting with keep_attached_on_exit); Adopt takes them back. Legacy
// filters outlive the process by themselves.
func (a *Attachment) Pin(dir string) error {
	if a.Mode != TCX {
		return nil
	}
	for i, l := range a.links {
		if err := l.Pin(filepath.Join(dir, linkPinName(a.Index, i))); err != nil {
			return fmt.Errorf("pin link on %s: %w", a.Interface, err)
		}
	}
	return nil
}

// Release forgets the attachment without detaching it (after Pin, or for
// legacy filters): the programs stay on the device.
func (a *Attachment) Release() {
	for _, l := range a.links {
		l.Close() // a pinned link stays attached
	}
	a.links = nil
	a.filters = nil
	a.createdClsact = false
}

// Adopt re-opens pinned TCX links left on an interface by an earlier agent
// and updates them to run the given programs, at the Last position.
func Adopt(dir string, ifindex int, ingress, egress *ebpf.Program) (*Attachment, error) {
	return AdoptAt(dir, ifindex, ingress, egress, Last)
}

// AdoptAt is Adopt at position pos: a link found elsewhere in its chain
// (the other attach_position, or another tool's program attached since at
// the end sluice should hold) is replaced by a new link at pos, made
// before the old one is closed and pinned under the old one's name. It
// refuses (ErrOtherAgent) an interface where another data path's sluice
// programs are attached too, leaving the pinned links as they were.
func AdoptAt(dir string, ifindex int, ingress, egress *ebpf.Program, pos Position) (*Attachment, error) {
	iface, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("find interface %d: %w", ifindex, err)
	}
	a := &Attachment{Interface: iface.Attrs().Name, Index: ifindex, Mode: TCX, Position: pos, ingress: ingress, egress: egress}
	var ids []link.ID
	for i := range 2 {
		l, err := link.LoadPinnedLink(filepath.Join(dir, linkPinName(ifindex, i)), nil)
		if err != nil {
			a.closeLinks()
			return nil, fmt.Errorf("adopt pinned link on %s: %w", a.Interface, err)
		}
		a.links = append(a.links, l)
		if info, err := l.Info(); err == nil {
			ids = append(ids, info.ID)
		}
	}
	if err := a.refuseOtherAgent(ids); err != nil {
		a.closeLinks() // pinned: they stay as they were
		return nil, err
	}
	for i, prog := range []*ebpf.Program{ingress, egress} {
		l := a.links[i]
		if placed(l, hooks[i].tcx, ifindex, pos) {
			if err := l.Update(prog); err != nil {
				a.closeLinks()
				return nil, fmt.Errorf("update adopted link on %s: %w", a.Interface, err)
			}
			continue
		}
		path := filepath.Join(dir, linkPinName(ifindex, i))
		opts := link.TCXOptions{Interface: ifindex, Program: prog, Attach: hooks[i].tcx, Anchor: tcxAnchor(pos)}
		moved, err := link.AttachTCX(opts)
		sameProgram := errors.Is(err, unix.EEXIST) // a hook holds a program once: the old link runs this one
		if err != nil && !sameProgram {
			a.closeLinks()
			return nil, fmt.Errorf("move the %s link on %s to the %s position: %w", hooks[i].name, a.Interface, pos, err)
		}
		a.links[i] = nil
		if err := detachLink(l); err != nil { // the old position
			if moved != nil {
				moved.Close()
			}
			a.closeLinks()
			return nil, fmt.Errorf("move the %s link on %s: detach the old one: %w", hooks[i].name, a.Interface, err)
		}
		if sameProgram {
			// Break before make: the program could not run twice.
			if moved, err = link.AttachTCX(opts); err != nil {
				a.closeLinks()
				return nil, fmt.Errorf("move the %s link on %s to the %s position: %w", hooks[i].name, a.Interface, pos, err)
			}
		}
		a.links[i] = moved
		if err := moved.Pin(path); err != nil {
			a.closeLinks()
			return nil, fmt.Errorf("move the %s link on %s: pin the new one: %w", hooks[i].name, a.Interface, err)
		}
	}
	return a, nil
}

// placed says whether the link stands at pos in its hook's chain: no other
// tool's program after it (Last) or before it (First). sluice's own
// programs do not count; a chain that cannot be read counts as placed
// (the link is kept, not moved on a guess).
func placed(l link.Link, typ ebpf.AttachType, ifindex int, pos Position) bool {
	info, err := l.Info()
	if err != nil {
		return true
	}
	chain, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: typ})
	if err != nil {
		return true
	}
	seen := false
	for _, p := range chain.Programs {
		if id, _ := p.LinkID(); id == info.ID {
			seen = true
			continue
		}
		if name, err := programName(p.ID); err == nil && isSluiceName(name) {
			continue
		}
		if (pos == First) != seen {
			return false // another's before sluice's (First), or after it (Last)
		}
	}
	return true
}

// PinnedInterfaces lists the interfaces (by index) whose TCX links an
// earlier agent pinned under dir.
func PinnedInterfaces(dir string) []int {
	names, _ := filepath.Glob(filepath.Join(dir, "link_*"))
	seen := map[int]bool{}
	var out []int
	for _, n := range names {
		if idx, ok := maps.InterfaceOfLinkPin(n); ok && !seen[idx] {
			seen[idx] = true
			out = append(out, idx)
		}
	}
	return out
}

// DetachPinned detaches the programs an earlier agent left on an
// interface through pinned TCX links, and removes the pins.
func DetachPinned(dir string, ifindex int) error {
	var errs []error
	for i := range 2 {
		path := filepath.Join(dir, linkPinName(ifindex, i))
		l, err := link.LoadPinnedLink(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("open pinned link %s: %w", path, err))
			continue
		}
		errs = append(errs, detachLink(l))
	}
	return errors.Join(errs...)
}

// detachLink is the one place a TCX link of sluice's leaves the kernel: its
// pin removed (already gone is fine), then its last reference closed,
// which detaches the program.
func detachLink(l link.Link) error {
	if l == nil {
		return nil
	}
	var errs []error
	if err := l.Unpin(); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("unpin: %w", err))
	}
	return errors.Join(append(errs, l.Close())...)
}

// linkPinName names link i (0 ingress, 1 egress) in the pin directory,
// whose layout maps knows (sluice unload removes what it names).
func linkPinName(ifindex, i int) string {
	hook := "ingress"
	if i == 1 {
		hook = "egress"
	}
	return maps.LinkPinName(ifindex, hook)
}
