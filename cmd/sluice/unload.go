package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/shaper"
	"github.com/sluice-dev/sluice/maps"
)

// runUnload: `sluice unload [--config FILE]` removes what an agent that
// exited with keep_attached_on_exit left: pinned links (which detaches the
// programs) and maps, its IFB devices and its root HTB qdiscs.
func runUnload(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("unload", stderr)
	path := fs.String("config", defaultConfigPath, "configuration file (for the interfaces and pin path)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	// The pins first: a running agent holds them, and then nothing is touched.
	rep, err := maps.Unpin(cfg.PinPath)
	for _, p := range rep.Removed {
		fmt.Fprintf(stdout, "removed %s\n", p)
	}
	for _, p := range rep.Foreign {
		fmt.Fprintf(stdout, "left %s: not a pin sluice makes\n", p)
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range cfg.Interfaces {
		link, err := netlink.LinkByName(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		ifb, err := shaper.LeftIFB(shaper.IFBName(link.Attrs().Index))
		if err != nil {
			errs = append(errs, err)
		}
		if ifb != nil {
			// The IFB exists only if sluice shaped this interface: its root
			// HTB is sluice's too.
			errs = append(errs, netlink.LinkDel(ifb))
			errs = append(errs, netlink.QdiscDel(netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT})))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "unloaded: pins under %s removed, interfaces %v restored\n", cfg.PinPath, cfg.Interfaces)
	return nil
}
