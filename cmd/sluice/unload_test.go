package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/internal/hoststate"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

// `sluice unload` without the privileges it needs refuses, exit status 1,
// before it reads or removes anything: never a "removed" line that did
// not happen. As root the test drops every capability (setpriv) from a
// copy of itself run as sluice; as another user it runs the command as is.
func TestUnloadRefusesWithoutPrivileges(t *testing.T) {
	if os.Geteuid() != 0 {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"unload", "--pin-path", "/sys/fs/bpf/sluice"}, &stdout, &stderr)
		if !errors.Is(err, errUnloadPrivileges) || exitStatus(err) != 1 || strings.Contains(stdout.String(), "removed") {
			t.Errorf("unload as uid %d: %v (exit %d), printed %q", os.Geteuid(), err, exitStatus(err), stdout.String())
		}
		return
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("this test drops capabilities with setpriv (util-linux): %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Something unload would remove if it went ahead.
	fs := t.TempDir()
	if err := maps.MountBPFFS(fs); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(fs, 0)
	pins := filepath.Join(fs, "sluice")
	os.Mkdir(pins, 0o700)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Pin(filepath.Join(pins, "settings")); err != nil {
		t.Fatal(err)
	}
	for _, output := range []string{"text", "json"} {
		cmd := exec.Command(setpriv, "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", self, "unload", "--pin-path", pins, "-o", output)
		cmd.Env = append(os.Environ(), asMainEnv+"=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("-o %s: unload without capabilities: %v, want exit status 1", output, err)
		}
		if !strings.Contains(stderr.String(), "unload needs root") || strings.Contains(stdout.String(), "removed") {
			t.Errorf("-o %s: stdout %q stderr %q, want the refusal and nothing removed", output, stdout.String(), stderr.String())
		}
		if _, err := os.Stat(filepath.Join(pins, "settings")); err != nil {
			t.Errorf("-o %s: the refused unload removed a pin: %v", output, err)
		}
	}
}

// The packages' prerm and preun run `sluice unload` whatever state the
// configuration is in. An agent ran, attached (TCX, or clsact filters that
// leave no link pins), shaped with htb and an IFB, and stopped leaving all
// of it for the next agent; then its file was deleted, or broken after
// pointing pin_path at a directory of its own. unload finds everything in
// the host record and leaves the namespace, its bpffs and the record as
// they were before the agent started.
func TestUnloadWithoutTheConfiguration(t *testing.T) {
	netns.RequireRoot(t, "runs the agent in a namespace, loads BPF programs, mounts a bpffs")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(hoststate.DirEnv, t.TempDir()) // the agent's and unload's, inherited
	pair, idx, fs := brokerWithBPFFS(t)
	dir := t.TempDir()

	dump := func() string { return hostTrace(pair, idx, fs) }
	command := func(args ...string) *exec.Cmd {
		cmd := exec.Command("ip", append([]string{"netns", "exec", pair.Broker.Name, self}, args...)...)
		cmd.Env = append(os.Environ(), asMainEnv+"=1")
		return cmd
	}
	for _, c := range []struct {
		name, attach, pinDir string
		// spoil leaves the file as the operator did before removing the package.
		spoil func(path string)
		want  string
	}{
		{name: "the file as it is, clsact on a device without a queue", attach: "clsact", pinDir: "custom-pins", want: `"bpf_name":"sluice_ingress"`, spoil: func(string) {}},
		{name: "the file deleted", attach: "auto", pinDir: "sluice", spoil: func(p string) { os.Remove(p) }, want: "TCXIngress: 1 programs"},
		{name: "the file broken, pin_path custom, clsact", attach: "clsact", pinDir: "custom-pins", want: `"bpf_name":"sluice_ingress"`,
			spoil: func(p string) { os.WriteFile(p, []byte("interfaces: [unclosed\nproduce: {\n"), 0o600) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := dump()
			cfg := filepath.Join(dir, c.name+".yaml")
			os.WriteFile(cfg, []byte(fmt.Sprintf("interfaces: [%s]\nlisteners: [9092]\nexempt_peers: [10.0.0.0/24]\nmode: enforce\nproduce: {capacity: 100MiB}\nfetch: {capacity: 100MiB}\n"+
				"bootstrap: [%s:9092]\nattach: %s\nmetrics_address: 127.0.0.1:0\nsocket: %s\npin_path: %s\n",
				pair.BrokerDev, pair.BrokerIP, c.attach, filepath.Join(dir, "sluice.sock"), filepath.Join(fs, c.pinDir))), 0o600)
			ready := filepath.Join(dir, "ready")
			os.Remove(ready)
			agent := command("run", "--config", cfg, "--ready-file", ready)
			var agentLog bytes.Buffer
			agent.Stderr = &agentLog
			if err := agent.Start(); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 150 && !fileExists(ready); i++ {
				time.Sleep(100 * time.Millisecond)
			}
			agent.Process.Signal(syscall.SIGTERM)
			if err := agent.Wait(); err != nil || !fileExists(ready) {
				t.Fatalf("the agent: %v\n%s", err, agentLog.String())
			}
			left := dump()
			for _, want := range []string{`"kind":"htb"`, "slifb", c.want, "host record", filepath.Join(fs, c.pinDir, "settings")} {
				if !strings.Contains(left, want) {
					t.Fatalf("the agent left no %q for unload to find (keep_attached_on_exit):\n%s\n%s", want, left, agentLog.String())
				}
			}
			c.spoil(cfg)
			unload := command("unload", "--config", cfg)
			out, err := unload.CombinedOutput()
			if err != nil {
				t.Fatalf("unload: %v\n%s", err, out)
			}
			if after := dump(); after != before {
				t.Errorf("unload left the namespace changed.\nunload said:\n%s\nbefore:\n%s\nafter:\n%s", out, before, after)
			}
		})
	}
}
