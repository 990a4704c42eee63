package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newManCmd: `sluice man --out DIR` writes sluice.1 and sluice-COMMAND.1
// for every command, made from the command tree (synopsis, summary, flags,
// examples, exit status), so the pages say what the binary does. The
// packages ship them (deploy/pkg runs it).
func newManCmd() *cobra.Command {
	c := &cobra.Command{
		Use:         "man --out DIR",
		Short:       "write the manual pages (sluice.1 and one per command), made from the command tree",
		Args:        noArgs,
		Annotations: annotations(nil, "sluice man --out /usr/local/share/man/man1 && man sluice-status"),
	}
	out := c.Flags().String("out", "", "`directory` to write the pages into (created if missing)")
	c.MarkFlagDirname("out")
	c.RunE = func(c *cobra.Command, _ []string) error {
		if *out == "" {
			return usageError{errors.New("man: give --out DIR")}
		}
		return writeManPages(c.Root(), *out, c.OutOrStdout())
	}
	return c
}

// writeManPages writes root's pages into dir and prints their paths.
func writeManPages(root *cobra.Command, dir string, stdout io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pages := map[string]string{"sluice.1": overviewPage(root)}
	for _, c := range subcommands(root) {
		pages["sluice-"+c.Name()+".1"] = commandPage(c)
	}
	for _, name := range slices.Sorted(maps.Keys(pages)) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(pages[name]), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(stdout, filepath.Join(dir, name))
	}
	return nil
}

// roff escapes text for a man page: backslashes, and a line that would
// start with a control character.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			lines[i] = `\&` + l
		}
	}
	return strings.Join(lines, "\n")
}

// roffOption is a flag's spelling with its dashes as roff's minus signs.
func roffOption(s string) string { return `\fB` + strings.ReplaceAll(s, "-", `\-`) + `\fR` }

const manHeader = ".TH %s 1 \"\" \"sluice %s\" \"sluice manual\"\n"

// manVersion is the version the pages name.
func manVersion() string {
	v, _, _ := buildVersion()
	return v
}

func overviewPage(root *cobra.Command) string {
	var b strings.Builder
	fmt.Fprintf(&b, manHeader, "SLUICE", manVersion())
	b.WriteString(".SH NAME\nsluice \\- elastic bandwidth quotas for Kafka broker hosts, enforced at the NIC with eBPF\n")
	b.WriteString(".SH SYNOPSIS\n\\fBsluice\\fR \\fICOMMAND\\fR [\\fIflags\\fR]\n")
	b.WriteString(".SH DESCRIPTION\nsluice gives every quota entity (client\\-id, topic\\-partition, user, peer network) a reservation that is never throttled, a weight for sharing idle capacity and a hard limit, recomputes every entity's rate once a second and holds each connection to it at the NIC.\nFlags may come anywhere among the arguments, in GNU syntax (\\fB\\-o json\\fR, \\fB\\-ojson\\fR and \\fB\\-\\-output json\\fR are the same); \\fBsluice help\\fR \\fICOMMAND\\fR prints a command's flags.\n")
	b.WriteString(".SH COMMANDS\n")
	for _, c := range subcommands(root) {
		fmt.Fprintf(&b, ".TP\n\\fBsluice\\-%s\\fR(1)\n%s\n", c.Name(), roff(c.Short))
	}
	fmt.Fprintf(&b, ".SH FILES\n.TP\n/etc/sluice/sluice.yaml\nthe configuration (\\fBsluice check\\-config\\fR validates it)\n.SH EXIT STATUS\n%s\n", roff(exitStatusHelp))
	return b.String()
}

func commandPage(c *cobra.Command) string {
	var b strings.Builder
	name, summary := c.Name(), c.Short
	fmt.Fprintf(&b, manHeader, "SLUICE-"+strings.ToUpper(name), manVersion())
	fmt.Fprintf(&b, ".SH NAME\nsluice\\-%s \\- %s\n", name, roff(summary))
	b.WriteString(".SH SYNOPSIS\n.nf\n" + roff(strings.Join(synopsis(c), "\n")) + "\n.fi\n")
	fmt.Fprintf(&b, ".SH DESCRIPTION\n%s.\n", roff(strings.ToUpper(summary[:1])+summary[1:]))
	if c.HasAvailableLocalFlags() {
		b.WriteString(".SH OPTIONS\n")
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" {
				return
			}
			spelling := roffOption("--" + f.Name)
			if f.Shorthand != "" {
				spelling = roffOption("-"+f.Shorthand) + ", " + spelling
			}
			isBool := f.Value.Type() == "bool"
			name, usage := pflag.UnquoteUsage(f)
			arg := ""
			if name != "" {
				arg = ` \fI` + roff(name) + `\fR`
			}
			def := ""
			if f.DefValue != "" && !(isBool && f.DefValue == "false") && !(f.Value.Type() == "duration" && f.DefValue == "0s") {
				def = " (default: " + roff(f.DefValue) + ")"
			}
			fmt.Fprintf(&b, ".TP\n%s%s\n%s%s\n", spelling, arg, roff(usage), def)
		})
	}
	b.WriteString(".SH EXAMPLES\n.nf\n")
	for _, e := range examples(c) {
		b.WriteString(roff(e) + "\n")
	}
	fmt.Fprintf(&b, ".fi\n.SH EXIT STATUS\n%s\n.SH SEE ALSO\n\\fBsluice\\fR(1)\n", roff(exitStatusHelp))
	return b.String()
}
