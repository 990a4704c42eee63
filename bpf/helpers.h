//go:build ignore

// Helpers the stream trackers share (kafka.h follows requests, latency.h
// responses): reading packet bytes, sequence arithmetic, statistics, and
// publishing a slot of a per-CPU ring to the agent.
#pragma once

#include <linux/bpf.h>
#include "include/bpf_helpers.h"
#include "maps.h"
#include "types.h"

// verifier_mask applies a mask clang may prove redundant and drop, but the
// verifier needs to see to bound a length.
#define verifier_mask(x, mask) asm volatile("%0 &= " #mask : "+r"(x))

static __always_inline void stat_inc(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &which);
	if (v)
		(*v)++;
}

// load copies len (a constant) bytes at offset off of the packet: straight
// from its linear part when they lie there, which costs nothing, else
// through bpf_skb_load_bytes (a helper call, ~15 ns here).
static __always_inline int load(struct __sk_buff *skb, __u32 off, void *dst, const __u32 len)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	// The verifier takes a packet range only from offsets it knows stay
	// under 64 KiB, length included.
	if (off < 0xff00 && data + off + len <= data_end) {
		__builtin_memcpy(dst, data + off, len);
		return 0;
	}
	return bpf_skb_load_bytes(skb, off, dst, len);
}

// a < b in sequence space.
static __always_inline int seq_before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

static __always_inline __u32 min_u32(__u32 a, __u32 b)
{
	return a < b ? a : b;
}

// publish_head moves a per-CPU ring's head (the sample rings', kafka.h;
// the latency rings', latency.h) past a slot just written, so that the
// agent reading the new head finds the slot's bytes. As written, an atomic
// exchange: a full barrier. The loader turns it into a store-release where
// the kernel has one (maps/publish.go), which orders just the slot before
// the head and spares the CPU a wait for the slot's cache lines. That
// rewrite needs this to be the data path's only exchange, its result
// unused (TestOnlyPublicationExchanges).
static __always_inline void publish_head(struct sample_ring *ring, __u64 head)
{
	(void)__sync_lock_test_and_set(&ring->head, head);
}
