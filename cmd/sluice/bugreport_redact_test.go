package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// No file of the archive holds a secret of the configuration, however the
// file holds it, and a configuration that does not parse is still in the
// archive, redacted line by line, with errors.txt saying it did not parse.
func TestBugreportRedacts(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		secrets      []string
		keep         []string
		notYAML      bool
	}{
		{
			name: "parsed",
			config: `# operator's comment
interfaces: [lo]
listeners: [9092]
socket: /nonexistent/sluice.sock
metrics_address: 127.0.0.1:1
defaults: &pw "Anchored-7c1e"
sasl:
  mechanism: PLAIN
  username: sluice
  password: *pw
tls:
  key_file: /etc/sluice/key.pem
  key: |
    Block-Secret-55aa
  # password: Commented-31bd
`,
			secrets: []string{"Anchored-7c1e", "Block-Secret-55aa", "Commented-31bd"},
			keep:    []string{"operator's comment", "username: sluice", "key_file: /etc/sluice/key.pem"},
		},
		{
			name: "not YAML",
			config: "interfaces: [lo]\nsocket: /nonexistent/sluice.sock\nsasl:\n\tpassword: Tabbed-0d9f\n  token: |\n    Block-c4e2\n" +
				"mode: shadow\n",
			secrets: []string{"Tabbed-0d9f", "Block-c4e2"},
			keep:    []string{"did not parse as YAML", "mode: shadow"},
			notYAML: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "sluice.yaml")
			if err := os.WriteFile(cfg, []byte(tc.config), 0o600); err != nil {
				t.Fatal(err)
			}
			archive := filepath.Join(dir, "report.tar.gz")
			var out, errOut bytes.Buffer
			if err := run(context.Background(), []string{"bugreport", "--config", cfg, "--out", archive}, &out, &errOut); err != nil {
				t.Fatalf("bugreport: %v %s", err, errOut.String())
			}
			files := readArchive(t, archive)
			conf, ok := files["sluice-bugreport/config.yaml"]
			if !ok {
				t.Fatalf("the archive lacks config.yaml (has %v)", keysOf(files))
			}
			for name, data := range files {
				for _, s := range tc.secrets {
					if strings.Contains(data, s) {
						t.Errorf("%s holds %q:\n%s", name, s, data)
					}
				}
			}
			for _, s := range tc.keep {
				if !strings.Contains(conf, s) {
					t.Errorf("config.yaml lacks %q:\n%s", s, conf)
				}
			}
			if said := strings.Contains(files["sluice-bugreport/errors.txt"], "did not parse as YAML"); said != tc.notYAML {
				t.Errorf("errors.txt says the file did not parse: %v, want %v:\n%s", said, tc.notYAML, files["sluice-bugreport/errors.txt"])
			}
		})
	}
}
