package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/agent/configfile"
)

// check-config warns of an empty exempt_peers in shadow too (config's own
// warning covers enforce: once, either way), and of metrics served on every
// address without a web configuration (TLS, basic auth); a file without
// either says neither.
func TestCheckConfigFileWarnings(t *testing.T) {
	const base = "interfaces: [eth0]\nlisteners: [9092]\nproduce: {capacity: 100MiB}\nfetch: {capacity: 100MiB}\n"
	web := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(web, []byte("basic_auth_users:\n  prometheus: $2y$10$abcdefghijklmnopqrstuu0123456789012345678901234567890\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const exempt = "exempt_peers: is empty"
	const open = "listens on every address without metrics.web_config_file"
	for _, c := range []struct {
		name, file string
		want       []string // substrings of the warnings, each once
		not        []string
	}{
		{"shadow, no exempt_peers", base + "mode: shadow\n", []string{exempt + ": in shadow nothing is held back yet, but once mode is enforce"}, []string{open}},
		{"enforce, no exempt_peers", base + "mode: enforce\n", []string{exempt + ": replication from the other brokers"}, []string{open}},
		{"exempt_peers set", base + "exempt_peers: [10.0.0.0/24]\n", nil, []string{exempt, open}},
		{"0.0.0.0", base + "exempt_peers: [10.0.0.0/24]\nmetrics_address: 0.0.0.0:7359\n", []string{"metrics_address: 0.0.0.0:7359 " + open}, []string{exempt}},
		{"[::]", base + "exempt_peers: [10.0.0.0/24]\nmetrics_address: '[::]:7359'\n", []string{"metrics_address: [::]:7359 " + open}, nil},
		{"no host", base + "exempt_peers: [10.0.0.0/24]\nmetrics_address: ':7359'\n", []string{"metrics_address: :7359 " + open}, nil},
		{"0.0.0.0 with a web configuration", base + "exempt_peers: [10.0.0.0/24]\nmetrics_address: 0.0.0.0:7359\nmetrics: {web_config_file: " + web + "}\n", nil, []string{open}},
		{"a host address", base + "exempt_peers: [10.0.0.0/24]\nmetrics_address: 10.0.0.5:7359\n", nil, []string{open}},
	} {
		cfg, err := configfile.Parse([]byte(c.file))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var all []string
		for _, w := range cfg.Warnings() {
			all = append(all, w.Key+": "+w.Message)
		}
		all = append(all, fileWarnings(cfg)...)
		text := strings.Join(all, "\n")
		for _, w := range c.want {
			if strings.Count(text, w) != 1 {
				t.Errorf("%s: want %q once in the warnings:\n%s", c.name, w, text)
			}
		}
		for _, n := range c.not {
			if strings.Contains(text, n) {
				t.Errorf("%s: %q is not wanted in the warnings:\n%s", c.name, n, text)
			}
		}
	}

	// The command reports them, as root or not (a missing interface stops
	// a root check at the host stage, after the file's warnings).
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(path, []byte("interfaces: [sluicenone0]\nlisteners: [9092]\nproduce: {capacity: 100MiB}\nfetch: {capacity: 100MiB}\nmode: shadow\nmetrics_address: 0.0.0.0:7359\n"), 0o600)
	var stdout bytes.Buffer
	run(context.Background(), []string{"check-config", "--config", path, "-o", "json"}, &stdout, &bytes.Buffer{})
	var r checkReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	for _, w := range []string{"exempt_peers: is empty: in shadow", "metrics_address: 0.0.0.0:7359 listens on every address"} {
		if !slices.ContainsFunc(r.Warnings, func(s string) bool { return strings.HasPrefix(s, w) }) {
			t.Errorf("check-config -o json warnings lack %q: %q", w, r.Warnings)
		}
	}
}
