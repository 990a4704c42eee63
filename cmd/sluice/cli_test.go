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
