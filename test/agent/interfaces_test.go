package agent_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/test/harness"
)

// An interface dropped from the configuration across a restart is
// detached at start: the new agent removes the links, trees, steering
// filters and IFB devices the previous one left on it, and the interface's
// qdiscs and filters are again what they were before sluice; the interface
// still configured stays governed.
func TestAgentIntegrationDroppedInterfaceIsDetachedAtStart(t *testing.T) {
	// TCX (links pinned), and clsact filters (attach: clsact: no pins, the
	// filters are known by their names and programs).
	for _, attachKey := range []string{"auto", "clsact"} {
		t.Run(attachKey, func(t *testing.T) { droppedInterface(t, attachKey) })
	}
}

func droppedInterface(t *testing.T, attachKey string) {
	w := newWorld(t)
	ns := w.Pair.Broker.Name
	if out, err := exec.Command("ip", "netns", "exec", ns, "ip", "link", "add", "sdrop0", "type", "veth", "peer", "name", "sdrop1").CombinedOutput(); err != nil {
		t.Fatalf("add veth: %v %s", err, out)
	}
	exec.Command("ip", "netns", "exec", ns, "ip", "link", "set", "sdrop0", "up").Run()
	dump := func(dev string) string {
		var out []byte
		for _, args := range [][]string{{"tc", "-j", "qdisc", "show", "dev", dev}, {"tc", "-j", "filter", "show", "dev", dev, "ingress"},
			{"tc", "-j", "filter", "show", "dev", dev, "egress"}} {
			o, _ := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
			out = append(out, o...)
		}
		// The device itself, and any IFB made for it (named by its index).
		links, _ := exec.Command("ip", "netns", "exec", ns, "ip", "-o", "link").CombinedOutput()
		var index string
		for _, l := range strings.Split(string(links), "\n") {
			if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], dev+"@") {
				index = strings.TrimSuffix(f[0], ":")
				out = append(out, l...)
			}
		}
		for _, l := range strings.Split(string(links), "\n") {
			if f := strings.Fields(l); len(f) > 1 && index != "" {
				for _, ifb := range []string{"slifb", "slifbi", "slifbe"} {
					if f[1] == ifb+index+":" {
						out = append(out, l...)
					}
				}
			}
		}
		return string(out)
	}
	before := dump("sdrop0")

	both := config(w, true)
	data, _ := os.ReadFile(both)
	twoIfaces := strings.Replace(string(data), "interfaces: ["+w.Pair.BrokerDev+"]", "interfaces: ["+w.Pair.BrokerDev+", sdrop0]", 1) + "attach: " + attachKey + "\n"
	if twoIfaces == string(data) {
		t.Fatal("could not add the second interface to the configuration")
	}
	os.WriteFile(both, []byte(twoIfaces), 0o600)
	first := start(t, w, both)
	if during := dump("sdrop0"); during == before {
		t.Fatalf("the first agent did not attach to sdrop0:\n%s", during)
	}
	if err := first.Stop(); err != nil { // keep_attached_on_exit: everything stays
		t.Fatal(err)
	}
	if left := dump("sdrop0"); left == before {
		t.Fatal("nothing left on sdrop0 by a keep_attached exit: the test would prove nothing")
	}

	one := config(w, false) // sdrop0 dropped
	if data, err := os.ReadFile(one); err != nil {
		t.Fatal(err)
	} else {
		os.WriteFile(one, append(data, "attach: "+attachKey+"\n"...), 0o600)
	}
	second := start(t, w, one)
	if after := dump("sdrop0"); after != before {
		t.Errorf("sdrop0 after the restart without it differs from before sluice.\nbefore:\n%s\nafter:\n%s", before, after)
	}
	log, _ := os.ReadFile(second.Log)
	if !strings.Contains(string(log), `msg="detached an interface dropped from the configuration" interface=sdrop0`) {
		t.Errorf("the new agent did not say it detached sdrop0:\n%s", log)
	}
	if err := second.Stop(); err != nil {
		t.Fatal(err)
	}
	assertRestored(t, w)
}

// The clsact qdisc: sluice removes one it added (for its legacy filters,
// attach: clsact), recorded in its pins, once nothing is left under it,
// even when the agent that added it is gone and `sluice unload` runs; an
// operator's clsact, empty or not, stays. Judged by `tc -j qdisc`.
func TestAgentIntegrationClsactLeftAsFound(t *testing.T) {
	w := newWorld(t)
	ns := w.Pair.Broker.Name
	qdiscs := func() string {
		out, err := exec.Command("ip", "netns", "exec", ns, "tc", "-j", "qdisc", "show", "dev", w.Pair.BrokerDev).CombinedOutput()
		if err != nil {
			t.Fatalf("tc: %v %s", err, out)
		}
		return string(out)
	}
	cfg := w.WriteConfig("clsact", harness.Config{ProduceCapacity: "100MB", FetchCapacity: "100MB", KeepAttached: true, Extra: "attach: clsact\nshaper: police\n"})
	cycle := func(phase string) {
		t.Helper()
		a := start(t, w, cfg)
		if during := qdiscs(); !strings.Contains(during, `"kind":"clsact"`) {
			t.Fatalf("%s: no clsact under sluice's legacy filters: %s", phase, during)
		}
		if err := a.Stop(); err != nil { // keep_attached: the filters stay
			t.Fatal(err)
		}
		if out, err := exec.Command("ip", "netns", "exec", ns, w.Sluice, "unload", "--config", cfg).CombinedOutput(); err != nil {
			t.Fatalf("%s: sluice unload: %v\n%s", phase, err, out)
		} else {
			t.Logf("%s: sluice unload said:\n%s", phase, out)
		}
	}

	bare := qdiscs()
	cycle("bare device")
	if after := qdiscs(); after != bare {
		t.Errorf("the clsact sluice added stayed after unload.\nbefore: %s\nafter:  %s", bare, after)
	}

	if out, err := exec.Command("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", w.Pair.BrokerDev, "clsact").CombinedOutput(); err != nil {
		t.Fatalf("add the operator's clsact: %v %s", err, out)
	}
	operators := qdiscs()
	cycle("operator's empty clsact")
	if after := qdiscs(); after != operators {
		t.Errorf("the operator's clsact did not stay as it was.\nbefore: %s\nafter:  %s", operators, after)
	}
}

// The IFB devices sluice makes are in its pinned record: `sluice unload`
// finds and removes one by that record even when nothing on the device
// says it is sluice's any more (its alias overwritten, its tree gone), and
// the host is as it was before the agent. Judged by ip and tc.
func TestAgentIntegrationIFBFoundByRecord(t *testing.T) {
	w := newWorld(t)
	ns := w.Pair.Broker.Name
	state := func() string {
		// Standard output only: "Peer netns reference is invalid." on
		// standard error (another test's namespace going) is no link.
		links, _ := exec.Command("ip", "netns", "exec", ns, "ip", "-o", "link").Output()
		var names []string
		for _, l := range strings.Split(string(links), "\n") {
			if f := strings.Fields(l); len(f) > 1 {
				names = append(names, f[1])
			}
		}
		q, _ := exec.Command("ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", w.Pair.BrokerDev).CombinedOutput()
		return strings.Join(names, " ") + "\n" + string(q)
	}
	before := state()
	cfg := w.WriteConfig("ifb", harness.Config{ProduceCapacity: "100MB", FetchCapacity: "100MB", KeepAttached: true, Extra: "shaper: htb\n"})
	a := start(t, w, cfg)
	if err := a.Stop(); err != nil { // keep_attached: the trees and the IFB stay
		t.Fatal(err)
	}
	left := state()
	var ifb string
	for _, f := range strings.Fields(strings.SplitN(left, "\n", 2)[0]) {
		if strings.HasPrefix(f, "slifb") {
			ifb = strings.TrimSuffix(f, ":")
		}
	}
	if ifb == "" {
		t.Fatalf("no IFB left by a keep_attached exit: the test would prove nothing\n%s", left)
	}
	for _, args := range [][]string{{"ip", "link", "set", "dev", ifb, "alias", "renamed by another tool"}, {"tc", "qdisc", "del", "dev", ifb, "root"}} {
		if out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
	}
	out, err := exec.Command("ip", "netns", "exec", ns, w.Sluice, "unload", "--config", cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice unload: %v\n%s", err, out)
	}
	if after := state(); after != before {
		t.Errorf("after unload the host differs from before the agent.\nbefore:\n%s\nafter:\n%s\nunload said:\n%s", before, after, out)
	}
	// The record goes last, with the directory, once what it names is gone.
	if _, err := os.Stat(w.Pins); !os.IsNotExist(err) {
		t.Errorf("the pin directory (and its record) stayed after a clean unload: %v\n%s", err, out)
	}
}
