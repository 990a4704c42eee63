package shaper

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/netns"
)

// deleteRoot, the one deleter of the root qdiscs sluice adds, deletes
// sluice's own tree and refuses an operator's root, even an htb at
// sluice's handle 1:; over the kernel's default it has nothing to do.
func TestDeleteRootDeletesOnlySluices(t *testing.T) {
	netns.RequireRoot(t, "builds namespaces and qdiscs")
	pair := netns.NewPair(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	tc := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"netns", "exec", pair.Broker.Name, "tc"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("tc %v: %v %s", args, err, out)
		}
	}
	del := func() error {
		return pair.Broker.Do(func() error { return deleteRoot(mustLinkByIndex(t, idx)) })
	}
	before := tcState(t, pair.Broker, pair.BrokerDev)
	if err := del(); err != nil {
		t.Fatalf("deleteRoot over the kernel's default: %v", err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != before {
		t.Fatalf("deleteRoot changed the kernel's default.\nbefore: %s\nafter:  %s", before, after)
	}

	tc("qdisc", "add", "dev", pair.BrokerDev, "root", "handle", "1:", "htb", "default", "10")
	operators := tcState(t, pair.Broker, pair.BrokerDev)
	if err := del(); !errors.Is(err, ErrForeignRootQdisc) || !strings.Contains(err.Error(), "htb 1:") {
		t.Errorf("deleteRoot over an operator's htb 1:: %v, want ErrForeignRootQdisc naming it", err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != operators {
		t.Fatalf("the operator's root changed.\nbefore: %s\nafter:  %s", operators, after)
	}
	tc("qdisc", "del", "dev", pair.BrokerDev, "root")

	if err := pair.Broker.Do(func() error { _, err := newTree(mustLinkByIndex(t, idx)); return err }); err != nil {
		t.Fatal(err)
	}
	if during := tcState(t, pair.Broker, pair.BrokerDev); !strings.Contains(during, "htb 1: root") {
		t.Fatalf("sluice's tree is not at the root:\n%s", during)
	}
	if err := del(); err != nil {
		t.Fatalf("deleting sluice's own tree: %v", err)
	}
	if after := tcState(t, pair.Broker, pair.BrokerDev); after != before {
		t.Errorf("sluice's tree did not go.\nbefore: %s\nafter:  %s", before, after)
	}
}
