package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/agent/shaper"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

// check-config, as root on the host, predicts what `sluice run` would
// refuse to start with: an interface that does not exist, a root qdisc htb
// would not replace, a pin_path that is not sluice's to use. A file that
// fits the host passes.
func TestCheckConfigPredictsHostRefusals(t *testing.T) {
	netns.RequireRoot(t, "builds a namespace and reads its devices")
	pair := netns.NewPair(t)
	if out, err := exec.Command("ip", "netns", "exec", pair.Broker.Name, "tc", "qdisc", "add", "dev", pair.BrokerDev, "root", "handle", "7:", "tbf",
		"rate", "1gbit", "burst", "64kb", "latency", "50ms").CombinedOutput(); err != nil {
		t.Fatalf("add tbf: %v %s", err, out)
	}
	busy := t.TempDir() // not a bpffs, and holds something
	os.WriteFile(filepath.Join(busy, "data"), []byte("x"), 0o600)
	fs := t.TempDir()
	if err := maps.MountBPFFS(fs); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(fs, 0)
	write := func(name, body string) string {
		p := filepath.Join(t.TempDir(), name)
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	base := "listeners: [9092]\nexempt_peers: [10.0.0.0/24]\nmode: enforce\nproduce: {capacity: 100MiB}\nfetch: {capacity: 100MiB}\n"
	bad := write("bad.yaml", base+"interfaces: [absent0, "+pair.BrokerDev+"]\npin_path: "+filepath.Join(busy, "sluice")+"\n")
	var stdout, stderr bytes.Buffer
	err := pair.Broker.Do(func() error {
		return run(context.Background(), []string{"check-config", "--config", bad}, &stdout, &stderr)
	})
	var ue usageError
	if !errors.As(err, &ue) {
		t.Errorf("a file that does not fit the host: %v, want a usage error", err)
	}
	for _, want := range []string{"interfaces: absent0: no such interface", "interfaces: " + pair.BrokerDev + ": device has a root qdisc sluice did not create",
		"pin_path: pin_path refused: " + busy + " is not a bpffs and not empty"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}

	// With replace_root_qdisc the tbf is no refusal, only a warning that
	// names what will be deleted.
	optIn := write("opt-in.yaml", base+"interfaces: ["+pair.BrokerDev+"]\nreplace_root_qdisc: true\npin_path: "+filepath.Join(fs, "sluice")+"\n")
	stdout.Reset()
	stderr.Reset()
	if err := pair.Broker.Do(func() error {
		return run(context.Background(), []string{"check-config", "--config", optIn}, &stdout, &stderr)
	}); err != nil || !strings.Contains(stdout.String()+stderr.String(), "replace_root_qdisc: sluice will delete this root") {
		t.Errorf("replace_root_qdisc: true over the tbf: %v\n%s%s", err, stdout.String(), stderr.String())
	}

	exec.Command("ip", "netns", "exec", pair.Broker.Name, "tc", "qdisc", "del", "dev", pair.BrokerDev, "root").Run()
	good := write("good.yaml", base+"interfaces: ["+pair.BrokerDev+"]\npin_path: "+filepath.Join(fs, "sluice")+"\n")
	stdout.Reset()
	stderr.Reset()
	if err := pair.Broker.Do(func() error {
		return run(context.Background(), []string{"check-config", "--config", good}, &stdout, &stderr)
	}); err != nil {
		t.Errorf("a file that fits the host: %v\n%s%s", err, stdout.String(), stderr.String())
	}
}

// `sluice unload` needs no valid configuration: with a broken file it
// removes what an agent left attached (pinned links and maps, the htb
// trees and the IFB device), found from the pins and the kernel, and the
// namespace's devices and qdiscs are as they were before the agent.
func TestUnloadWithABrokenConfigLeavesTheHostAsItWas(t *testing.T) {
	netns.RequireRoot(t, "loads BPF programs, builds a namespace, qdiscs and IFB devices")
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	pair, idx, fs := brokerWithBPFFS(t)
	dump := func() string { return tcTrace(pair) }
	before := dump()

	// An agent that left everything attached (keep_attached_on_exit).
	opts := maps.DefaultOptions()
	opts.MaxEntities, opts.MaxConnections, opts.PinDir = 64, 4096, filepath.Join(fs, "sluice")
	d, err := maps.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	err = pair.Broker.Do(func() error {
		a, err := attach.Attach(idx, d.IngressProgram(), d.EgressProgram(), attach.Auto)
		if err != nil {
			return err
		}
		if err := a.Pin(opts.PinDir); err != nil {
			return err
		}
		a.Release()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shaper.NewHTB(idx, d, 200*time.Millisecond, pair.Broker.Do); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if during := dump(); during == before || !strings.Contains(during, shaper.IFBName(idx)) {
		t.Fatalf("the agent left nothing to unload:\n%s", during)
	}

	broken := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(broken, []byte("interfaces: [\nsasl: {password_file: $CREDENTIALS_DIRECTORY/sasl-password}\n"), 0o600)
	var stdout, stderr bytes.Buffer
	if err := pair.Broker.Do(func() error {
		return run(context.Background(), []string{"unload", "--config", broken, "--pin-path", opts.PinDir}, &stdout, &stderr)
	}); err != nil {
		t.Fatalf("unload: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	t.Logf("unload said:\n%s%s", stdout.String(), stderr.String())
	if after := dump(); after != before {
		t.Errorf("after unload the namespace differs.\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if _, err := os.Stat(opts.PinDir); !os.IsNotExist(err) {
		t.Errorf("pins left: %v", err)
	}
	if !strings.Contains(stdout.String(), "interface "+pair.BrokerDev+":") {
		t.Errorf("unload did not report the interface it cleaned:\n%s", stdout.String())
	}
}
