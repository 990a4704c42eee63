// Command sluice is the elastic bandwidth quota agent for Kafka broker hosts
// and its operator tools. This package is wiring only: one file per
// subcommand, the logic lives in allocator/, agent/ and maps/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-dev/sluice/agent/daemon"
)

// usageError is a command-line or input error: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// synopsis and examples are what `sluice COMMAND --help` prints.
	synopsis string
	examples []string
}

func commands() []command {
	return []command{
		{"run", "run the agent: attach, learn, allocate and shape (root)", runAgent,
			"sluice run [--config FILE] [--ready-file FILE]",
			[]string{"sluice run --config /etc/sluice/sluice.yaml   # what the systemd unit runs"}},
		{"status", "show the running agent's directions and entities (--watch to refresh)", runStatus,
			"sluice status [-o text|json] [--watch] [--wait DURATION] [--socket PATH]",
			[]string{"sluice status", "sluice status --watch", "systemctl start sluice && sluice status --wait 30s", "sluice status -o json | jq '.directions[] | {direction, overcommit, promised_ratio}'"}},
		{"explain", "show how an entity's dynamic limit was derived, or which entity holds a connection and why", runExplain,
			"sluice explain [-o text|json] [--socket PATH] NAME|ADDRESS   (a client-id, a topic-partition, kind:name, or a client's IP, IP:port or IP:port->IP:port)\n" +
				"       sluice explain --config FILE [--client-id ID] [--user USER] [--topic-partition TOPIC-N] [-o text|json]   (offline, from the file)",
			[]string{"sluice explain orders-consumer", "sluice explain topic-partition:orders-0", "sluice explain -o json client:backfill", "sluice explain 10.1.2.3:52314",
				"sluice explain --config /etc/sluice/sluice.yaml --client-id orders-app --user alice"}},
		{"connections", "list the governed connections and the entity, rule and request that bound each", runConnections,
			"sluice connections [--entity KIND:NAME|NAME] [--peer IP] [-o text|json] [--socket PATH]",
			[]string{"sluice connections", "sluice connections --entity unknown", "sluice connections --peer 10.1.2.3 -o json"}},
		{"bugreport", "gather the configuration (secrets redacted), status, connections, metrics, tc and BPF state and the journal into one archive", runBugreport,
			"sluice bugreport [--config FILE] [--out FILE.tar.gz] [-o text|json]",
			[]string{"sudo sluice bugreport --out /tmp/sluice-report.tar.gz && tar tzf /tmp/sluice-report.tar.gz"}},
		{"reload", "make the running agent reload its configuration file and report the verdict (systemctl reload)", runReload,
			"sluice reload [--socket PATH] [-o text|json]",
			[]string{"sluice check-config --config /etc/sluice/sluice.yaml && sluice reload"}},
		{"check-config", "validate a configuration file (and, as root, verify the BPF programs)", runCheckConfig,
			"sluice check-config [--config FILE | FILE] [-o text|json]",
			[]string{"sluice check-config --config /etc/sluice/sluice.yaml && systemctl reload sluice"}},
		{"unload", "remove what an agent left attached with keep_attached_on_exit (root)", runUnload,
			"sluice unload [--config FILE] [--pin-path DIR] [-o text|json]",
			[]string{"systemctl stop sluice && sluice unload --config /etc/sluice/sluice.yaml"}},
		{"simulate", "play a scenario file through the control loop and print each cycle as JSON", runSimulate,
			"sluice simulate --scenario FILE [-o text|json]",
			[]string{"sluice simulate --scenario allocator/scenario/examples/4-paper-overcommit.yaml --format table"}},
		{"demo", "show the control loop on the worked examples of the design", runDemo,
			"sluice demo", []string{"sluice demo"}},
		{"version", "print the version and the revision it was built from (also --version)", runVersion,
			"sluice version [-o text|json]", []string{"sluice version", "sluice --version", "sluice version -o json"}},
		{"completion", "print a shell completion script (bash, zsh or fish), made from the command tree", runCompletion,
			"sluice completion bash|zsh|fish",
			[]string{"sluice completion bash | sudo tee /usr/share/bash-completion/completions/sluice", "sluice completion fish > ~/.config/fish/completions/sluice.fish"}},
		{"man", "write the manual pages (sluice.1 and one per command), made from the command tree", runMan,
			"sluice man --out DIR",
			[]string{"sluice man --out /usr/local/share/man/man1 && man sluice-status"}},
	}
}

// newFlagSet is a subcommand's flag set: errors go to stderr, and its
// usage prints the synopsis, the flags and examples.
func newFlagSet(name string, stderr io.Writer) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError)}
	fs.SetOutput(stderr)
	fs.Usage = func() {
		for _, c := range commands() {
			if c.name == name {
				printCommandUsage(fs.Output(), c, fs.FlagSet)
			}
		}
	}
	return fs
}

// flagSet is a flag.FlagSet whose flags may come anywhere among the
// arguments (`sluice explain core-group -o json`), as the ecosystem's
// tools take them; after "--" everything is an argument.
type flagSet struct {
	*flag.FlagSet
	args []string
}

// Parse parses flags wherever they are and keeps the other arguments, in
// order, for Args, NArg and Arg.
func (fs *flagSet) Parse(args []string) error {
	fs.args = nil
	if len(args) == 1 && args[0] == introspectArg {
		return flagsOf{fs.FlagSet}
	}
	for {
		if err := fs.FlagSet.Parse(args); err != nil {
			return err
		}
		rest := fs.FlagSet.Args()
		if len(rest) == 0 {
			return nil
		}
		// flag stops at the first argument, or after a "--" it consumed.
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			fs.args = append(fs.args, rest...)
			return nil
		}
		fs.args = append(fs.args, rest[0])
		args = rest[1:]
	}
}

func (fs *flagSet) Args() []string { return fs.args }
func (fs *flagSet) NArg() int      { return len(fs.args) }
func (fs *flagSet) Arg(i int) string {
	if i < 0 || i >= len(fs.args) {
		return ""
	}
	return fs.args[i]
}

func printCommandUsage(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n", c.synopsis, c.summary)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(w, "\nflags:")
		fs.PrintDefaults()
	}
	fmt.Fprintln(w, "\nexamples:")
	for _, e := range c.examples {
		fmt.Fprintln(w, "  "+e)
	}
	fmt.Fprintln(w, "\n"+exitStatusHelp)
}

const exitStatusHelp = "exit status: 0 success; 1 failure (the agent, the kernel, a socket); 2 bad usage or invalid input (flags, a configuration file); 78 run refused to start (configuration or host state: restarting cannot help)"

// asksForHelp reports whether args (before a "--") ask for help.
func asksForHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
	}
	os.Exit(exitStatus(err))
}

// exitStatus is the process's exit status for run's result: 0 success, 2
// invalid input (usage, a file refused), 78 a start the configuration or
// host refuses (the unit does not restart it), 1 any other failure.
func exitStatus(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	case errors.Is(err, daemon.ErrRefused):
		return daemon.ExitRefused
	}
	return 1
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "--version" {
		return runVersion(ctx, nil, stdout, stderr)
	}
	if len(args) == 0 {
		printUsage(stderr)
		return usageError{errors.New("no command given")}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		// Asked for: on stdout, status 0. `sluice help CMD` is CMD -h.
		if args[0] == "help" && len(args) > 1 {
			return run(ctx, []string{args[1], "-h"}, stdout, stderr)
		}
		printUsage(stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		if asksForHelp(args[1:]) {
			// Help goes to stdout with status 0: every command's flag set
			// (newFlagSet) prints its usage and reports flag.ErrHelp.
			if err := c.run(ctx, []string{"-h"}, stdout, stdout); !errors.Is(err, flag.ErrHelp) {
				return fmt.Errorf("%s: -h ran the command (%v) instead of printing its usage", c.name, err)
			}
			return nil
		}
		return c.run(ctx, args[1:], stdout, stderr)
	}
	printUsage(stderr)
	return usageError{fmt.Errorf("unknown command %q", args[0])}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: sluice COMMAND [flags]   (sluice COMMAND -h: the command's flags)\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\n"+exitStatusHelp)
}
