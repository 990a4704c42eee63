package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// runCompletion: `sluice completion bash|zsh|fish` prints a completion
// script for the shell: commands, each command's flags (from the command
// itself, commandFlags), -o's formats, and file names where a flag takes
// a file.
func runCompletion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("completion", stderr)
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("completion: name one shell: bash, zsh or fish")}
	}
	cmds, err := completionTree()
	if err != nil {
		return err
	}
	switch fs.Arg(0) {
	case "bash":
		_, err = io.WriteString(stdout, bashCompletion(cmds))
	case "zsh":
		// zsh runs bash completion functions through bashcompinit.
		_, err = io.WriteString(stdout, "#compdef sluice\nautoload -U +X bashcompinit && bashcompinit\n"+bashCompletion(cmds))
	case "fish":
		_, err = io.WriteString(stdout, fishCompletion(cmds))
	default:
		return usageError{fmt.Errorf("completion: %q is not a shell sluice completes for (bash, zsh, fish)", fs.Arg(0))}
	}
	return err
}

type completedCommand struct {
	command
	flags []cliFlag
}

func completionTree() ([]completedCommand, error) {
	var out []completedCommand
	for _, c := range commands() {
		flags, err := flagsFor(c)
		if err != nil {
			return nil, err
		}
		out = append(out, completedCommand{c, flags})
	}
	return out, nil
}

func bashCompletion(cmds []completedCommand) string {
	var names, flagCases, valueCases []string
	words := map[string][]string{} // value words → flags taking them
	var fileFlags []string
	for _, c := range cmds {
		names = append(names, c.name)
		var spellings []string
		for _, f := range c.flags {
			spellings = append(spellings, f.spelling)
			if w, files := valuesOf(f); len(w) > 0 {
				key := strings.Join(w, " ")
				if !slices.Contains(words[key], f.spelling) {
					words[key] = append(words[key], f.spelling)
				}
			} else if files && !slices.Contains(fileFlags, f.spelling) {
				fileFlags = append(fileFlags, f.spelling)
			}
		}
		if c.name != "completion" { // its word is the shell, completed above
			flagCases = append(flagCases, fmt.Sprintf("\t\t%s) flags=%q ;;", c.name, strings.Join(spellings, " ")))
		}
	}
	for w, flags := range words {
		valueCases = append(valueCases, fmt.Sprintf("\t\t%s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;", strings.Join(flags, "|"), w))
	}
	if len(fileFlags) > 0 {
		valueCases = append(valueCases, fmt.Sprintf("\t\t%s) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;", strings.Join(fileFlags, "|")))
	}
	slices.Sort(valueCases)
	return `# bash completion for sluice (sluice completion bash), made from its command tree
_sluice() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} flags=""
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W "` + strings.Join(names, " ") + ` help --help --version" -- "$cur"))
		return
	fi
	case "$prev" in
` + strings.Join(valueCases, "\n") + `
	esac
	case "${COMP_WORDS[1]}" in
		help) COMPREPLY=($(compgen -W "` + strings.Join(names, " ") + `" -- "$cur")); return ;;
		completion) COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")); return ;;
` + strings.Join(flagCases, "\n") + `
	esac
	COMPREPLY=($(compgen -W "$flags --help" -- "$cur"))
}
complete -o default -F _sluice sluice
`
}

func fishCompletion(cmds []completedCommand) string {
	var b strings.Builder
	b.WriteString("# fish completion for sluice (sluice completion fish), made from its command tree\ncomplete -c sluice -f\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "complete -c sluice -n __fish_use_subcommand -a %s -d %s\n", c.name, fishQuote(c.summary))
		for _, f := range c.flags {
			opt := "-l " + strings.TrimPrefix(f.spelling, "--")
			if !strings.HasPrefix(f.spelling, "--") {
				opt = "-s " + strings.TrimPrefix(f.spelling, "-")
			}
			extra := ""
			if w, files := valuesOf(f); len(w) > 0 {
				extra = " -x -a " + fishQuote(strings.Join(w, " "))
			} else if files {
				extra = " -r -F"
			} else if !f.bool {
				extra = " -r"
			}
			fmt.Fprintf(&b, "complete -c sluice -n '__fish_seen_subcommand_from %s' %s -d %s%s\n", c.name, opt, fishQuote(f.usage), extra)
		}
	}
	b.WriteString("complete -c sluice -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n")
	return b.String()
}

func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}
