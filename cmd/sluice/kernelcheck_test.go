package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/daemon"
	"github.com/sluice-dev/sluice/maps"
)

// check-config names each kernel feature the data path needs that the
// kernel lacks, and says how the programs will attach.
func TestKernelChecksNameWhatIsMissing(t *testing.T) {
	spec, err := maps.Spec(daemon.DataPathOptions(config.Default()))
	if err != nil {
		t.Fatal(err)
	}
	ok := func(ebpf.MapType) error { return nil }
	all := kernelProbes{programType: func(ebpf.ProgramType) error { return nil }, mapType: ok, release: func() string { return "6.18.44" }}
	if problems, info := kernelChecks(spec, all); len(problems) > 0 || !strings.Contains(info, "lpmtrie") || !strings.Contains(info, "TCX links") {
		t.Errorf("a kernel with everything: problems %q, info %q", problems, info)
	}
	old := all
	old.release = func() string { return "5.15.0-91-generic" }
	old.mapType = func(m ebpf.MapType) error {
		if m == ebpf.LPMTrie {
			return fmt.Errorf("probe: %w", ebpf.ErrNotSupported)
		}
		return nil
	}
	problems, info := kernelChecks(spec, old)
	if len(problems) != 1 || !strings.Contains(problems[0], "the LPMTrie map type is not supported by this kernel (5.15.0-91-generic)") {
		t.Errorf("a kernel without LPM tries: problems %q", problems)
	}
	if !strings.Contains(info, "a clsact qdisc") {
		t.Errorf("before 6.6 the programs attach with clsact: %q", info)
	}
	noTC := all
	noTC.programType = func(ebpf.ProgramType) error { return ebpf.ErrNotSupported }
	if problems, _ := kernelChecks(spec, noTC); len(problems) != 1 || !strings.Contains(problems[0], "sched_cls") {
		t.Errorf("a kernel without tc programs: %q", problems)
	}
}
