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

static __always_inline __u32 flow_slot(const struct parsed *p)
{
	return p->v6 ? flow_slot6(&p->key) : flow_slot4(&p->key4);
}

// flow_bump marks the cached copies of the connections hashing to slot
// stale on every CPU.
static __always_inline void flow_bump(__u32 slot)
{
	__u32 *epoch = bpf_map_lookup_elem(&flow_epochs, &slot);
	if (epoch)
		__sync_fetch_and_add(epoch, 1);
}

// flow_claim readies a slot for flow_fill: the epoch read before the table
// (see the top of this file), and no jiffy, so that it matches nothing
// until flow_fill completes it. Nothing of the lookup has to live across
// the table's code, which keeps the verifier's work there as it was.
static __always_inline struct flow_view *flow_claim(struct flow_view *v, __u32 epoch)
{
	v->epoch = epoch;
	v->jiffies = 0;
	return NULL;
}

// flow_find returns this CPU's cached copy of the segment's connection when
// it is valid, else claims the slot for it. Each map keeps a call site of
// its own (see conn_lookup).
static __always_inline struct flow_view *flow_find(const struct parsed *p)
{
	if (!flow_cache_on)
		return NULL;
	__u32 slot = flow_slot(p);
	__u32 *epoch_at = bpf_map_lookup_elem(&flow_epochs, &slot);
	if (!epoch_at)
		return NULL;
	__u32 epoch = *(volatile __u32 *)epoch_at; // before the table
	__u64 now = bpf_jiffies64();
	if (p->v6) {
		struct flow_entry6 *e = bpf_map_lookup_elem(&flows6, &slot);
		asm volatile("# flows6");
		if (!e)
			return NULL;
		if (!same_key6(&e->key, &p->key))
			__builtin_memcpy(&e->key, &p->key, sizeof(p->key));
		else if (e->view.epoch == epoch && e->view.jiffies == now)
			return &e->view;
		return flow_claim(&e->view, epoch);
	}
	struct flow_entry4 *e = bpf_map_lookup_elem(&flows4, &slot);
	asm volatile("# flows4");
	if (!e)
		return NULL;
	if (!same_key4(&e->key, &p->key4))
		e->key = p->key4;
	else if (e->view.epoch == epoch && e->view.jiffies == now)
		return &e->view;
	return flow_claim(&e->view, epoch);
}

// flow_fill completes the segment's slot from the table's entry st, when
// the slot holds the segment's connection. Its epoch was read before the
// table, so a change since leaves the copy stale, never wrong.
static __always_inline void flow_fill(const struct parsed *p, const struct conn_state *st)
{
	if (!flow_cache_on)
		return;
	__u32 slot = flow_slot(p);
	struct flow_view *v = NULL;
	if (p->v6) {
		struct flow_entry6 *e = bpf_map_lookup_elem(&flows6, &slot);
		asm volatile("# flows6");
		if (e && same_key6(&e->key, &p->key))
			v = &e->view;
	} else {
		struct flow_entry4 *e = bpf_map_lookup_elem(&flows4, &slot);
		asm volatile("# flows4");
		if (e && same_key4(&e->key, &p->key4))
			v = &e->view;
	}
	if (!v)
		return;
	v->bound = st->bound;
	__u32 until = 0;
	if (st->track.by_peer)
		v->track = FLOW_TRACK_NEVER;
	else if (track_quiet_until(st, &until))
		v->track = FLOW_TRACK_QUIET;
	else
		v->track = FLOW_TRACK_BUSY;
	v->quiet_until = until;
	int never;
	if (st->track.by_peer)
		v->resp_track = FLOW_TRACK_NEVER;
	else if (resp_quiet_until(st, &until, &never))
		v->resp_track = FLOW_TRACK_QUIET;
	else
		v->resp_track = never ? FLOW_TRACK_NEVER : FLOW_TRACK_BUSY;
	v->resp_quiet_until = until;
	v->jiffies = bpf_jiffies64();
}
