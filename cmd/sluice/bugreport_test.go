package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/agent/status"
)

// `sluice bugreport` writes one archive, readable only by its owner, with
// the configuration (the SASL password and every other secret-looking
// value redacted, the rest as written), the agent's status and
// connections, tc and BPF state, and errors.txt naming what it could not
// read; a bad flag is a usage error.
func TestBugreport(t *testing.T) {
	dir := t.TempDir()
	sock := serveStatus(t, &status.Snapshot{Cycle: 7, Mode: "enforce", Shaper: "htb"})
	cfg := filepath.Join(dir, "sluice.yaml")
	os.WriteFile(cfg, []byte(`# operator's comment
interfaces: [lo]
listeners: [9092]
exempt_peers: [10.0.0.0/24]
produce: {capacity: 100MiB}
fetch: {capacity: 100MiB}
socket: `+sock+`
metrics_address: 127.0.0.1:1
sasl: {mechanism: PLAIN, username: sluice, password: "Top-Secret-91f2"}
entities:
  clients:
    orders-app: {producer_byte_rate: 5MiB}
`), 0o600)
	archive := filepath.Join(dir, "report.tar.gz")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"bugreport", "--config", cfg, "--out", archive}, &out, &errOut); err != nil {
		t.Fatalf("bugreport: %v %s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "wrote "+archive) {
		t.Errorf("bugreport said: %s", out.String())
	}
	// -o json: the archive and the files in it.
	var js bytes.Buffer
	if err := run(context.Background(), []string{"bugreport", "--config", cfg, "--out", archive + ".2", "-o", "json"}, &js, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var said struct {
		Archive string   `json:"archive"`
		Files   []string `json:"files"`
	}
	if err := json.Unmarshal(js.Bytes(), &said); err != nil || said.Archive != archive+".2" || !slices.Contains(said.Files, "status.json") {
		t.Errorf("bugreport -o json: %v %+v\n%s", err, said, js.String())
	}
	st, err := os.Stat(archive)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("archive %v, mode %v: want 0600", err, st)
	}
	files := readArchive(t, archive)
	for _, name := range []string{"version.txt", "config.yaml", "check-config.txt", "status.json", "connections.json", "tc.txt", "bpftool.txt", "journal.txt", "errors.txt"} {
		if _, ok := files["sluice-bugreport/"+name]; !ok {
			t.Errorf("the archive lacks %s (has %v)", name, keysOf(files))
		}
	}
	conf := files["sluice-bugreport/config.yaml"]
	if strings.Contains(conf, "Top-Secret-91f2") || !strings.Contains(conf, "<redacted>") || !strings.Contains(conf, "orders-app") ||
		!strings.Contains(conf, "operator's comment") {
		t.Errorf("config.yaml not redacted as it should be:\n%s", conf)
	}
	for name, data := range files {
		if strings.Contains(data, "Top-Secret-91f2") {
			t.Errorf("%s carries the password", name)
		}
	}
	if !strings.Contains(files["sluice-bugreport/status.json"], `"cycle": 7`) {
		t.Errorf("status.json: %s", files["sluice-bugreport/status.json"])
	}
	if !strings.Contains(files["sluice-bugreport/errors.txt"], "metrics") {
		t.Errorf("errors.txt does not say the metrics could not be scraped: %s", files["sluice-bugreport/errors.txt"])
	}
	if err := run(context.Background(), []string{"bugreport", "--bogus"}, &out, &errOut); exitStatus(err) != 2 {
		t.Errorf("a bad flag: %v, want exit 2", err)
	}
}

func readArchive(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		out[h.Name] = string(data)
	}
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
