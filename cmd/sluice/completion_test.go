package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Every command reports its flags to introspection without running: the
// completion scripts and man pages are made from them.
func TestEveryCommandReportsItsFlags(t *testing.T) {
	for _, c := range commands() {
		if _, err := commandFlags(c); err != nil {
			t.Error(err)
		}
	}
}

// The bash script completes commands, a command's flags, -o's formats and
// file names, as bash itself runs it.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	var script bytes.Buffer
	if err := run(context.Background(), []string{"completion", "bash"}, &script, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.bash")
	if err := os.WriteFile(path, script.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) string {
		t.Helper()
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		prog := ". " + path + "; COMP_WORDS=(" + strings.Join(quoted, " ") + "); COMP_CWORD=" + strconv.Itoa(len(words)-1) + "; _sluice; echo \"${COMPREPLY[*]}\""
		out, err := exec.Command(bash, "--norc", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"sluice", "sta"}, "status"},
		{[]string{"sluice", "status", "--wa"}, "--wait --watch"},
		{[]string{"sluice", "unload", "--p"}, "--pin-path"},
		{[]string{"sluice", "explain", "-o", ""}, "text json"},
		{[]string{"sluice", "simulate", "--format", "t"}, "table"},
		{[]string{"sluice", "help", "check"}, "check-config"},
		{[]string{"sluice", "completion", "f"}, "fish"},
	} {
		if got := complete(tc.words...); got != tc.want {
			t.Errorf("completing %q: %q, want %q", tc.words, got, tc.want)
		}
	}
}

func TestCompletionOtherShellsAndBadInput(t *testing.T) {
	var fish, zsh bytes.Buffer
	if err := run(context.Background(), []string{"completion", "fish"}, &fish, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fish.String(), "complete -c sluice -n '__fish_seen_subcommand_from unload' -l pin-path") {
		t.Errorf("fish: no --pin-path for unload:\n%s", fish.String())
	}
	if err := run(context.Background(), []string{"completion", "zsh"}, &zsh, &bytes.Buffer{}); err != nil || !strings.HasPrefix(zsh.String(), "#compdef sluice\n") {
		t.Errorf("zsh: %v\n%.80s", err, zsh.String())
	}
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}} {
		var stdout bytes.Buffer
		var ue usageError
		if err := run(context.Background(), args, &stdout, &bytes.Buffer{}); !errors.As(err, &ue) || stdout.Len() > 0 {
			t.Errorf("%v: %v (printed %d bytes), want a usage error and nothing printed", args, err, stdout.Len())
		}
	}
}

// The man pages: one per command and sluice.1 listing them all, each with
// every flag the command takes, and clean as groff reads them (no warning).
func TestManPages(t *testing.T) {
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Fatalf("groff is needed to read the pages (make deps installs groff-base): %v", err)
	}
	dir := t.TempDir()
	if err := run(context.Background(), []string{"man", "--out", dir}, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	overview, err := os.ReadFile(filepath.Join(dir, "sluice.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commands() {
		page := filepath.Join(dir, "sluice-"+c.name+".1")
		text, err := os.ReadFile(page)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !strings.Contains(string(overview), `\fBsluice\-`+c.name+`\fR(1)`) {
			t.Errorf("sluice.1 does not list %s", c.name)
		}
		flags, _ := flagsFor(c)
		for _, f := range flags {
			if !strings.Contains(string(text), roffOption(f.spelling)) {
				t.Errorf("%s: flag %s missing", page, f.spelling)
			}
		}
		out, err := exec.Command(groff, "-man", "-ww", "-z", page).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("%s: groff: %v\n%s", page, err, out)
		}
	}
	var ue usageError
	if err := run(context.Background(), []string{"man"}, &bytes.Buffer{}, &bytes.Buffer{}); !errors.As(err, &ue) {
		t.Errorf("man without --out: %v, want a usage error", err)
	}
}
