package main

import (
	"context"
	"fmt"
	"io"

	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/daemon"
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
	return daemon.RemoveLeftovers(pinPath, ifindexes, func(line string) { fmt.Fprintln(stdout, line) })
}
