//go:build ignore

// The flow cache: a per-CPU copy, in front of the connection tables, of
// what a connection's segments need (its entities, and whether its request
// tracking has work to do).
//
// Why: the connection table is an LRU hash, and its lookup is the dearest
// step of a governed segment (hashing, a bucket walk, a key compare: four
// calls, each paying this kernel's return-thunk mitigation). A connection's
// segments arrive in bursts on one CPU, so each CPU keeps, per slot of a
// hash of the 4-tuple, the last connection it looked up there; reading it
// is a few inlined loads.
//
// A cached copy is used only while it is exactly what the table holds:
//   - its slot's flow_epochs count is unchanged: sluice_bind bumps it when
//     it binds or forgets a connection that hashes there, and the broker's
//     SYN-ACK when it replaces one (the count is read before the table, the
//     writers bump it after writing, so a copy never outlives a change);
//   - it was filled in the current jiffy: once a jiffy the table is looked
//     up again, which keeps the LRU's reference bit fresh for a busy
//     connection (so the cache never gets a live connection evicted) and
//     notices an entry the LRU dropped;
//   - FIN and RST segments always take the table (they mark it closing),
//     and so does any segment at which request tracking has work to do.
// Colliding connections only take turns in a slot: the key is compared in
// full, so the worst a client can do by choosing its ports is to cost the
// connections that share its slot the table lookup they paid without the
// cache. The hash is seeded at load so that it cannot aim at a slot. A
// flood of new connections (each SYN-ACK bumps one slot) likewise only
// sends the slots it touches back to the table.
#pragma once

#include <linux/bpf.h>
#include "include/bpf_helpers.h"
#include "kafka.h"
#include "maps.h"
#include "packet.h"
#include "types.h"

volatile const __u32 flow_seed = 0;    // random, set at load
volatile const __u8 flow_cache_on = 1; // tests compare the data path without it

static __always_inline __u32 flow_mix(__u32 a, __u32 b)
{
	__u32 h = (a ^ flow_seed) * 0x9e3779b1u;
	h = (h ^ b) * 0x85ebca6bu;
	return h >> (32 - FLOW_CACHE_BITS);
}

static __always_inline __u32 flow_slot4(const struct conn_key4 *k)
{
	return flow_mix(k->peer_addr, ((__u32)k->peer_port << 16 | k->local_port) + k->local_addr);
}

static __always_inline __u32 flow_slot6(const struct conn_key *k)
{
	const __u32 *w = (const __u32 *)k;
	return flow_mix(w[0] ^ w[1] ^ w[2] ^ w[3], (w[4] ^ w[5] ^ w[6] ^ w[7]) + w[8]);
}

static __always_inline int same_key4(const struct conn_key4 *a, const struct conn_key4 *b)
{
	return a->peer_addr == b->peer_addr && a->local_addr == b->local_addr &&
	       a->peer_port == b->peer_port && a->local_port == b->local_port;
}

static __always_inline int same_key6(const struct conn_key *a, const struct conn_key *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;
	__u32 diff = 0;
	for (int i = 0; i < sizeof(*a) / 4; i++)
		diff |= x[i] ^ y[i];
	return diff == 0;
}

// A segment's place in this CPU's cache.
struct flow_ref {
	__u64 jiffies;
	__u32 slot;
	__u32 epoch;
	int usable; // 0: no cache for this segment
};

// flow_bump marks the cached copies of the connections hashing to slot
// stale on every CPU.
static __always_inline void flow_bump(__u32 slot)
{
	__u32 *epoch = bpf_map_lookup_elem(&flow_epochs, &slot);
	if (epoch)
		__sync_fetch_and_add(epoch, 1);
}

// flow_find returns this CPU's cached copy of the segment's connection when
// it is valid, else NULL; either way it readies r for flow_fill. Each map
// keeps a call site of its own (see conn_lookup).
static __always_inline struct flow_view *flow_find(const struct parsed *p, struct flow_ref *r)
{
	r->usable = 0;
	if (!flow_cache_on)
		return NULL;
	struct flow_view *v;
	int same;
	if (p->v6) {
		r->slot = flow_slot6(&p->key);
		struct flow_entry6 *e = bpf_map_lookup_elem(&flows6, &r->slot);
		asm volatile("# flows6");
		if (!e)
			return NULL;
		v = &e->view;
		same = same_key6(&e->key, &p->key);
	} else {
		r->slot = flow_slot4(&p->key4);
		struct flow_entry4 *e = bpf_map_lookup_elem(&flows4, &r->slot);
		asm volatile("# flows4");
		if (!e)
			return NULL;
		v = &e->view;
		same = same_key4(&e->key, &p->key4);
	}
	__u32 *epoch = bpf_map_lookup_elem(&flow_epochs, &r->slot);
	if (!epoch)
		return NULL;
	// Read before the connection table (see the top of this file).
	r->epoch = *(volatile __u32 *)epoch;
	r->jiffies = bpf_jiffies64();
	r->usable = 1;
	if (same && v->epoch == r->epoch && v->jiffies == r->jiffies)
		return v;
	return NULL;
}

// flow_fill copies the table's entry st into the segment's cache slot. It
// looks the slot up again rather than keep a pointer across the table's
// code, which the verifier could not follow.
static __always_inline void flow_fill(const struct flow_ref *r, const struct parsed *p, const struct conn_state *st)
{
	if (!r->usable)
		return;
	__u32 slot = r->slot;
	struct flow_view *v;
	if (p->v6) {
		struct flow_entry6 *e = bpf_map_lookup_elem(&flows6, &slot);
		asm volatile("# flows6");
		if (!e)
			return;
		__builtin_memcpy(&e->key, &p->key, sizeof(p->key));
		v = &e->view;
	} else {
		struct flow_entry4 *e = bpf_map_lookup_elem(&flows4, &slot);
		asm volatile("# flows4");
		if (!e)
			return;
		e->key = p->key4;
		v = &e->view;
	}
	v->bound = st->bound;
	v->epoch = r->epoch;
	v->jiffies = r->jiffies;
	__u32 until = 0;
	if (st->track.by_peer)
		v->track = FLOW_TRACK_NEVER;
	else if (track_quiet_until(&st->track, &until))
		v->track = FLOW_TRACK_QUIET;
	else
		v->track = FLOW_TRACK_BUSY;
	v->quiet_until = until;
}
