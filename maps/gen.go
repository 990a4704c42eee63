package maps

// The data path's C lives in bpf/; bpf2go compiles it into sluice_bpfel.o
// and generates the Go bindings (sluice_bpfel.go); both are committed, so a
// clone builds with Go alone. `make generate` runs this; `make
// check-generated` fails when either is not what bpf/ compiles to. The
// arch headers the kernel's uapi headers include (<asm/types.h>...) come
// from bpf/include/arch, written for the BPF target, not from the build
// host's /usr/include/<triplet>: the object is the same built on amd64 or
// arm64.
//
//go:generate go tool bpf2go -cc ${BPF_CLANG} -cflags ${BPF_CFLAGS} -target bpfel -type conn_key -type conn_key4 -type conn_entities -type track -type conn_state -type bind_request -type bind_args -type entity_counters -type datapath_settings -type sample -type sample_ring -type exempt_key -type entity_name -type conn_identity -type entity_rate -type latency_event -type stat sluice ../bpf/tc.c -- -I../bpf/include/arch
