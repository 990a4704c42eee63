//go:build ignore

// The data path's clock.
#pragma once

#include <linux/bpf.h>
#include "include/bpf_helpers.h"
#include "maps.h"

// coarse_now returns CLOCK_MONOTONIC_COARSE, mostly without calling a
// helper. That clock moves only when the tick advances jiffies, and
// bpf_jiffies64 is inlined by the verifier, so each CPU keeps the value it
// read at its last jiffy and calls the helper (~15 ns behind this kernel's
// speculation mitigations, a third of a governed segment's budget) only
// once per jiffy. The result is at most a tick old, like the coarse clock
// itself: plenty for the heartbeat and the sample budget.
static __always_inline __u64 coarse_now(void)
{
	__u32 zero = 0;
	struct coarse_clock *c = bpf_map_lookup_elem(&coarse_clocks, &zero);
	if (!c)
		return bpf_ktime_get_coarse_ns();
	__u64 jiffies = bpf_jiffies64();
	if (c->jiffies != jiffies) {
		c->jiffies = jiffies;
		c->now_ns = bpf_ktime_get_coarse_ns();
	}
	return c->now_ns;
}
