package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/agent/status"
)

// `sluice version` and `--version` print the version and revision.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if out := stdout.String(); !strings.HasPrefix(out, "sluice ") || !strings.Contains(out, "revision ") {
			t.Errorf("%v printed %q, want sluice VERSION revision REV", args, out)
		}
	}
}

// Every subcommand's --help (and -h) prints its synopsis, flags and
// examples to stdout and exits 0, without running the command.
func TestEverySubcommandHasHelp(t *testing.T) {
	for _, c := range subcommands(newRootCmd()) {
		for _, flag := range []string{"--help", "-h"} {
			var stdout, stderr bytes.Buffer
			if err := run(context.Background(), []string{c.Name(), flag}, &stdout, &stderr); err != nil {
				t.Errorf("%s %s: %v", c.Name(), flag, err)
			}
			out := stdout.String()
			if !strings.HasPrefix(out, "usage: sluice "+c.Name()) || !strings.Contains(out, "examples:\n  ") || !strings.Contains(out, exitStatusHelp) {
				t.Errorf("%s %s printed:\n%s", c.Name(), flag, out)
			}
			if stderr.Len() > 0 || strings.Contains(out, versionString()) {
				t.Errorf("%s %s ran the command or wrote to stderr: %q %q", c.Name(), flag, out, stderr.String())
			}
		}
	}
	// A bad flag is still a usage error, reported on stderr.
	var stderr bytes.Buffer
	var ue usageError
	if err := run(context.Background(), []string{"status", "--bogus"}, &bytes.Buffer{}, &stderr); !errors.As(err, &ue) || !strings.Contains(stderr.String(), "bogus") {
		t.Errorf("status --bogus: %v, stderr %q", err, stderr.String())
	}
}

// -o takes text or json; anything else is a usage error (exit status 2)
// before any socket is dialled.
func TestOutputFlagIsChecked(t *testing.T) {
	for _, cmd := range [][]string{{"status", "-o", "yaml"}, {"explain", "-o", "xml", "core"}, {"reload", "-o", "yaml"}} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append(cmd, "--socket", "/nonexistent/sluice.sock"), &stdout, &stderr)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "use text or json") {
			t.Errorf("%v: %v, want a usage error naming the formats", cmd, err)
		}
	}
	// Commands that act (unload, bugreport) refuse the format before acting:
	// nothing is removed or written.
	out := filepath.Join(t.TempDir(), "report.tar.gz")
	for _, cmd := range [][]string{{"unload", "--pin-path", "/nonexistent/sluice", "-o", "yaml"}, {"bugreport", "--out", out, "-o", "yaml"},
		{"simulate", "--scenario", "/nonexistent.yaml", "-o", "yaml"}, {"version", "-o", "yaml"}} {
		var stdout bytes.Buffer
		err := run(context.Background(), cmd, &stdout, &bytes.Buffer{})
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "use text or json") || stdout.Len() > 0 {
			t.Errorf("%v: %v (printed %q), want a usage error naming the formats", cmd, err, stdout.String())
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("bugreport -o yaml wrote its archive: %v", err)
	}
}

// Every command that reports (all but run, demo, completion and man, whose
// output is a daemon, a story, a script or files) takes -o text|json: the
// tree says so, from each command's own flags.
func TestReportingCommandsTakeOutputFormat(t *testing.T) {
	for _, c := range subcommands(newRootCmd()) {
		has := c.Flags().ShorthandLookup("o") != nil && c.Flags().Lookup("output") != nil
		switch c.Name() {
		case "run", "demo", "completion", "man":
		default:
			if !has {
				t.Errorf("%s takes no -o, --output", c.Name())
			}
		}
	}
}

// simulate -o text is the table and -o json the cycles, as --format says.
func TestSimulateOutputFormats(t *testing.T) {
	scenarioFile := "../../allocator/scenario/examples/4-paper-overcommit.yaml"
	for o, want := range map[string]string{"text": "cycle", "json": "{"} {
		var stdout bytes.Buffer
		if err := run(context.Background(), []string{"simulate", "--scenario", scenarioFile, "-o", o}, &stdout, &bytes.Buffer{}); err != nil {
			t.Fatalf("-o %s: %v", o, err)
		}
		if !strings.HasPrefix(strings.TrimSpace(stdout.String()), want) {
			t.Errorf("-o %s printed %.60q, want it to start with %q", o, stdout.String(), want)
		}
	}
}

// check-config takes the file as --config, as every subcommand does, or as
// its argument; both spellings report the same problem, naming the key.
func TestCheckConfigFlagSpelling(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("interfaces: [eth0]\nlisteners: [9092]\nproduce: {capacity: lots}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check-config", "--config", path}, {"check-config", path}} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, &stdout, &stderr)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(stderr.String(), "produce.capacity") {
			t.Errorf("%v: err %v, stderr %q: want the invalid key named", args, err, stderr.String())
		}
	}
	var stderr bytes.Buffer
	if err := run(context.Background(), []string{"check-config", "--config", path, path}, &bytes.Buffer{}, &stderr); err == nil {
		t.Error("two files accepted")
	}
}

// The conventions of the ecosystem's tools: help asked for goes to stdout
// with status 0 (`sluice --help`, `sluice help`, `sluice help CMD`), no
// command is a usage error on stderr; flags may follow arguments
// (`sluice explain core -o json`), and after "--" everything is an
// argument; `-o json` works on version and check-config too.
func TestCLIConventions(t *testing.T) {
	runOut := func(args ...string) (string, string, error) {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, &stdout, &stderr)
		return stdout.String(), stderr.String(), err
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		out, errOut, err := runOut(args...)
		if err != nil || !strings.HasPrefix(out, "usage: sluice COMMAND") || errOut != "" {
			t.Errorf("%v: %v, stdout %q, stderr %q", args, err, out, errOut)
		}
	}
	if out, _, err := runOut("help", "connections"); err != nil || !strings.HasPrefix(out, "usage: sluice connections") {
		t.Errorf("help connections: %v\n%s", err, out)
	}
	if _, errOut, err := runOut(); exitStatus(err) != 2 || !strings.Contains(errOut, "usage: sluice COMMAND") {
		t.Errorf("no command: %v, stderr %q", err, errOut)
	}
	if _, _, err := runOut("help", "nosuch"); exitStatus(err) != 2 {
		t.Errorf("help nosuch: %v, want exit 2", err)
	}

	// Flags after the argument, and "--".
	sock := serveStatus(t, &status.Snapshot{Cycle: 1, Directions: [2]status.DirectionView{
		{Direction: "produce", Enabled: true, Entities: []status.EntityView{{ID: 1, Kind: "client", Name: "core-group", State: "active"}}}, {Direction: "fetch"}}})
	if out, _, err := runOut("explain", "core-group", "-o", "json", "--socket", sock); err != nil || !strings.HasPrefix(out, `[{"direction"`) {
		t.Errorf("explain core-group -o json: %v\n%s", err, out)
	}
	if _, _, err := runOut("explain", "--socket", sock, "--", "-o"); exitStatus(err) != 1 || !strings.Contains(err.Error(), `no entity "-o"`) {
		t.Errorf("explain -- -o: %v, want -o taken as the entity name", err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(cfg, []byte("interfaces: [lo]\nlisteners: [9092]\nexempt_peers: [10.0.0.0/24]\nproduce: {capacity: 100MiB}\nfetch: {capacity: 100MiB}\n"), 0o600)
	if out, _, err := runOut("explain", "--client-id", "app", "--config", cfg, "-o", "json"); err != nil || !strings.HasPrefix(out, `{"entity":"client:app"`) {
		t.Errorf("explain with flags in any order: %v\n%s", err, out)
	}

	// -o json on version and check-config.
	out, _, err := runOut("version", "-o", "json")
	var v struct{ Version, Revision string }
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Version == "" || v.Revision == "" {
		t.Errorf("version -o json: %v %q", err, out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("interfaces: [lo]\nlisteners: [9092]\nproduce: {capacity: lots}\nfetch: {capacity: 100MiB}\n"), 0o600)
	out, _, err = runOut("check-config", bad, "-o", "json")
	var r checkReport
	if exitStatus(err) != 2 || json.Unmarshal([]byte(out), &r) != nil || r.Valid || r.Stage != "file" || len(r.Problems) == 0 || r.Problems[0].Key != "produce.capacity" {
		t.Errorf("check-config -o json on a bad file: %v %+v\n%s", err, r, out)
	}
	if _, _, err := runOut("check-config", cfg, "-o", "yaml"); exitStatus(err) != 2 || !strings.Contains(err.Error(), "use text or json") {
		t.Errorf("check-config -o yaml: %v", err)
	}
}

// GNU flag syntax: --output json, --output=json, -o json and -ojson are
// the same, for status and explain; -o yaml is a usage error (exit 2)
// naming the formats, on stderr, with nothing on stdout.
func TestOutputFlagSpellings(t *testing.T) {
	sock := serveStatus(t, &status.Snapshot{Cycle: 4, Directions: [2]status.DirectionView{
		{Direction: "produce", Enabled: true, Entities: []status.EntityView{{ID: 1, Kind: "client", Name: "core", State: "active"}}}, {Direction: "fetch"}}})
	for _, spelling := range [][]string{{"--output", "json"}, {"--output=json"}, {"-o", "json"}, {"-ojson"}, {"-o=json"}} {
		for _, cmd := range [][]string{{"status"}, {"explain", "core"}} {
			args := append(append(append([]string{}, cmd...), spelling...), "--socket", sock)
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), args, &stdout, &stderr)
			var doc any
			if err != nil || json.Unmarshal(stdout.Bytes(), &doc) != nil {
				t.Errorf("%q: %v, printed %q %q, want JSON", args, err, stdout.String(), stderr.String())
			}
		}
	}
	for _, cmd := range [][]string{{"status", "-o", "yaml"}, {"status", "--output=yaml"}, {"explain", "-oyaml", "core"}, {"explain", "core", "--output", "yaml"}} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append(cmd, "--socket", sock), &stdout, &stderr)
		if exitStatus(err) != 2 || !strings.Contains(stderr.String(), `"yaml"`) || !strings.Contains(stderr.String(), "use text or json") || stdout.Len() > 0 {
			t.Errorf("%q: %v (exit %d), stdout %q, stderr %q: want exit 2 naming text and json", cmd, err, exitStatus(err), stdout.String(), stderr.String())
		}
	}
}

// Every command refuses an unknown flag, and every command that takes no
// arguments refuses one, with exit status 2 and nothing done or printed on
// stdout; those that take some refuse too many, and too few.
func TestArgumentsAndFlagsAreChecked(t *testing.T) {
	check := func(args []string, want string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, &stdout, &stderr)
		if exitStatus(err) != 2 || !strings.Contains(err.Error(), want) || stdout.Len() > 0 || !strings.Contains(stderr.String(), want) {
			t.Errorf("%q: %v (exit %d), stdout %q, stderr %q: want exit 2 saying %q", args, err, exitStatus(err), stdout.String(), stderr.String(), want)
		}
	}
	root := newRootCmd()
	for _, c := range append(subcommands(root), root) {
		args := []string{"--bogus"}
		if c != root {
			args = []string{c.Name(), "--bogus"}
		}
		check(args, "unknown flag: --bogus")
		if c != root {
			check([]string{c.Name(), "-Z"}, "unknown shorthand flag: 'Z'")
		}
	}
	noArguments := []string{"run", "status", "connections", "bugreport", "reload", "unload", "simulate", "demo", "version", "man"}
	for _, c := range subcommands(root) {
		if slices.Contains(noArguments, c.Name()) {
			check([]string{c.Name(), "extra"}, c.Name()+` takes no arguments (got ["extra"])`)
			check([]string{c.Name(), "--", "extra"}, "takes no arguments")
		}
	}
	for _, args := range [][]string{{"explain", "core", "other"}, {"check-config", "a.yaml", "b.yaml"}, {"help", "status", "explain"}} {
		check(args, "too many arguments")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain"}, "give one entity name"},
		{[]string{"completion"}, "name one shell"},
		{[]string{"completion", "bash", "zsh"}, "name one shell"},
		{[]string{"simulate"}, "--scenario FILE is required"},
		{[]string{"man"}, "give --out DIR"},
		{[]string{"explain", "--config"}, "flag needs an argument: --config"},
		{[]string{"nosuch"}, `unknown command "nosuch"`},
	} {
		check(tc.args, tc.want)
	}
}
