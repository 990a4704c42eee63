package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/daemon"
)

// newUnloadCmd: `sluice unload [--config FILE] [--pin-path DIR]` removes what
// an agent that exited with keep_attached_on_exit left: pinned links (which
// detaches the programs) and maps, its IFB devices, steering filters and
// root HTB qdiscs, on every interface it touched. It needs no valid
// configuration (dpkg -r runs it whatever state the file is in): what to
// remove comes from the pins (their link pins name the interfaces), from
// the kernel (IFB devices under sluice's names) and, when the file reads,
// from its interfaces.
func newUnloadCmd() *cobra.Command {
	c := &cobra.Command{
		Use:         "unload [--config FILE] [--pin-path DIR] [-o text|json]",
		Short:       "remove what an agent left attached with keep_attached_on_exit (root)",
		Args:        noArgs,
		Annotations: annotations(nil, "systemctl stop sluice && sluice unload --config /etc/sluice/sluice.yaml"),
	}
	path := c.Flags().String("config", defaultConfigPath, "configuration `file` (its pin_path and interfaces, when it reads)")
	pinFlag := c.Flags().String("pin-path", "", "the pin `directory` (default: the file's pin_path, else "+config.Default().PinPath+")")
	output := addOutputFlag(c)
	c.MarkFlagFilename("config", "yaml", "yml")
	c.MarkFlagDirname("pin-path")
	c.RunE = func(c *cobra.Command, _ []string) error {
		return runUnload(*path, *pinFlag, output.json(), c.OutOrStdout(), c.ErrOrStderr())
	}
	return c
}

func runUnload(path, pinFlag string, asJSON bool, stdout, stderr io.Writer) error {
	// Each line unload says: printed as it goes, or gathered for -o json.
	var said []string
	say := func(line string) { fmt.Fprintln(stdout, line) }
	if asJSON {
		say = func(line string) { said = append(said, line) }
	}
	pinPath, ifindexes := config.Default().PinPath, map[int]bool{}
	if cfg, err := configfile.Load(path); err != nil {
		notice := fmt.Sprintf("%s does not read (%v): removing what the pins and the kernel say sluice made", path, err)
		if asJSON {
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
	if pinFlag != "" {
		pinPath = pinFlag
	}
	// The pins first: a running agent holds them, and then nothing is touched.
	err := daemon.RemoveLeftovers(pinPath, ifindexes, say)
	if asJSON {
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
