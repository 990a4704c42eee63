package attach

import (
	"errors"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/internal/netns"
)

// deleteFilter, the one deleter of sluice's filters, deletes a filter of
// sluice's and refuses what is at the slot when it is not sluice's: a
// filter under sluice's name running another program, including one put
// at the slot of a filter of sluice's that went (a stale handle).
func TestDeleteFilterDeletesOnlySluices(t *testing.T) {
	netns.RequireRoot(t, "attaches TC programs")
	pair := netns.NewPair(t)
	other := passProgram(t)
	sin, _ := sluicePrograms(t)
	idx, _ := pair.Broker.Index(pair.BrokerDev)
	filter := func(pref uint16, fd int) *netlink.BpfFilter {
		return &netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: netlink.HANDLE_MIN_INGRESS, Handle: netlink.MakeHandle(0, 1), Protocol: unix.ETH_P_ALL, Priority: pref},
			Fd:          fd, Name: ingressFilterName, DirectAction: true,
		}
	}
	do := func(fn func() error) {
		t.Helper()
		if err := pair.Broker.Do(fn); err != nil {
			t.Fatal(err)
		}
	}
	del := func(f *netlink.BpfFilter) (err error) {
		pair.Broker.Do(func() error { err = deleteFilter(mustLink(idx), f); return nil })
		return err
	}
	do(func() error { return netlink.QdiscAdd(clsactOf(idx)) })
	do(func() error { return netlink.FilterAdd(filter(3, other.FD())) })
	do(func() error { return netlink.FilterAdd(filter(4, sin.FD())) })

	if err := del(filter(3, 0)); !errors.Is(err, errForeignFilter) {
		t.Errorf("deleting another program's filter named %s: %v, want errForeignFilter", ingressFilterName, err)
	}
	if err := del(filter(4, 0)); err != nil {
		t.Errorf("deleting sluice's filter: %v", err)
	}
	state := tcState(t, pair.Broker, pair.BrokerDev)
	if !strings.Contains(state, "pref 3 bpf") || strings.Contains(state, "pref 4 bpf") {
		t.Fatalf("want pref 3 (another program's) kept and pref 4 (sluice's) gone:\n%s", state)
	}

	// sluice's slot taken since by another program's filter of that name.
	do(func() error { return netlink.FilterAdd(filter(4, other.FD())) })
	if err := del(filter(4, sin.FD())); !errors.Is(err, errForeignFilter) {
		t.Errorf("deleting through a stale handle: %v, want errForeignFilter", err)
	}
	if err := del(filter(5, 0)); err != nil {
		t.Errorf("an empty slot: %v, want nothing to do", err)
	}
	if state := tcState(t, pair.Broker, pair.BrokerDev); !strings.Contains(state, "pref 4 bpf") {
		t.Errorf("the filter now at sluice's old slot was deleted:\n%s", state)
	}
}
