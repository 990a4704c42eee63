package maps

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/sluice-dev/sluice/internal/netns"
	"golang.org/x/sys/unix"
)

// TestStoreReleaseProbeMatchesKernel: the probe finds BPF_STORE_REL
// exactly on kernels that have it (6.15 and later).
func TestStoreReleaseProbeMatchesKernel(t *testing.T) {
	netns.RequireRoot(t, "loads BPF programs")
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", u.Release, err)
	}
	want := major > 6 || major == 6 && minor >= 15
	if got := storeReleaseSupported(); got != want {
		t.Fatalf("kernel %d.%d: store-release supported = %v, want %v", major, minor, got, want)
	}
}

// TestSamplePublication: the loaded programs publish (samples on ingress,
// latency measurements on egress) with a store-release where the kernel
// has one, with an exchange otherwise, and either way the agent reads every
// sample whole, also when a request's fragments come from two CPUs, and
// every measurement.
func TestSamplePublication(t *testing.T) {
	netns.RequireRoot(t, "loads BPF programs")
	if !storeReleaseSupported() {
		t.Fatal("this kernel has no BPF store-release: the test machines run 6.15 or later")
	}
	for _, c := range []struct {
		want           string
		noStoreRelease bool
	}{{PublishStoreRelease, false}, {PublishExchange, true}} {
		t.Run(c.want, func(t *testing.T) {
			opts := testOptions()
			opts.noStoreRelease = c.noStoreRelease
			h := newHarness(t, opts)
			if got := h.d.SamplePublication(); got != c.want {
				t.Fatalf("SamplePublication() = %q, want %q", got, c.want)
			}
			for name, prog := range map[string]*ebpf.Program{"ingress": h.d.IngressProgram(), "egress": h.d.EgressProgram()} {
				info, err := prog.Info()
				if err != nil {
					t.Fatal(err)
				}
				insns, err := info.Instructions()
				if err != nil {
					t.Fatal(err)
				}
				exchanges, releases := 0, 0
				for _, ins := range insns {
					switch ins.OpCode {
					case xchgDW:
						exchanges++
					case storeReleaseDW:
						releases++
					}
				}
				if c.want == PublishStoreRelease && (exchanges != 0 || releases == 0) ||
					c.want == PublishExchange && (releases != 0 || exchanges == 0) {
					t.Fatalf("%s: the verified %s program has %d exchanges and %d store-releases", c.want, name, exchanges, releases)
				}
			}
			stitchAcrossCPUs(t, h)
			measureOnEachCPU(t, h)
		})
	}
}

// TestUseStoreReleaseRewritesOnlyThePublication: the rewrite keeps the
// exchange's operands, and refuses a spec where an exchange could be
// something else (another program) or the publication is missing.
func TestUseStoreReleaseRewritesOnlyThePublication(t *testing.T) {
	xchg := asm.Xchg.Mem(asm.R3, asm.R4, asm.DWord, 8)
	prog := func(insns ...asm.Instruction) *ebpf.ProgramSpec {
		return &ebpf.ProgramSpec{Instructions: append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())}
	}
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
		"sluice_ingress":       prog(asm.Mov.Imm(asm.R4, 1), xchg),
		"sluice_egress":        prog(asm.Mov.Imm(asm.R4, 2), xchg),
		"sluice_egress_select": prog(),
	}}
	if err := useStoreRelease(spec); err != nil {
		t.Fatal(err)
	}
	for name := range publishingPrograms {
		got := spec.Programs[name].Instructions[1]
		var raw bytes.Buffer
		if _, err := got.Marshal(&raw, binary.LittleEndian); err != nil {
			t.Fatal(err)
		}
		// What the kernel reads: BPF_STX|BPF_ATOMIC|BPF_DW, src r4, dst r3,
		// offset 8, imm BPF_STORE_REL.
		if want := []byte{0xdb, 0x43, 8, 0, 0x10, 0x01, 0, 0}; !bytes.Equal(raw.Bytes(), want) {
			t.Fatalf("%s: rewritten to %v, encoded % x, want % x", name, got, raw.Bytes(), want)
		}
	}

	for name, spec := range map[string]*ebpf.CollectionSpec{
		"exchange in another program": {Programs: map[string]*ebpf.ProgramSpec{
			"sluice_ingress": prog(xchg), "sluice_egress": prog(xchg), "sluice_egress_select": prog(xchg)}},
		"no sample publication": {Programs: map[string]*ebpf.ProgramSpec{
			"sluice_ingress": prog(), "sluice_egress": prog(xchg)}},
		"no latency publication": {Programs: map[string]*ebpf.ProgramSpec{
			"sluice_ingress": prog(xchg), "sluice_egress": prog()}},
	} {
		if err := useStoreRelease(spec); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestOnlyPublicationExchanges: the rewrite takes every exchange in the
// data path for a ring publication whose result nobody reads. That holds
// while the C has one exchange, in publish_head, its result cast away.
func TestOnlyPublicationExchanges(t *testing.T) {
	files, err := filepath.Glob("../bpf/*.[ch]")
	if err != nil || len(files) == 0 {
		t.Fatalf("bpf sources: %v (%d files)", err, len(files))
	}
	exchange := regexp.MustCompile(`__sync_lock_test_and_set|__atomic_exchange|__sync_swap`)
	var found []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(src), "\n") {
			if exchange.MatchString(line) && !strings.HasPrefix(strings.TrimSpace(line), "//") {
				found = append(found, filepath.Base(f)+": "+strings.TrimSpace(line))
			}
		}
	}
	want := "helpers.h: (void)__sync_lock_test_and_set(&ring->head, head);"
	if len(found) != 1 || found[0] != want {
		t.Fatalf("exchanges in bpf/: %q, want only %q", found, want)
	}
}
