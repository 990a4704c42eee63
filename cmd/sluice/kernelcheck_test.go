package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/daemon"
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
	if problems, info := kernelChecks(spec, config.AttachAuto, all); len(problems) > 0 || !strings.Contains(info, "lpmtrie") || !strings.Contains(info, "TCX links") {
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
	problems, info := kernelChecks(spec, config.AttachAuto, old)
	if len(problems) != 1 || !strings.Contains(problems[0], "the LPMTrie map type is not supported by this kernel (5.15.0-91-generic)") {
		t.Errorf("a kernel without LPM tries: problems %q", problems)
	}
	if !strings.Contains(info, "a clsact qdisc") {
		t.Errorf("before 6.6 the programs attach with clsact: %q", info)
	}
	noTC := all
	noTC.programType = func(ebpf.ProgramType) error { return ebpf.ErrNotSupported }
	if problems, _ := kernelChecks(spec, config.AttachAuto, noTC); len(problems) != 1 || !strings.Contains(problems[0], "sched_cls") {
		t.Errorf("a kernel without tc programs: %q", problems)
	}
	// attach: tcx on a kernel without TCX is a problem named by its key;
	// attach: clsact is said as chosen on any kernel.
	if problems, _ := kernelChecks(spec, config.AttachTCX, old); len(problems) != 2 || !strings.Contains(problems[1], "attach: tcx needs TCX links") {
		t.Errorf("attach: tcx before 6.6: problems %q", problems)
	}
	if problems, info := kernelChecks(spec, config.AttachClsact, all); len(problems) > 0 || !strings.Contains(info, "clsact filters (attach: clsact)") {
		t.Errorf("attach: clsact on 6.18: problems %q, info %q", problems, info)
	}
	if problems, info := kernelChecks(spec, config.AttachTCX, all); len(problems) > 0 || !strings.Contains(info, "TCX links") {
		t.Errorf("attach: tcx on 6.18: problems %q, info %q", problems, info)
	}
}
