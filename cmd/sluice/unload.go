package main

import (
	"context"
	"encoding/json"
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
	output := outputFlag(fs)
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if err := output.check(); err != nil {
		return err
	}
	// Each line unload says: printed as it goes, or gathered for -o json.
	var said []string
	say := func(line string) { fmt.Fprintln(stdout, line) }
	if output.json() {
		say = func(line string) { said = append(said, line) }
	}
	pinPath, ifindexes := config.Default().PinPath, map[int]bool{}
	if cfg, err := configfile.Load(*path); err != nil {
		notice := fmt.Sprintf("%s does not read (%v): removing what the pins and the kernel say sluice made", *path, err)
		if output.json() {
			say(notice)
		} else {
			fmt.Fprintln(stderr, "sluice unload: "+notice)
		}
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
	err := daemon.RemoveLeftovers(pinPath, ifindexes, say)
	if output.json() {
		report := struct {
			Said  []string `json:"said"`
			Error string   `json:"error,omitempty"`
		}{Said: said}
		if err != nil {
			report.Error = err.Error()
		}
		if jerr := json.NewEncoder(stdout).Encode(report); jerr != nil {
			return jerr
		}
	}
	return err
}
