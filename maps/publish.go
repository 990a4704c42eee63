package maps

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// How a sample is published to the agent (bpf/kafka.h, emit), and a
// latency measurement (bpf/latency.h, emit_latency): the data path writes
// the slot, then moves its ring's head (bpf/helpers.h, publish_head), and
// the agent that reads the new head must find the slot written. The C says
// so with an atomic exchange, a full barrier: correct everywhere, and dear,
// because the CPU then waits until every cache line of the slot is its
// own, one memory or cross-CPU round trip per slot. A store-release orders
// just what the agent needs (the slot before the head) and is a plain store
// on x86, an stlr on arm64. Kernels from 6.15 take it (BPF_STORE_REL);
// clang 19 cannot write it, so the loader turns the exchange into one where
// the kernel has it.
const (
	PublishStoreRelease = "store-release"
	PublishExchange     = "exchange"
)

var (
	xchgDW         = asm.Xchg.OpCode(asm.DWord)
	storeReleaseDW = asm.StoreRelease(asm.R0, asm.R0, asm.DWord, 0).OpCode
)

// bpfStoreRel is BPF_STORE_REL, the immediate of a store-release. The
// library (cilium/ebpf v0.22) encodes an atomic instruction's immediate
// from its Constant, not from the operation in its OpCode, so both must
// say store-release.
const bpfStoreRel = 0x110

// storeRelease is a 64-bit store-release of src to dst+off.
func storeRelease(dst, src asm.Register, off int16) asm.Instruction {
	ins := asm.StoreRelease(dst, src, asm.DWord, off)
	ins.Constant = bpfStoreRel
	return ins
}

// publishingPrograms are the programs that publish to a ring, and what:
// request tracking follows the client's stream, which only ingress sees;
// response tracking the broker's, on egress.
var publishingPrograms = map[string]string{
	"sluice_ingress": "samples",
	"sluice_egress":  "latency measurements",
}

// useStoreRelease turns the publications' exchanges in the publishing
// programs (one for each call of emit or emit_latency that clang inlined)
// into store-releases. Every 64-bit exchange in the data path is such a
// publication (TestOnlyPublicationExchanges): its result is unused, so the
// register the exchange would have loaded with the old head is never read,
// and a store that leaves it be is the same program.
func useStoreRelease(spec *ebpf.CollectionSpec) error {
	for name, prog := range spec.Programs {
		n := 0
		for i := range prog.Instructions {
			if prog.Instructions[i].OpCode == xchgDW {
				if publishingPrograms[name] == "" {
					return fmt.Errorf("%s: an atomic exchange outside a ring publication", name)
				}
				ins := &prog.Instructions[i]
				*ins = storeRelease(ins.Dst, ins.Src, ins.Offset).WithMetadata(ins.Metadata)
				n++
			}
		}
		if what := publishingPrograms[name]; what != "" && n == 0 {
			return fmt.Errorf("%s: no publication of %s (atomic exchange) found", name, what)
		}
	}
	return nil
}

// publication is how a data path loaded with opts publishes samples.
func publication(opts Options) string {
	if opts.noStoreRelease || !storeReleaseSupported() {
		return PublishExchange
	}
	return PublishStoreRelease
}

// storeReleaseSupported probes the kernel once for BPF_STORE_REL.
var storeReleaseSupported = sync.OnceValue(func() bool {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.SchedCLS,
		License: "MIT",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R2, 0),
			asm.StoreMem(asm.RFP, -8, asm.R2, asm.DWord),
			storeRelease(asm.RFP, asm.R2, -8),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		return false
	}
	prog.Close()
	return true
})
