package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/daemon"
	"github.com/sluice-dev/sluice/agent/shaper"
	"github.com/sluice-dev/sluice/maps"
)

// runCheckConfig: `sluice check-config [--config FILE | FILE]` validates a
// file, listing every problem with its key path; as root it also loads the
// BPF programs sized by the file through the verifier. --config is the
// spelling every subcommand shares; the bare FILE is kept for scripts.
// listenerSees says what sluice can learn on each kind of listener.
var listenerSees = map[string]string{
	config.ProtocolPlaintext: "client-ids and topic-partitions from request headers; no users",
	config.ProtocolSASLPlaintext: "users from PLAIN and SCRAM logins, client-ids and topic-partitions " +
		"(a connection is the unknown entity until its login is seen; GSSAPI and OAUTHBEARER connections go by client-id)",
	config.ProtocolSSL:     tlsSees,
	config.ProtocolSASLSSL: tlsSees,
}

const tlsSees = "peers only (requests are encrypted): a connection belongs to the longest entities.peers prefix holding its address, " +
	"else to the listener's entity (entities.listeners.<port>), decided when it starts; no client-ids, users or topic-partitions"

func runCheckConfig(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("check-config", stderr)
	flagPath := fs.String("config", "", "configuration file (default "+defaultConfigPath+")")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	path := *flagPath
	switch {
	case fs.NArg() > 1 || (fs.NArg() == 1 && path != ""):
		return usageError{errors.New("check-config: give one configuration file, with --config or as the argument")}
	case fs.NArg() == 1:
		path = fs.Arg(0)
	case path == "":
		path = defaultConfigPath
	}
	cfg, err := configfile.Load(path)
	if err != nil {
		var problems config.Problems
		if errors.As(err, &problems) {
			fmt.Fprintf(stderr, "%s: %d problem(s):\n", path, len(problems))
			for _, p := range problems {
				fmt.Fprintf(stderr, "  %s: %s\n", p.Key, p.Message)
			}
			return usageError{fmt.Errorf("%s is invalid", path)}
		}
		return usageError{err}
	}
	fmt.Fprintf(stdout, "%s: configuration valid (%d clients, %d topic-partitions, %d users, %d peers configured)\n", path,
		len(cfg.Entities.Clients), len(cfg.Entities.TopicPartitions), len(cfg.Entities.Users), len(cfg.Entities.Peers))
	for _, port := range cfg.Listeners {
		fmt.Fprintf(stdout, "listener %d %s: %s\n", port, cfg.Protocol(port), listenerSees[cfg.Protocol(port)])
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stdout, "warning: %s: %s\n", w.Key, w.Message)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stdout, "not root: the BPF programs were not loaded through the verifier")
		return nil
	}
	if problems, warnings := hostChecks(cfg); len(problems)+len(warnings) > 0 {
		for _, w := range warnings {
			fmt.Fprintf(stdout, "warning: %s\n", w)
		}
		if len(problems) > 0 {
			fmt.Fprintf(stderr, "this host: %d problem(s) that `sluice run` would refuse to start with:\n", len(problems))
			for _, p := range problems {
				fmt.Fprintf(stderr, "  %s\n", p)
			}
			return usageError{fmt.Errorf("%s does not fit this host", path)}
		}
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	spec, err := maps.Spec(daemon.DataPathOptions(cfg))
	if err != nil {
		return err
	}
	problems, kernel := kernelChecks(spec, cfg.Attach, hostKernel)
	fmt.Fprintln(stdout, kernel)
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "this host: %d problem(s) that `sluice run` would refuse to start with:\n", len(problems))
		for _, p := range problems {
			fmt.Fprintf(stderr, "  %s\n", p)
		}
		return usageError{fmt.Errorf("%s does not fit this kernel", path)}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return fmt.Errorf("the data path does not load on this kernel: %w", err)
	}
	defer coll.Close()
	fmt.Fprintf(stdout, "data path verified by the kernel: %d programs, %d maps\n", len(coll.Programs), len(coll.Maps))
	return nil
}

// hostChecks predicts, as root on the broker host, what `sluice run` would
// refuse (problems) or what looks wrong (warnings): interfaces that do not
// exist, a root qdisc htb would not replace, a pin_path that is not
// sluice's to use, capacities beyond the NICs' speed.
func hostChecks(cfg config.Config) (problems, warnings []string) {
	var speed float64 // bytes/s over every interface; 0 when one is unknown
	known := true
	for _, name := range cfg.Interfaces {
		if _, err := netlink.LinkByName(name); err != nil {
			problems = append(problems, fmt.Sprintf("interfaces: %s: no such interface on this host", name))
			known = false
			continue
		}
		if cfg.Mode == config.ModeEnforce && (cfg.Shaper == "auto" || cfg.Shaper == "htb") {
			if err := shaper.CheckRoot(name); err != nil && cfg.ReplaceRootQdisc {
				warnings = append(warnings, fmt.Sprintf("interfaces: %s: replace_root_qdisc: sluice will delete this root and put its own tree there; the kernel's default comes back when it goes, not this root (%v)", name, err))
			} else if err != nil {
				problems = append(problems, fmt.Sprintf("interfaces: %s: %v", name, err))
			}
		}
		data, err := os.ReadFile("/sys/class/net/" + name + "/speed")
		mbits, perr := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
		if err != nil || perr != nil || mbits <= 0 {
			known = false // virtual devices have no speed
			continue
		}
		speed += mbits * 1e6 / 8
	}
	if known && speed > 0 {
		for _, d := range []struct {
			key string
			dir config.Direction
		}{{"produce.capacity", cfg.Produce}, {"fetch.capacity", cfg.Fetch}} {
			if d.dir.Enabled() && d.dir.Capacity > speed {
				warnings = append(warnings, fmt.Sprintf("%s: %s exceeds the interfaces' speed, %s", d.key, config.FormatRate(d.dir.Capacity), config.FormatRate(speed)))
			}
		}
	}
	if err := maps.CheckPinPath(cfg.PinPath); err != nil {
		problems = append(problems, fmt.Sprintf("pin_path: %v", err))
	}
	return problems, warnings
}
