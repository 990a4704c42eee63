// Command sluice is the elastic bandwidth quota agent for Kafka broker hosts
// and its operator tools. This package is wiring only: one file per
// subcommand, the logic lives in allocator/, agent/ and maps/. The command
// tree is spf13/cobra's, its flags pflag's (GNU syntax: --output json,
// -o json, -ojson, flags anywhere among the arguments, "--" ends them);
// Viper stays the configuration file's loader.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/daemon"
)

// usageError is a command-line or input error: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

const exitStatusHelp = "exit status: 0 success; 1 failure (the agent, the kernel, a socket); 2 bad usage or invalid input (flags, arguments, a configuration file); 78 run refused to start (configuration or host state: restarting cannot help)"

// Annotations a command carries for its help and man page.
const (
	// annSynopsis: further synopsis lines, for commands with two forms
	// (the first is the command's Use).
	annSynopsis = "sluice.synopsis"
	// annExamples: example command lines, one a line.
	annExamples = "sluice.examples"
)

// newRootCmd is the command tree: every subcommand, the help command, and
// cobra's hidden __complete command the completion scripts call.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "sluice",
		Short: "elastic bandwidth quotas for Kafka broker hosts, enforced at the NIC with eBPF",
		Args:  cobra.ArbitraryArgs, // an unknown command is RunE's usage error
		// Errors are printed once, by run; usage is printed on request only.
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		RunE: func(c *cobra.Command, args []string) error {
			if v, _ := c.Flags().GetBool("version"); v {
				if len(args) > 0 {
					return usageError{fmt.Errorf("--version takes no arguments (got %q)", args)}
				}
				fmt.Fprintln(c.OutOrStdout(), versionString())
				return nil
			}
			if len(args) == 0 {
				printRootUsage(c.ErrOrStderr(), c)
				return usageError{errors.New("no command given")}
			}
			return usageError{fmt.Errorf("unknown command %q (sluice --help lists them)", args[0])}
		},
	}
	cobra.EnableCommandSorting = false // the order below: the agent, then its tools
	root.Flags().Bool("version", false, "print the version and revision (sluice version)")
	root.AddCommand(
		newRunCmd(),
		newStatusCmd(),
		newExplainCmd(),
		newConnectionsCmd(),
		newBugreportCmd(),
		newReloadCmd(),
		newCheckConfigCmd(),
		newUnloadCmd(),
		newSimulateCmd(),
		newDemoCmd(),
		newVersionCmd(),
		newCompletionCmd(),
		newManCmd(),
	)
	for _, c := range root.Commands() {
		c.DisableFlagsInUseLine = true // each Use spells its flags
	}
	root.SetHelpCommand(newHelpCmd())
	root.SetHelpFunc(printHelp)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return root
}

// subcommands are the root's commands a user runs: not help, not hidden.
func subcommands(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() && c.Name() != "help" {
			out = append(out, c)
		}
	}
	return out
}

// newHelpCmd: `sluice help [COMMAND]` prints the overview or COMMAND's
// help on stdout; an unknown COMMAND is a usage error.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:                   "help [COMMAND]",
		DisableFlagsInUseLine: true,
		Short:                 "print the commands, or a command's synopsis, flags and examples",
		Args:                  maxArgs(1, "give at most one command"),
		Annotations:           annotations(nil, "sluice help", "sluice help explain   # the same as sluice explain --help"),
		ValidArgsFunction: func(c *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []cobra.Completion
			for _, s := range subcommands(c.Root()) {
				names = append(names, cobra.CompletionWithDesc(s.Name(), s.Short))
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			root := c.Root()
			if len(args) == 0 {
				return root.Help()
			}
			target, rest, err := root.Find(args)
			if err != nil || target == root || len(rest) > 0 {
				return usageError{fmt.Errorf("help: no command %q (sluice --help lists them)", args[0])}
			}
			return target.Help()
		},
	}
}

// printHelp is every command's --help: synopsis, summary, flags, examples
// and exit statuses, on stdout.
func printHelp(c *cobra.Command, _ []string) {
	w := c.OutOrStdout()
	if !c.HasParent() {
		printRootUsage(w, c)
		return
	}
	fmt.Fprintf(w, "usage: %s\n\n%s\n", strings.Join(synopsis(c), "\n       "), c.Short)
	if c.Long != "" {
		fmt.Fprintf(w, "\n%s\n", c.Long)
	}
	if c.HasAvailableLocalFlags() {
		fmt.Fprintf(w, "\nflags:\n%s", c.LocalFlags().FlagUsages())
	}
	if ex := examples(c); len(ex) > 0 {
		fmt.Fprintln(w, "\nexamples:")
		for _, e := range ex {
			fmt.Fprintln(w, "  "+e)
		}
	}
	fmt.Fprintln(w, "\n"+exitStatusHelp)
}

func printRootUsage(w io.Writer, root *cobra.Command) {
	fmt.Fprintln(w, "usage: sluice COMMAND [flags] [arguments]   (sluice COMMAND --help: the command's flags)\n\ncommands:")
	for _, c := range subcommands(root) {
		fmt.Fprintf(w, "  %-12s %s\n", c.Name(), c.Short)
	}
	fmt.Fprintf(w, "  %-12s %s\n", "help", "print the commands, or a command's synopsis, flags and examples")
	fmt.Fprintf(w, "\nflags:\n%s", root.LocalFlags().FlagUsages())
	fmt.Fprintln(w, "\nFlags may come anywhere among the arguments: -o json, -ojson and --output json are the same; after -- everything is an argument.")
	fmt.Fprintln(w, "\n"+exitStatusHelp)
}

// synopsis is a command's usage lines, each starting "sluice ".
func synopsis(c *cobra.Command) []string {
	lines := []string{c.UseLine()}
	if more := c.Annotations[annSynopsis]; more != "" {
		lines = append(lines, strings.Split(more, "\n")...)
	}
	return lines
}

func examples(c *cobra.Command) []string {
	if c.Annotations[annExamples] == "" {
		return nil
	}
	return strings.Split(c.Annotations[annExamples], "\n")
}

// annotations is a command's further synopsis lines and examples.
func annotations(synopsis []string, examples ...string) map[string]string {
	return map[string]string{annSynopsis: strings.Join(synopsis, "\n"), annExamples: strings.Join(examples, "\n")}
}

// noArgs, maxArgs and exactArgs check a command's argument count: a wrong
// count is a usage error (exit status 2) saying what to give.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments (got %q)", c.Name(), args)}
	}
	return nil
}

func maxArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) > n {
			return usageError{fmt.Errorf("%s: too many arguments (got %q): %s", c.Name(), args, what)}
		}
		return nil
	}
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s: %s (got %q)", c.Name(), what, args)}
		}
		return nil
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
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

// run runs the command line args (without the program name) and reports
// an error on stderr, with where to find the usage for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	c, err := root.ExecuteContextC(ctx)
	if err == nil {
		return nil
	}
	var ue usageError
	if errors.As(err, &ue) && c != nil && c.HasParent() {
		fmt.Fprintf(stderr, "sluice: %v\n(%s --help prints its usage)\n", err, c.CommandPath())
	} else {
		fmt.Fprintln(stderr, "sluice:", err)
	}
	return err
}
