package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// runMan: `sluice man --out DIR` writes sluice.1 and sluice-COMMAND.1 for
// every command, made from the command tree (synopsis, summary, flags from
// the command itself, examples, exit status), so the pages say what the
// binary does. The packages ship them.
func runMan(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("man", stderr)
	out := fs.String("out", "", "directory to write the pages into (created if missing)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *out == "" || fs.NArg() != 0 {
		return usageError{errors.New("man: give --out DIR and nothing else")}
	}
	cmds, err := completionTree()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	pages := map[string]string{"sluice.1": overviewPage(cmds)}
	for _, c := range cmds {
		pages["sluice-"+c.name+".1"] = commandPage(c)
	}
	for _, name := range slices.Sorted(maps.Keys(pages)) {
		if err := os.WriteFile(filepath.Join(*out, name), []byte(pages[name]), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(stdout, filepath.Join(*out, name))
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

func overviewPage(cmds []completedCommand) string {
	var b strings.Builder
	fmt.Fprintf(&b, manHeader, "SLUICE", manVersion())
	b.WriteString(".SH NAME\nsluice \\- elastic bandwidth quotas for Kafka broker hosts, enforced at the NIC with eBPF\n")
	b.WriteString(".SH SYNOPSIS\n\\fBsluice\\fR \\fICOMMAND\\fR [\\fIflags\\fR]\n")
	b.WriteString(".SH DESCRIPTION\nsluice gives every quota entity (client\\-id, topic\\-partition, user, peer network) a reservation that is never throttled, a weight for sharing idle capacity and a hard limit, recomputes every entity's rate once a second and holds each connection to it at the NIC.\nFlags may come anywhere among the arguments; \\fBsluice help\\fR \\fICOMMAND\\fR prints a command's flags.\n")
	b.WriteString(".SH COMMANDS\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, ".TP\n\\fBsluice\\-%s\\fR(1)\n%s\n", c.name, roff(c.summary))
	}
	fmt.Fprintf(&b, ".SH FILES\n.TP\n/etc/sluice/sluice.yaml\nthe configuration (\\fBsluice check\\-config\\fR validates it)\n.SH EXIT STATUS\n%s\n", roff(exitStatusHelp))
	return b.String()
}

func commandPage(c completedCommand) string {
	var b strings.Builder
	fmt.Fprintf(&b, manHeader, "SLUICE-"+strings.ToUpper(c.name), manVersion())
	fmt.Fprintf(&b, ".SH NAME\nsluice\\-%s \\- %s\n", c.name, roff(c.summary))
	b.WriteString(".SH SYNOPSIS\n.nf\n" + roff(strings.TrimPrefix(c.synopsis, "usage: ")) + "\n.fi\n")
	fmt.Fprintf(&b, ".SH DESCRIPTION\n%s.\n", roff(strings.ToUpper(c.summary[:1])+c.summary[1:]))
	if len(c.flags) > 0 {
		b.WriteString(".SH OPTIONS\n")
		for _, f := range c.flags {
			arg := ""
			if !f.bool {
				arg = ` \fIvalue\fR`
			}
			def := ""
			if f.def != "" && !(f.bool && f.def == "false") {
				def = " (default: " + roff(f.def) + ")"
			}
			fmt.Fprintf(&b, ".TP\n%s%s\n%s%s\n", roffOption(f.spelling), arg, roff(f.usage), def)
		}
	}
	b.WriteString(".SH EXAMPLES\n.nf\n")
	for _, e := range c.examples {
		b.WriteString(roff(e) + "\n")
	}
	fmt.Fprintf(&b, ".fi\n.SH EXIT STATUS\n%s\n.SH SEE ALSO\n\\fBsluice\\fR(1)\n", roff(exitStatusHelp))
	return b.String()
}
