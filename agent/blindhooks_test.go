package agent

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-dev/sluice/agent/status"
)

type fakeHooks struct {
	v   status.HooksView
	err error
}

func (f *fakeHooks) Inspect() (status.HooksView, error) { return f.v, f.err }

// #48 item 5: each cycle's reading of the hooks reaches status and the
// sluice_blind_hooks metric; the log says once when sluice goes blind and
// once when it no longer is; a failed reading is counted and keeps the
// last good one.
func TestBlindHooksReachStatusMetricsAndLog(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	cni := status.AheadView{Kind: "tcx", Name: "cil_from_netdev", ProgramID: 7, EndsChain: true, Verdict: "returns verdicts other than TC_ACT_UNSPEC"}
	blind := status.HooksView{Position: "last", Blind: 1, Hooks: []status.HookView{
		{Interface: "eth0", Hook: "ingress", Blind: true, Ahead: []status.AheadView{cni}},
		{Interface: "eth0", Hook: "egress", Ahead: []status.AheadView{{Kind: "filter", Name: "op", Pref: 49152, Verdict: "returns only TC_ACT_UNSPEC"}}},
	}}
	f := &fakeHooks{v: blind}
	var b blindHooks
	snap := &status.Snapshot{}
	c := blindHooksFrom(func() *status.Snapshot { return snap })
	if b.view() != nil {
		t.Error("a view before any reading")
	}
	for range 3 {
		b.check(f, log)
	}
	snap.Hooks = b.view()
	if snap.Hooks == nil || snap.Hooks.Blind != 1 || !snap.Hooks.Hooks[0].Blind || snap.Hooks.Hooks[0].Ahead[0].Name != "cil_from_netdev" {
		t.Fatalf("status: %+v", snap.Hooks)
	}
	want := `
# HELP sluice_blind_hooks 1 for a hook (an interface's ingress or egress) where a program or filter of another tool runs ahead of sluice's and its verdict can end the chain (or sluice's program is gone from it): what it ends, sluice never counts, learns or shapes. 0 otherwise.
# TYPE sluice_blind_hooks gauge
sluice_blind_hooks{hook="egress",interface="eth0"} 0
sluice_blind_hooks{hook="ingress",interface="eth0"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "sluice_blind_hooks"); err != nil {
		t.Error(err)
	}
	if n := strings.Count(logged.String(), `level=WARN msg="blind:`); n != 1 {
		t.Errorf("blind logged %d times over 3 cycles, want once:\n%s", n, logged.String())
	}
	// A failed reading: counted, the last good one kept.
	f.err = errors.New("netlink: boom")
	b.check(f, log)
	snap.Hooks = b.view()
	if snap.Hooks.CheckFailures != 1 || snap.Hooks.LastError == "" || snap.Hooks.Blind != 1 {
		t.Errorf("after a failed reading: %+v", snap.Hooks)
	}
	if got := testutil.ToFloat64(prometheus.Collector(filtered{c, "sluice_blind_hook_check_failures_total"})); got != 1 {
		t.Errorf("check failures metric %v", got)
	}
	// The CNI goes (or sluice moves first): no longer blind, said once.
	f.err, f.v = nil, status.HooksView{Position: "last", Hooks: []status.HookView{{Interface: "eth0", Hook: "ingress"}, {Interface: "eth0", Hook: "egress"}}}
	b.check(f, log)
	b.check(f, log)
	snap.Hooks = b.view()
	if snap.Hooks.Blind != 0 || snap.Hooks.LastError != "" || strings.Count(logged.String(), "no program or filter ahead") != 1 {
		t.Errorf("after the CNI went: %+v\n%s", snap.Hooks, logged.String())
	}
	// No inspector (an agent without attachments): nothing read, nothing shown.
	var none blindHooks
	none.check(nil, log)
	if none.view() != nil {
		t.Error("a view without an inspector")
	}
}

// filtered is a collector's one metric family.
type filtered struct {
	prometheus.Collector
	name string
}

func (f filtered) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() { f.Collector.Collect(all); close(all) }()
	for m := range all {
		if strings.Contains(m.Desc().String(), `"`+f.name+`"`) {
			ch <- m
		}
	}
}
