package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/internal/redact"
)

// newBugreportCmd: `sluice bugreport`, everything needed to tell why a host
// behaves as it does, in one archive: the configuration with its secrets
// redacted, the agent's status and connections, its metrics, the tc and
// BPF state of the interfaces, and the recent journal. What cannot be read
// is said in errors.txt inside the archive; the report is written anyway.
func newBugreportCmd() *cobra.Command {
	c := &cobra.Command{
		Use:         "bugreport [--config FILE] [--out FILE.tar.gz] [-o text|json]",
		Short:       "gather the configuration (secrets redacted), status, connections, metrics, tc and BPF state and the journal into one archive",
		Args:        noArgs,
		Annotations: annotations(nil, "sudo sluice bugreport --out /tmp/sluice-report.tar.gz && tar tzf /tmp/sluice-report.tar.gz"),
	}
	path := c.Flags().String("config", defaultConfigPath, "the agent's configuration `file`")
	out := c.Flags().String("out", "", "the archive `file` to write (default sluice-bugreport-<host>-<time>.tar.gz in the current directory)")
	output := addOutputFlag(c)
	c.MarkFlagFilename("config", "yaml", "yml")
	c.MarkFlagFilename("out", "tar.gz")
	c.RunE = func(c *cobra.Command, _ []string) error {
		return runBugreport(c.Context(), *path, *out, output.json(), c.OutOrStdout())
	}
	return c
}

func runBugreport(ctx context.Context, path, out string, asJSON bool, stdout io.Writer) error {
	if out == "" {
		host, _ := os.Hostname()
		out = fmt.Sprintf("sluice-bugreport-%s-%s.tar.gz", host, time.Now().UTC().Format("20060102T150405Z"))
	}
	r := &report{files: map[string][]byte{}}
	r.collect(ctx, path)
	if err := r.write(out); err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			Archive string   `json:"archive"`
			Files   []string `json:"files"`
			Errors  []string `json:"errors,omitempty"`
		}{out, r.order, r.errors})
	}
	fmt.Fprintf(stdout, "wrote %s (%d files", out, len(r.files))
	if len(r.errors) > 0 {
		fmt.Fprintf(stdout, "; %d could not be read, see errors.txt", len(r.errors))
	}
	fmt.Fprintln(stdout, ")")
	return nil
}

// report is the archive being gathered: files by name, and what failed.
type report struct {
	files  map[string][]byte
	order  []string
	errors []string
}

func (r *report) add(name string, data []byte) {
	if _, ok := r.files[name]; !ok {
		r.order = append(r.order, name)
	}
	r.files[name] = data
}

func (r *report) fail(what string, err error) {
	r.errors = append(r.errors, fmt.Sprintf("%s: %v", what, err))
}

// command adds a command's output (stdout and stderr) under name.
func (r *report) command(ctx context.Context, name string, argv ...string) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	header := "$ " + strings.Join(argv, " ") + "\n"
	prev := r.files[name]
	r.add(name, append(append(prev, header...), out...))
	if err != nil {
		r.fail(strings.Join(argv, " "), err)
	}
}

func (r *report) collect(ctx context.Context, path string) {
	r.add("version.txt", []byte(versionString()+"\n"+kernelRelease()+"\n"))
	cfg := config.Default()
	if raw, err := os.ReadFile(path); err != nil {
		r.fail("read "+path, err)
	} else {
		// Secrets go however the file holds them (internal/redact); a
		// file that does not parse is redacted line by line, and says so.
		red, err := redact.Config(raw)
		if err != nil {
			r.fail(path, err)
		}
		r.add("config.yaml", red)
	}
	if c, err := configfile.Load(path); err != nil {
		r.add("check-config.txt", []byte(err.Error()+"\n"))
	} else {
		cfg = c
		r.add("check-config.txt", []byte("the file loads\n"))
	}
	if s, err := status.Query(cfg.Socket); err != nil {
		r.fail("status", err)
	} else if data, err := json.MarshalIndent(s, "", "  "); err == nil {
		r.add("status.json", data)
	}
	if c, err := status.QueryConnections(cfg.Socket, noPeer); err != nil {
		r.fail("connections", err)
	} else if data, err := json.MarshalIndent(c, "", "  "); err == nil {
		r.add("connections.json", data)
	}
	r.metrics(ctx, cfg)
	r.command(ctx, "tc.txt", "tc", "-s", "qdisc", "show")
	devs := slices.Clone(cfg.Interfaces)
	if ifbs, err := filepath.Glob("/sys/class/net/slifb*"); err == nil {
		for _, d := range ifbs {
			devs = append(devs, filepath.Base(d))
		}
	}
	for _, d := range devs {
		r.command(ctx, "tc.txt", "tc", "-s", "class", "show", "dev", d)
		r.command(ctx, "tc.txt", "tc", "filter", "show", "dev", d, "ingress")
		r.command(ctx, "tc.txt", "tc", "filter", "show", "dev", d, "egress")
	}
	r.command(ctx, "ip-link.txt", "ip", "-d", "link", "show")
	r.command(ctx, "bpftool.txt", "bpftool", "net", "show")
	r.command(ctx, "bpftool.txt", "bpftool", "prog", "show")
	r.command(ctx, "bpftool.txt", "bpftool", "link", "show")
	if entries, err := os.ReadDir(cfg.PinPath); err != nil {
		r.fail("list "+cfg.PinPath, err)
	} else {
		var b strings.Builder
		for _, e := range entries {
			fmt.Fprintln(&b, e.Name())
		}
		r.add("pins.txt", []byte(b.String()))
	}
	r.command(ctx, "journal.txt", "journalctl", "-u", "sluice", "-n", "2000", "--no-pager", "-o", "short-iso")
}

// noPeer asks the agent for every connection.
var noPeer netip.Addr

// metrics scrapes the agent's own endpoint, as Prometheus would.
func (r *report) metrics(ctx context.Context, cfg config.Config) {
	if cfg.Metrics.WebConfigFile != "" {
		r.fail("metrics", errors.New("metrics.web_config_file is set: not scraped (TLS and credentials are Prometheus'); status.json has the same figures"))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+cfg.MetricsAddress+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.fail("metrics", err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		r.fail("metrics", err)
	}
	r.add("metrics.txt", data)
}

func (r *report) write(path string) error {
	if len(r.errors) > 0 {
		r.add("errors.txt", []byte(strings.Join(r.errors, "\n")+"\n"))
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	now := time.Now()
	for _, name := range r.order {
		data := r.files[name]
		if err := tw.WriteHeader(&tar.Header{Name: "sluice-bugreport/" + name, Mode: 0o600, Size: int64(len(data)), ModTime: now}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	// Only root and the one who ran it read it: it holds client-ids,
	// user names and addresses.
	return os.WriteFile(path, buf.Bytes(), 0o600)
}
