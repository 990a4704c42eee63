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

	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/maps"
	"github.com/sluice-dev/sluice/test/netns"
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
