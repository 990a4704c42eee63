// Command sluice is the elastic bandwidth quota agent for Kafka broker hosts
// and its operator tools. This package is wiring only: one file per
// subcommand, the logic lives in allocator/, agent/ and maps/.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// usageError is a command-line or input error: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "run the agent: attach, learn, allocate and shape (root)", runAgent},
		{"status", "show the running agent's directions and entities (--watch to refresh)", runStatus},
		{"explain", "show how an entity's dynamic limit was derived in the last cycle", runExplain},
		{"check-config", "validate a configuration file (and, as root, verify the BPF programs)", runCheckConfig},
		{"unload", "remove what an agent left attached with keep_attached_on_exit (root)", runUnload},
		{"simulate", "play a scenario file through the control loop and print each cycle as JSON", runSimulate},
		{"demo", "show the control loop on the worked examples of the design", runDemo},
		{"version", "print the version and the revision it was built from (also --version)", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "--version" {
		return runVersion(ctx, nil, stdout, stderr)
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(stderr)
		if len(args) == 0 {
			return usageError{errors.New("no command given")}
		}
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	printUsage(stderr)
	return usageError{fmt.Errorf("unknown command %q", args[0])}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: sluice COMMAND [flags]   (sluice COMMAND -h: the command's flags)\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nexit status: 0 success; 1 failure (the agent, the kernel, a socket); 2 bad usage or invalid input (flags, a configuration file)")
}
