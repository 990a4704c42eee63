package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// event is the part of a test2json event the digest reads.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

const (
	keptLines = 20  // a failed test's last lines in the digest
	lineCap   = 400 // characters of one line in the digest
)

// digest keeps each test's last lines and which tests failed, in the
// order they failed.
type digest struct {
	lines  map[string][]string // test key → its last keptLines lines
	failed []string
}

func newDigest() *digest { return &digest{lines: map[string][]string{}} }

func key(e event) string { return e.Package + " " + e.Test }

// add reads one line of `go test -json`; it returns the output to print
// and whether the line was an event at all.
func (d *digest) add(line []byte) (string, bool) {
	var e event
	if json.Unmarshal(line, &e) != nil || e.Action == "" {
		return "", false
	}
	switch e.Action {
	case "output":
		if e.Test != "" {
			k := key(e)
			for _, l := range strings.Split(strings.TrimRight(e.Output, "\n"), "\n") {
				if len(l) > lineCap {
					l = l[:lineCap] + " […]"
				}
				d.lines[k] = append(d.lines[k], l)
			}
			if n := len(d.lines[k]); n > keptLines {
				d.lines[k] = d.lines[k][n-keptLines:]
			}
		}
		return e.Output, true
	case "fail":
		if e.Test != "" {
			d.failed = append(d.failed, key(e))
		}
	}
	return "", true
}

// write prints the digest: each failed test without a failed subtest (its
// parent's lines are the subtests' summary), with its last lines.
func (d *digest) write(w io.Writer) {
	var leaves []string
	for _, k := range d.failed {
		leaf := true
		for _, other := range d.failed {
			leaf = leaf && !strings.HasPrefix(other, k+"/")
		}
		if leaf {
			leaves = append(leaves, k)
		}
	}
	if len(leaves) == 0 {
		return
	}
	fmt.Fprintf(w, "\n=== failure digest: %d failed test(s); each one's last lines\n", len(leaves))
	for _, k := range leaves {
		fmt.Fprintf(w, "--- %s\n", k)
		for _, l := range d.lines[k] {
			fmt.Fprintf(w, "    %s\n", strings.TrimSpace(l))
		}
	}
}
