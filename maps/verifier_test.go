package maps

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/sluice-dev/sluice/internal/netns"
)

// The verifier's work on each program stays under a third of its limit of
// a million instructions. It is also the agent's start-up time: a first
// cut of the flow cache left the verifier's state on the request tracker's
// paths (a byte it cannot know, and state kept across them), tripled
// ingress to 743,000 instructions, made a start take seconds, and let a
// restarted agent's data path fail open (TestAgentIntegrationRestartUnderLoad).
func TestVerifierWorkStaysFarFromItsLimit(t *testing.T) {
	netns.RequireRoot(t, "loads BPF programs")
	spec, err := Spec(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	processed := regexp.MustCompile(`processed (\d+) insns`)
	for _, name := range []string{"sluice_ingress", "sluice_egress", "sluice_egress_select", "sluice_bind"} {
		coll, err := ebpf.NewCollectionWithOptions(
			&ebpf.CollectionSpec{Maps: spec.Maps, Variables: spec.Variables, Programs: map[string]*ebpf.ProgramSpec{name: spec.Programs[name]}},
			ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m := processed.FindStringSubmatch(coll.Programs[name].VerifierLog)
		coll.Close()
		if m == nil {
			t.Fatalf("%s: no instruction count in the verifier's log", name)
		}
		n, _ := strconv.Atoi(m[1])
		t.Logf("%s: the verifier processed %d instructions", name, n)
		if n > 333_000 {
			t.Errorf("%s: the verifier processed %d instructions, want at most a third of its 1,000,000", name, n)
		}
	}
}
