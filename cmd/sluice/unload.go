package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/daemon"
	"github.com/sluice-dev/sluice/internal/hoststate"
)

// newUnloadCmd: `sluice unload [--config FILE] [--pin-path DIR]` removes what
// an agent that exited with keep_attached_on_exit left: pinned links (which
// detaches the programs) and maps, its IFB devices, steering filters and
// root HTB qdiscs, on every interface it touched. It needs no configuration
// (dpkg -r and rpm -e run it whatever state the file is in, deleted or
// broken): what to remove comes from the host record in /var/lib/sluice
// (every pin directory an agent of this boot and network namespace used,
// the interfaces it attached to, the devices and qdiscs it made), from the
// pins (their link pins name the interfaces), from the kernel (IFB devices
// under sluice's names) and, when the file reads, from its pin_path and
// interfaces.
func newUnloadCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "unload [--config FILE] [--pin-path DIR] [-o text|json]",
		Short: "remove what an agent left attached with keep_attached_on_exit (root)",
		Long: "It needs no configuration: every pin directory, interface and device an agent of this network namespace recorded in " +
			hoststate.DefaultDir + "/" + hoststate.FileName + " is unloaded too, so it works with the file deleted, broken or naming another pin_path. " +
			"It refuses (exit 1, nothing removed) while an agent runs, and without root.",
		Args:        noArgs,
		Annotations: annotations(nil, "systemctl stop sluice && sluice unload --config /etc/sluice/sluice.yaml"),
	}
	path := c.Flags().String("config", defaultConfigPath, "configuration `file` (its pin_path and interfaces, when it reads)")
	pinFlag := c.Flags().String("pin-path", "", "a pin `directory` to unload besides those "+hoststate.DefaultDir+" records (default: the file's pin_path, else "+config.Default().PinPath+")")
	output := addOutputFlag(c)
	c.MarkFlagFilename("config", "yaml", "yml")
	c.MarkFlagDirname("pin-path")
	c.RunE = func(c *cobra.Command, _ []string) error {
		return runUnload(*path, *pinFlag, output.json(), c.OutOrStdout(), c.ErrOrStderr())
	}
	return c
}

func runUnload(path, pinFlag string, asJSON bool, stdout, stderr io.Writer) error {
	// Without the privileges, every removal fails on EPERM or finds
	// nothing it may read: refused before anything is tried, so it can
	// never look like a clean unload.
	if err := unloadPrivileges(); err != nil {
		return err
	}
	// Each line unload says: printed as it goes, or gathered for -o json.
	var said []string
	say := func(line string) { fmt.Fprintln(stdout, line) }
	if asJSON {
		say = func(line string) { said = append(said, line) }
	}
	pinPath, ifindexes := config.Default().PinPath, map[int]bool{}
	if cfg, err := configfile.Load(path); err != nil {
		notice := fmt.Sprintf("%s does not read (%v): removing what the host record (%s), the pins and the kernel say sluice made", path, err, hoststate.Dir())
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
	err := daemon.UnloadAll(pinPath, ifindexes, say)
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

// errUnloadPrivileges: unload was run without what removing sluice's
// objects takes.
var errUnloadPrivileges = errors.New("unload needs root (CAP_BPF or CAP_SYS_ADMIN for the pins, CAP_NET_ADMIN for filters, qdiscs and devices): nothing was removed; run it as root (sudo sluice unload)")

// unloadPrivileges refuses a process whose effective capabilities cannot
// remove pins (CAP_BPF, or CAP_SYS_ADMIN on kernels before it) and
// network objects (CAP_NET_ADMIN): capabilities, not the uid, as the
// unit's sandbox and setpriv grant them.
func unloadPrivileges() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read this process's capabilities: %w", err)
	}
	has := func(c int) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	if !has(unix.CAP_NET_ADMIN) || !(has(unix.CAP_BPF) || has(unix.CAP_SYS_ADMIN)) {
		return errUnloadPrivileges
	}
	return nil
}
