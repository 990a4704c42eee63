package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimulatePrintsJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"simulate", "--scenario", "../../allocator/scenario/examples/1-normal-allocation.yaml"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	var res struct {
		Cycles []struct {
			Entities map[string]struct {
				DynamicLimit float64 `json:"dynamic_limit"`
			} `json:"entities"`
		} `json:"cycles"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout.String())
	}
	if got := res.Cycles[0].Entities["A"].DynamicLimit; got != 636.36 {
		t.Errorf("A %v, want 636.36", got)
	}
}

func TestSimulateInvalidExitsTwoWithNothingOnStdout(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(file, []byte("capacity: 1\nentities: [{name: a}, {name: b}, {name: c, weight: -1}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"simulate", "--scenario", file},
		{"simulate", "--scenario", filepath.Join(t.TempDir(), "missing.yaml")},
		{"simulate"},
		{"simulate", "--scenario", file, "--format", "xml"},
		{"no-such-command"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, &stdout, &stderr)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: err %v, want a usage error (exit 2)", args, err)
		}
		if stdout.Len() != 0 {
			t.Errorf("%v: stdout %q, want nothing", args, stdout.String())
		}
	}
	var stdout bytes.Buffer
	err := run(context.Background(), []string{"simulate", "--scenario", file}, &stdout, &bytes.Buffer{})
	if !strings.Contains(err.Error(), "entities[2].weight: must be > 0") {
		t.Errorf("message %q does not name the field path", err)
	}
}

func TestDemoPrintsEveryExample(t *testing.T) {
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"demo"}, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1-normal-allocation", "4-paper-overcommit", "636.36", "760.71", "OVERCOMMIT"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}
