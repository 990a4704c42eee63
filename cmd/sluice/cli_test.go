package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	for _, c := range commands() {
		for _, flag := range []string{"--help", "-h"} {
			var stdout, stderr bytes.Buffer
			if err := run(context.Background(), []string{c.name, flag}, &stdout, &stderr); err != nil {
				t.Errorf("%s %s: %v", c.name, flag, err)
			}
			out := stdout.String()
			if !strings.HasPrefix(out, "usage: sluice "+c.name) || !strings.Contains(out, "examples:\n  ") || !strings.Contains(out, "exit status:") {
				t.Errorf("%s %s printed:\n%s", c.name, flag, out)
			}
			if stderr.Len() > 0 || strings.Contains(out, versionString()) {
				t.Errorf("%s %s ran the command or wrote to stderr: %q %q", c.name, flag, out, stderr.String())
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
	for _, cmd := range [][]string{{"status", "-o", "yaml"}, {"explain", "-o", "xml", "core"}} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append(cmd, "--socket", "/nonexistent/sluice.sock"), &stdout, &stderr)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "use text or json") {
			t.Errorf("%v: %v, want a usage error naming the formats", cmd, err)
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
