package maps

// The data path's C lives in bpf/; bpf2go compiles it into sluice_bpfel.o
// (a build output, not committed: every make target that compiles Go
// builds it first with clang-19) and generates the Go bindings
// (sluice_bpfel.go, committed). `make generate` runs this; `make
// check-generated` fails when the committed bindings are stale.
//
//go:generate go tool bpf2go -cc ${BPF_CLANG} -cflags ${BPF_CFLAGS} -target bpfel -type conn_key -type conn_key4 -type conn_entities -type track -type conn_state -type bind_request -type bind_args -type entity_counters -type datapath_settings -type sample -type sample_ring -type exempt_key -type entity_name -type conn_identity -type entity_rate -type latency_event -type stat sluice ../bpf/tc.c -- -I/usr/include/x86_64-linux-gnu
