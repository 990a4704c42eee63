package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// introspectArg, given as a command's only argument, makes its flag set
// report itself instead of parsing (flagsOf): completion scripts and man
// pages read each command's flags from the command itself, so they cannot
// drift from what it takes. Every command defines its flags before it
// parses, and does nothing before that.
const introspectArg = "\x00sluice-flags"

// flagsOf is the error a flag set returns for introspectArg: its flags.
type flagsOf struct{ fs *flag.FlagSet }

func (flagsOf) Error() string { return "flag set reported, not parsed" }

// commandFlags is the flag set a command defines.
func commandFlags(c command) (*flag.FlagSet, error) {
	err := c.run(context.Background(), []string{introspectArg}, io.Discard, io.Discard)
	var f flagsOf
	if errors.As(err, &f) {
		return f.fs, nil
	}
	return nil, fmt.Errorf("%s did not report its flags (%v)", c.name, err)
}

// cliFlag is a flag as the command line spells it.
type cliFlag struct {
	spelling string // -o, --config
	usage    string
	def      string
	bool     bool
}

// flagsFor lists a command's flags, sorted, spelled as users type them:
// one letter with one dash, longer names with two.
func flagsFor(c command) ([]cliFlag, error) {
	fs, err := commandFlags(c)
	if err != nil {
		return nil, err
	}
	var out []cliFlag
	fs.VisitAll(func(f *flag.Flag) {
		spelling := "--" + f.Name
		if len(f.Name) == 1 {
			spelling = "-" + f.Name
		}
		b, isBool := f.Value.(interface{ IsBoolFlag() bool })
		out = append(out, cliFlag{spelling: spelling, usage: f.Usage, def: f.DefValue, bool: isBool && b.IsBoolFlag()})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].spelling < out[j].spelling })
	return out, nil
}

// valuesOf is what a flag's value completes to: the formats for -o and
// --format, files for flags that name one, nothing else.
func valuesOf(f cliFlag) (words []string, files bool) {
	switch f.spelling {
	case "-o":
		return []string{"text", "json"}, false
	case "--format":
		return []string{"json", "table"}, false
	}
	u := strings.ToLower(f.usage)
	return nil, strings.Contains(u, "file") || strings.Contains(u, "path") || strings.Contains(u, "directory") || strings.Contains(u, "socket")
}
