package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/spf13/cobra"
	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/shaper"
	"github.com/sluice-dev/sluice/daemon"
	"github.com/sluice-dev/sluice/maps"
)

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

// newCheckConfigCmd: `sluice check-config [--config FILE | FILE]` validates a
// file, listing every problem with its key path; as root it also loads the
// BPF programs sized by the file through the verifier. --config is the
// spelling every subcommand shares; the bare FILE is kept for scripts.
func newCheckConfigCmd() *cobra.Command {
	c := &cobra.Command{
		Use:         "check-config [--config FILE | FILE] [-o text|json]",
		Short:       "validate a configuration file (and, as root, verify the BPF programs)",
		Args:        maxArgs(1, "give one configuration file, with --config or as the argument"),
		Annotations: annotations(nil, "sluice check-config --config /etc/sluice/sluice.yaml && systemctl reload sluice"),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return []cobra.Completion{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
		},
	}
	flagPath := c.Flags().String("config", "", "configuration `file` (default "+defaultConfigPath+")")
	output := addOutputFlag(c)
	c.MarkFlagFilename("config", "yaml", "yml")
	c.RunE = func(c *cobra.Command, args []string) error {
		path := *flagPath
		switch {
		case len(args) == 1 && path != "":
			return usageError{errors.New("check-config: give one configuration file, with --config or as the argument")}
		case len(args) == 1:
			path = args[0]
		case path == "":
			path = defaultConfigPath
		}
		return runCheckConfig(path, output.json(), c.OutOrStdout(), c.ErrOrStderr())
	}
	return c
}

func runCheckConfig(path string, asJSON bool, stdout, stderr io.Writer) error {
	r, err := checkConfig(path)
	if asJSON {
		if r.Problems == nil {
			r.Problems = []checkProblem{}
		}
		if encErr := json.NewEncoder(stdout).Encode(r); encErr != nil {
			return encErr
		}
		return err
	}
	r.writeText(stdout, stderr)
	return err
}

// checkReport is what check-config found, for text or -o json.
type checkReport struct {
	File  string `json:"file"`
	Valid bool   `json:"valid"`
	// Stage is where a refusal came from: "file", "host" or "kernel".
	Stage     string         `json:"stage,omitempty"`
	Summary   string         `json:"summary,omitempty"`
	Listeners []string       `json:"listeners,omitempty"`
	Cluster   string         `json:"cluster,omitempty"`
	Problems  []checkProblem `json:"problems"`
	Warnings  []string       `json:"warnings,omitempty"`
	Kernel    string         `json:"kernel,omitempty"`
	Verified  string         `json:"verified,omitempty"`
	// VerifierLog is the kernel verifier's log of a rejected program.
	VerifierLog []string `json:"verifier_log,omitempty"`
	NotRoot     bool     `json:"not_root,omitempty"`
}

type checkProblem struct {
	Key     string `json:"key,omitempty"`
	Message string `json:"message"`
}

// checkConfig checks the file, and as root the host and the kernel.
func checkConfig(path string) (checkReport, error) {
	r := checkReport{File: path}
	cfg, err := configfile.Load(path)
	if err != nil {
		r.Stage = "file"
		var problems config.Problems
		if errors.As(err, &problems) {
			for _, p := range problems {
				r.Problems = append(r.Problems, checkProblem{Key: p.Key, Message: p.Message})
			}
			return r, usageError{fmt.Errorf("%s is invalid", path)}
		}
		r.Problems = append(r.Problems, checkProblem{Message: err.Error()})
		return r, usageError{err}
	}
	r.Summary = fmt.Sprintf("configuration valid (%d clients, %d topic-partitions, %d users, %d peers configured)",
		len(cfg.Entities.Clients), len(cfg.Entities.TopicPartitions), len(cfg.Entities.Users), len(cfg.Entities.Peers))
	for _, port := range cfg.Listeners {
		r.Listeners = append(r.Listeners, fmt.Sprintf("listener %d %s: %s", port, cfg.Protocol(port), listenerSees[cfg.Protocol(port)]))
	}
	r.Cluster = clusterSummary(cfg)
	for _, w := range cfg.Warnings() {
		r.Warnings = append(r.Warnings, w.Key+": "+w.Message)
	}
	r.Warnings = append(r.Warnings, fileWarnings(cfg)...)
	if os.Geteuid() != 0 {
		r.Valid, r.NotRoot = true, true
		return r, nil
	}
	problems, warnings := hostChecks(cfg)
	r.Warnings = append(r.Warnings, warnings...)
	if len(problems) > 0 {
		r.Stage = "host"
		for _, p := range problems {
			r.Problems = append(r.Problems, checkProblem{Message: p})
		}
		return r, usageError{fmt.Errorf("%s does not fit this host", path)}
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return r, err
	}
	spec, err := maps.Spec(daemon.DataPathOptions(cfg))
	if err != nil {
		return r, err
	}
	problems, r.Kernel = kernelChecks(spec, cfg.Attach, hostKernel)
	if len(problems) > 0 {
		r.Stage = "kernel"
		for _, p := range problems {
			r.Problems = append(r.Problems, checkProblem{Message: p})
		}
		return r, usageError{fmt.Errorf("%s does not fit this kernel", path)}
	}
	// The dry run `sluice run` would fail at: its rejection in the same
	// words, and the verifier's log.
	programs, nmaps, err := daemon.VerifyDataPath(cfg)
	var refusal *daemon.Refusal
	if errors.As(err, &refusal) {
		r.Stage = "kernel"
		r.Problems = append(r.Problems, checkProblem{Message: refusal.Reason})
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			r.VerifierLog = verr.Log
		}
		return r, usageError{fmt.Errorf("%s does not fit this kernel", path)}
	}
	if err != nil {
		return r, fmt.Errorf("the data path does not load on this kernel: %w", err)
	}
	r.Valid = true
	r.Verified = fmt.Sprintf("data path verified by the kernel: %d programs, %d maps", programs, nmaps)
	return r, nil
}

// writeText prints the report as check-config always has: findings on
// stdout, problems on stderr.
func (r checkReport) writeText(stdout, stderr io.Writer) {
	if r.Stage == "file" {
		if len(r.Problems) == 1 && r.Problems[0].Key == "" {
			return // the error itself says it
		}
		fmt.Fprintf(stderr, "%s: %d problem(s):\n", r.File, len(r.Problems))
		for _, p := range r.Problems {
			fmt.Fprintf(stderr, "  %s: %s\n", p.Key, p.Message)
		}
		return
	}
	fmt.Fprintf(stdout, "%s: %s\n", r.File, r.Summary)
	for _, l := range r.Listeners {
		fmt.Fprintln(stdout, l)
	}
	if r.Cluster != "" {
		fmt.Fprintln(stdout, r.Cluster)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	if r.NotRoot {
		fmt.Fprintln(stdout, "not root: the BPF programs were not loaded through the verifier")
		return
	}
	if r.Kernel != "" {
		fmt.Fprintln(stdout, r.Kernel)
	}
	if len(r.Problems) > 0 {
		fmt.Fprintf(stderr, "this host: %d problem(s) that `sluice run` would refuse to start with:\n", len(r.Problems))
		for _, p := range r.Problems {
			fmt.Fprintf(stderr, "  %s\n", p.Message)
		}
	}
	if n := len(r.VerifierLog); n > 0 {
		lines := r.VerifierLog[max(0, n-verifierLogLines):]
		fmt.Fprintf(stderr, "the verifier's log (its last %d of %d lines; -o json has them all):\n", len(lines), n)
		for _, l := range lines {
			fmt.Fprintf(stderr, "  %s\n", l)
		}
	}
	if r.Verified != "" {
		fmt.Fprintln(stdout, r.Verified)
	}
}

// verifierLogLines is how much of a rejection's verifier log the text
// report prints: the end, where the verifier says why.
const verifierLogLines = 40

// hostChecks predicts, as root on the broker host, what `sluice run` would
// refuse (problems) or what looks wrong (warnings): interfaces that do not
// exist, a root qdisc htb would not replace, a pin_path that is not
// sluice's to use, a metrics_address it could not listen on, a socket it
// could not create (here, or under the installed unit's sandbox),
// capacities beyond the NICs' speed.
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
	if err := daemon.CheckMetricsAddress(cfg.MetricsAddress); err != nil {
		problems = append(problems, err.Error())
	}
	if err := daemon.CheckSocketPath(cfg.Socket); err != nil {
		problems = append(problems, err.Error())
	} else if sb, ok := installedSandbox(); ok && !sb.allows(cfg.Socket) {
		problems = append(problems, fmt.Sprintf("socket %s is outside the directories %s lets the agent write (ProtectSystem=strict: %s): "+
			"the agent could not create it and would refuse to start: set socket: /run/sluice/sluice.sock",
			cfg.Socket, sb.Unit, strings.Join(sb.Writable, ", ")))
	} else if ok && !sb.reachable(cfg.Socket) {
		warnings = append(warnings, fmt.Sprintf("socket: %s is in the private /tmp %s gives the agent (PrivateTmp=yes): sluice status and sluice reload cannot reach it; set socket: /run/sluice/sluice.sock",
			cfg.Socket, sb.Unit))
	}
	return problems, warnings
}

// clusterSummary says what the cluster section splits ("" without one).
func clusterSummary(cfg config.Config) string {
	c := cfg.Cluster
	if !c.Enabled {
		return ""
	}
	var budgets []string
	for _, b := range c.Budgets() {
		text := b.String() + " " + config.FormatRate(b.Limit)
		if b.LimitFromKafka {
			text = b.String() + " at Kafka's quota for it (the quota store, as each broker reads it)"
		}
		if b.Reservation > 0 {
			text += " reserving " + config.FormatRate(b.Reservation)
		}
		budgets = append(budgets, text)
	}
	return fmt.Sprintf("cluster %s: broker %d of %v, %s, topic %s, lease %v, fallback %s; budgets for the whole cluster: %s",
		c.Name, c.BrokerID, c.Brokers, c.Mode, c.Topic, c.Lease, c.Fallback, strings.Join(budgets, "; "))
}

// fileWarnings are check-config's warnings on a valid file beside
// config.Warnings (the agent's, which it logs too): what is harmless now
// and a surprise later, or open to more than the operator likely meant.
func fileWarnings(cfg config.Config) []string {
	var out []string
	// config.Warnings says it for enforce, where replication is governed
	// now; a file in shadow is the one that is switched to enforce later.
	if len(cfg.ExemptPeers) == 0 && cfg.Mode != config.ModeEnforce {
		out = append(out, fmt.Sprintf("exempt_peers: is empty: in %s nothing is held back yet, but once mode is enforce replication from the other brokers and controllers is governed like any client; list their addresses", cfg.Mode))
	}
	if listensEverywhere(cfg.MetricsAddress) && cfg.Metrics.WebConfigFile == "" {
		out = append(out, fmt.Sprintf("metrics_address: %s listens on every address without metrics.web_config_file: anyone who reaches this host reads /metrics "+
			"(client-ids, users, topics and their rates) in the clear; set metrics.web_config_file (TLS, basic auth) or listen on 127.0.0.1", cfg.MetricsAddress))
	}
	return out
}

// listensEverywhere: addr's host is the unspecified address (0.0.0.0,
// [::]) or empty (":7359"), which Go's listener binds on every interface.
func listensEverywhere(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsUnspecified()
}
