package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/internal/hoststate"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

// brokerWithBPFFS builds a namespace pair for a test and mounts a bpffs
// of its own for the agent's pins (unmounted at cleanup, after whatever
// the test registers later, such as stopping an agent that holds pins). It
// returns the pair, the broker device's index and the bpffs.
func brokerWithBPFFS(t *testing.T) (*netns.Pair, int, string) {
	t.Helper()
	pair := netns.NewPair(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	fs := t.TempDir()
	if err := maps.MountBPFFS(fs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(fs, 0) })
	return pair, idx, fs
}

// tcTrace is what tc and ip show of the broker side of a pair: qdiscs,
// both hooks' filters and the devices (an IFB left behind shows here).
func tcTrace(pair *netns.Pair) string {
	var b strings.Builder
	for _, args := range [][]string{{"tc", "-j", "qdisc", "show"}, {"tc", "-j", "filter", "show", "dev", pair.BrokerDev, "ingress"},
		{"tc", "-j", "filter", "show", "dev", pair.BrokerDev, "egress"}, {"ip", "-o", "link", "show"}} {
		out, _ := exec.Command("ip", append([]string{"netns", "exec", pair.Broker.Name}, args...)...).CombinedOutput()
		b.Write(out)
	}
	return b.String()
}

// hostTrace is every trace an agent could leave on the broker side of a
// pair: tcTrace, the TCX programs on device idx, each path under the
// bpffs at pins (recursive: pins inside sluice's directory count), and
// whether the host record exists. Two equal traces mean nothing was left.
func hostTrace(pair *netns.Pair, idx int, pins string) string {
	var b strings.Builder
	b.WriteString(tcTrace(pair))
	pair.Broker.Do(func() error {
		for _, a := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
			if r, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: a}); err == nil {
				fmt.Fprintf(&b, "tcx %v: %d programs\n", a, len(r.Programs))
			}
		}
		return nil
	})
	filepath.WalkDir(pins, func(p string, _ os.DirEntry, _ error) error {
		fmt.Fprintf(&b, "bpffs %s\n", p)
		return nil
	})
	if _, err := os.Stat(filepath.Join(hoststate.Dir(), hoststate.FileName)); err == nil {
		b.WriteString("host record\n")
	}
	return b.String()
}
