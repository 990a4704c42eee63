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

	"github.com/spf13/pflag"

	"github.com/sluice-dev/sluice/agent/status"
)

// complete asks the command tree what to complete after words, as the
// shell scripts do (`sluice __complete WORDS... PARTIAL`), and returns the
// words offered (without descriptions) and cobra's directive line.
func complete(t *testing.T, words ...string) ([]string, string) {
	t.Helper()
	var stdout bytes.Buffer
	if err := run(context.Background(), append([]string{"__complete"}, words...), &stdout, &bytes.Buffer{}); err != nil {
		t.Fatalf("__complete %q: %v", words, err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var got []string
	for _, l := range lines[:len(lines)-1] {
		word, _, _ := strings.Cut(l, "\t")
		got = append(got, word)
	}
	return got, lines[len(lines)-1]
}

// The bash script completes commands, a command's flags, -o's formats and
// the shells, as bash itself runs it: it asks the binary (here the test
// binary run as sluice, from PATH).
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wrapper := "#!/bin/sh\n" + asMainEnv + "=1 exec " + strconv.Quote(self) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "sluice"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	var script bytes.Buffer
	if err := run(context.Background(), []string{"completion", "bash"}, &script, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.bash")
	if err := os.WriteFile(path, script.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// The script uses the bash-completion package's word splitting (the
	// package is where bash completion is installed); this is its simple
	// case, for a shell without the package.
	const wordsByRef = `declare -F _get_comp_words_by_ref >/dev/null || _get_comp_words_by_ref() {
	cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD; }
`
	completeBash := func(words ...string) string {
		t.Helper()
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		prog := wordsByRef + ". " + path + "; COMP_WORDS=(" + strings.Join(quoted, " ") + "); COMP_CWORD=" + strconv.Itoa(len(words)-1) +
			"; COMP_LINE='" + strings.Join(words, " ") + "'; COMP_POINT=${#COMP_LINE}; COMP_TYPE=9; __start_sluice; echo \"${COMPREPLY[*]}\""
		cmd := exec.Command(bash, "--norc", "-c", prog)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		// stderr: bash's compopt, outside a completion bash is running,
		// says it is not in one.
		out, err := cmd.Output()
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
		if got := completeBash(tc.words...); got != tc.want {
			t.Errorf("completing %q: %q, want %q", tc.words, got, tc.want)
		}
	}
}

// explain completes the entity names and client addresses the running
// agent knows, and connections --entity the entities; with no agent to
// ask, nothing (and no error).
func TestCompletionAsksTheAgent(t *testing.T) {
	snap := &status.Snapshot{Cycle: 1, Directions: [2]status.DirectionView{
		{Direction: "produce", Enabled: true, Entities: []status.EntityView{{ID: 1, Kind: "client", Name: "orders", State: "active"},
			{ID: 2, Kind: "topic-partition", Name: "events-0", State: "standby"}}},
		{Direction: "fetch", Enabled: true, Entities: []status.EntityView{{ID: 1, Kind: "client", Name: "orders", State: "active"}}}}}
	sock := serveStatus(t, snap)
	got, directive := complete(t, "explain", "--socket", sock, "")
	if want := "client:orders events-0 orders topic-partition:events-0"; strings.Join(got, " ") != want || directive != ":4" {
		t.Errorf("explain: %q %s, want %q and no file names (:4)", got, directive, want)
	}
	if got, _ := complete(t, "connections", "--socket", sock, "--entity", ""); !strings.Contains(strings.Join(got, " "), "client:orders") {
		t.Errorf("connections --entity: %q", got)
	}
	if got, directive := complete(t, "explain", "--socket", filepath.Join(t.TempDir(), "none.sock"), ""); len(got) != 0 || directive != ":4" {
		t.Errorf("explain with no agent: %q %s, want nothing", got, directive)
	}
	if got, _ := complete(t, "explain", "--socket", sock, "orders", ""); len(got) != 0 {
		t.Errorf("a second entity completed: %q", got)
	}
}

func TestCompletionOtherShellsAndBadInput(t *testing.T) {
	var fish, zsh bytes.Buffer
	if err := run(context.Background(), []string{"completion", "fish"}, &fish, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fish.String(), "complete -c sluice ") || !strings.Contains(fish.String(), "__complete") {
		t.Errorf("fish: no completion for sluice asking the binary:\n%.300s", fish.String())
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
	for _, c := range subcommands(newRootCmd()) {
		page := filepath.Join(dir, "sluice-"+c.Name()+".1")
		text, err := os.ReadFile(page)
		if err != nil {
			t.Errorf("%s: %v", c.Name(), err)
			continue
		}
		if !strings.Contains(string(overview), `\fBsluice\-`+c.Name()+`\fR(1)`) {
			t.Errorf("sluice.1 does not list %s", c.Name())
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			if !strings.Contains(string(text), roffOption("--"+f.Name)) {
				t.Errorf("%s: flag --%s missing", page, f.Name)
			}
			if f.Shorthand != "" && !strings.Contains(string(text), roffOption("-"+f.Shorthand)+", "+roffOption("--"+f.Name)) {
				t.Errorf("%s: flag -%s missing", page, f.Shorthand)
			}
		})
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
