//go:build ignore

// sluice_bind: the agent's bindings, applied in the kernel.
//
// A connection's entities and its request tracking share one conns entry
// (one lookup per segment). A map update from user space would replace the
// whole entry and reset the tracking, so the agent queues its bindings in
// bind_queue and runs this program (BPF_PROG_TEST_RUN), which writes only
// the entities, in one 8-byte store the data path reads in one load.
#pragma once

#include <linux/bpf.h>
#include "include/bpf_helpers.h"
#include "maps.h"
#include "types.h"

struct bind_progress {
	__u32 applied;
};

static long bind_one(__u32 i, struct bind_progress *progress)
{
	struct bind_request *req = bpf_map_lookup_elem(&bind_queue, &i);
	if (!req)
		return 1;
	struct conn_state *st = bpf_map_lookup_elem(&conns, &req->key);
	if (!st) {
		// Not seen yet: the connection starts unsynchronised; its tracking
		// locks on at the next segment that starts with a request.
		struct conn_state fresh = {.bound = req->bound};
		if (bpf_map_update_elem(&conns, &req->key, &fresh, BPF_NOEXIST) == 0) {
			progress->applied++;
			return 0;
		}
		st = bpf_map_lookup_elem(&conns, &req->key); // a segment inserted it meanwhile
		if (!st)
			return 0;
	}
	st->bound = req->bound;
	progress->applied++;
	return 0;
}

// It returns how many of the first count queued bindings it applied.
SEC("syscall")
int sluice_bind(struct bind_args *args)
{
	struct bind_progress progress = {};
	__u32 count = args->count;
	if (count > BIND_BATCH)
		count = BIND_BATCH;
	bpf_loop(count, bind_one, &progress, 0);
	return progress.applied;
}
