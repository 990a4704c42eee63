//go:build ignore

// sluice_bind: the agent's bindings, applied in the kernel.
//
// A connection's entities and its request tracking share one conns entry
// (one lookup per segment). A map update from user space would replace the
// whole entry and reset the tracking, so the agent queues its bindings in
// bind_queue and runs this program (BPF_PROG_TEST_RUN), which writes only
// the entities, in one 8-byte store the data path reads in one load. It
// also forgets connections, so that every change the agent makes to the
// tables marks the flow cache's copies stale (flow_bump, after the write).
#pragma once

#include <linux/bpf.h>
#include "include/bpf_helpers.h"
#include "flowcache.h"
#include "maps.h"
#include "types.h"

struct bind_progress {
	__u32 applied;
};

// bind_into applies one request to a connection table.
static __always_inline int bind_into(void *conns, const void *key, const struct bind_request *req)
{
	if (req->op == BIND_OP_FORGET) {
		bpf_map_delete_elem(conns, key); // already gone is fine
		return 1;
	}
	struct conn_entities bound = req->bound;
	struct conn_state *st = bpf_map_lookup_elem(conns, key);
	if (!st) {
		// Not seen yet: the connection starts unsynchronised; its tracking
		// locks on at the next segment that starts with a request.
		// born only tells connections apart: any monotonic time will do.
		struct conn_state fresh = {.bound = bound, .born = bpf_ktime_get_ns()};
		if (bpf_map_update_elem(conns, key, &fresh, BPF_NOEXIST) == 0)
			return 1;
		st = bpf_map_lookup_elem(conns, key); // a segment inserted it meanwhile
		if (!st)
			return 0;
	}
	st->bound = bound;
	return 1;
}

static long bind_one(__u32 i, struct bind_progress *progress)
{
	struct bind_request *req = bpf_map_lookup_elem(&bind_queue, &i);
	if (!req)
		return 1;
	const __u8 *peer = req->key.peer_addr;
	int v4 = peer[10] == 0xff && peer[11] == 0xff;
	for (int b = 0; b < 10; b++)
		v4 = v4 && peer[b] == 0;
	if (v4) {
		struct conn_key4 k4 = {
			.peer_port = req->key.peer_port,
			.local_port = req->key.local_port,
		};
		__builtin_memcpy(&k4.peer_addr, req->key.peer_addr + 12, 4);
		__builtin_memcpy(&k4.local_addr, req->key.local_addr + 12, 4);
		progress->applied += bind_into(&conns4, &k4, req);
		flow_bump(flow_slot4(&k4));
	} else {
		progress->applied += bind_into(&conns6, &req->key, req);
		flow_bump(flow_slot6(&req->key));
	}
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
