package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/config"
)

// kernelProbes are the feature probes kernelChecks asks; tests replace them.
type kernelProbes struct {
	programType func(ebpf.ProgramType) error
	mapType     func(ebpf.MapType) error
	release     func() string
}

var hostKernel = kernelProbes{programType: features.HaveProgramType, mapType: features.HaveMapType, release: kernelRelease}

// kernelChecks names what the data path needs of the kernel and whether
// this one has it: the tc program type and every map type the programs use
// (a missing one is a problem `sluice run` would fail on, named by its
// feature, where the verifier's error would not say it), and how the
// programs will attach (TCX from Linux 6.6, else a clsact qdisc).
func kernelChecks(spec *ebpf.CollectionSpec, attachKey string, k kernelProbes) (problems []string, info string) {
	var have []string
	missing := func(what string, err error) {
		if errors.Is(err, ebpf.ErrNotSupported) {
			problems = append(problems, fmt.Sprintf("kernel: %s is not supported by this kernel (%s); sluice needs it", what, k.release()))
		} else {
			problems = append(problems, fmt.Sprintf("kernel: cannot tell whether %s is supported: %v", what, err))
		}
	}
	if err := k.programType(ebpf.SchedCLS); err != nil {
		missing("the tc (sched_cls) program type", err)
	} else {
		have = append(have, "sched_cls programs")
	}
	var types []ebpf.MapType
	for _, m := range spec.Maps {
		if !slices.Contains(types, m.Type) {
			types = append(types, m.Type)
		}
	}
	slices.Sort(types)
	for _, t := range types {
		if err := k.mapType(t); err != nil {
			missing(fmt.Sprintf("the %s map type", t), err)
		} else {
			have = append(have, strings.ToLower(t.String()))
		}
	}
	major, minor, known := parseRelease(k.release())
	hasTCX := known && (major > 6 || major == 6 && minor >= 6)
	attach := "a clsact qdisc (no TCX before Linux 6.6)"
	switch {
	case attachKey == config.AttachClsact:
		attach = "clsact filters (attach: clsact)"
	case attachKey == config.AttachTCX && !hasTCX:
		problems = append(problems, fmt.Sprintf("attach: tcx needs TCX links (Linux 6.6 and later); this kernel is %s: use auto or clsact", k.release()))
	case hasTCX:
		attach = "TCX links"
	}
	return problems, fmt.Sprintf("kernel %s: %s; programs attach with %s", k.release(), strings.Join(have, ", "), attach)
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// parseRelease reads "6.18.0-foo" as 6, 18.
func parseRelease(r string) (major, minor int, ok bool) {
	parts := strings.SplitN(r, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major, minor, err1 == nil && err2 == nil
}
