package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/shaper"
	"github.com/sluice-dev/sluice/maps"
)

// runUnload: `sluice unload [--config FILE] [--pin-path DIR]` removes what
// an agent that exited with keep_attached_on_exit left: pinned links (which
// detaches the programs) and maps, its IFB devices, steering filters and
// root HTB qdiscs, on every interface it touched. It needs no valid
// configuration (dpkg -r runs it whatever state the file is in): what to
// remove comes from the pins (their link pins name the interfaces), from
// the kernel (IFB devices under sluice's names) and, when the file reads,
// from its interfaces.
func runUnload(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("unload", stderr)
	path := fs.String("config", defaultConfigPath, "configuration file (its pin_path and interfaces, when it reads)")
	pinFlag := fs.String("pin-path", "", "the pin directory (default: the file's pin_path, else "+config.Default().PinPath+")")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	pinPath, ifindexes := config.Default().PinPath, map[int]bool{}
	if cfg, err := configfile.Load(*path); err != nil {
		fmt.Fprintf(stderr, "sluice unload: %s does not read (%v): removing what the pins and the kernel say sluice made\n", *path, err)
	} else {
		pinPath = cfg.PinPath
		for _, name := range cfg.Interfaces {
			if link, err := netlink.LinkByName(name); err == nil {
				ifindexes[link.Attrs().Index] = true
			}
		}
	}
	if *pinFlag != "" {
		pinPath = *pinFlag
	}
	// The pins first: a running agent holds them, and then nothing is touched.
	rep, err := maps.Unpin(pinPath)
	for _, p := range rep.Removed {
		fmt.Fprintf(stdout, "removed %s\n", p)
		if idx, ok := maps.InterfaceOfLinkPin(p); ok {
			ifindexes[idx] = true
		}
	}
	for _, p := range rep.Foreign {
		fmt.Fprintf(stdout, "left %s: not a pin sluice makes\n", p)
	}
	if err != nil {
		return err
	}
	// IFB devices under sluice's names carry the index of the interface
	// they shape in their name.
	// Legacy filters (kernels without TCX) have no pins: they are found by
	// name on every device.
	touched, ferr := attach.RemoveLeftoverFilters()
	for _, name := range touched {
		fmt.Fprintf(stdout, "interface %s: sluice's legacy filters removed\n", name)
	}
	if ferr != nil {
		return ferr
	}
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list devices: %w", err)
	}
	for _, l := range links {
		if idx, ok := shaper.InterfaceOfIFB(l.Attrs().Name); ok && l.Type() == "ifb" {
			ifindexes[idx] = true
		}
	}
	var errs []error
	order := make([]int, 0, len(ifindexes))
	for idx := range ifindexes {
		order = append(order, idx)
	}
	slices.Sort(order)
	for _, idx := range order {
		name := strconv.Itoa(idx)
		if link, err := netlink.LinkByIndex(idx); err == nil {
			name = link.Attrs().Name
		}
		if err := shaper.RemoveLeftoverTrees(idx, nil); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		fmt.Fprintf(stdout, "interface %s: sluice's trees, IFB devices and filters removed\n", name)
	}
	return errors.Join(errs...)
}
