//go:build ignore

// Request latency at the NIC: per connection, one sampled request at a time
// is pending from its arrival (first byte, and last byte) until the first
// byte of its response leaves, matched by correlation id. A Kafka response
// is a big-endian int32 size, then the request's correlation id; responses
// leave in request order, so following response boundaries by TCP sequence
// number on egress (as kafka.h follows requests on ingress) finds each
// response's correlation id wherever segments cut the stream.
//
// Bounded: one pending request per connection, in the connection's own
// entry (struct latency_track); a request becomes pending only when it is
// sampled (the per-connection sample budget, kafka.h take_sample) and none
// is pending, or the one pending has waited a second on a stream not
// followed; one never answered (acks=0 produce) is given up after
// latency_expire_ns. Measurements go to the
// agent through per-CPU latency rings (maps.h: latency_rings).
//
// Synchronisation: a connection entered by the data path has no response
// position it can trust (the agent may start in the middle of a response);
// the stream is synchronised by the pending request's own response, at a
// segment start (its size and correlation id), and kept by following sizes.
// A response whose header a segment end cuts is completed from the next
// segment; an implausible size, or a gap, loses sync until the next pending
// request's response starts a segment.
#pragma once

#include <linux/bpf.h>
#include "include/bpf_helpers.h"
#include "include/bpf_endian.h"
#include "clock.h"
#include "helpers.h"
#include "maps.h"
#include "packet.h"
#include "types.h"

// A pending request unanswered this long is given up (twice the largest
// latency bucket the agent keeps, 60 s). Set through spec.Variables.
volatile const __u64 latency_expire_ns = 120000000000ull;

// How long a pending request holds its place on a stream not followed.
// Set through spec.Variables.
volatile const __u64 latency_unsynced_wait_ns = 1000000000ull;

// Slots of each CPU's latency ring (a power of two). Set through
// spec.Variables.
volatile const __u32 latency_slots_per_cpu = 512;

// Responses looked for in one egress segment (a GSO segment can carry many
// small ones; past this many the stream loses sync until a pending
// request's response starts a segment).
#define MAX_RESPONSES_PER_SEGMENT 32

// The smallest response: its correlation id. A size with the top bit set
// is no Kafka size.
#define MIN_RESPONSE_SIZE 4u
#define MAX_RESPONSE_SIZE 0x7fffffffu

static __always_inline __u32 be32_at(const __u8 *b)
{
	return (__u32)b[0] << 24 | (__u32)b[1] << 16 | (__u32)b[2] << 8 | b[3];
}

// latency_age is how long the pending request has waited at now (0 when
// now, read from the coarse clock, lags its precise arrival time).
static __always_inline __u64 latency_age(const struct latency_track *l, __u64 now)
{
	return (__s64)(now - l->first_ns) > 0 ? now - l->first_ns : 0;
}

// latency_pending: a request is pending and not yet given up.
static __always_inline int latency_pending(const struct latency_track *l, __u64 now)
{
	return l->first_ns && latency_age(l, now) < latency_expire_ns;
}

// latency_on_request makes the segment's first sampled request start
// (cand_seq, cand_size: kafka.h) the connection's pending request, unless
// one is pending. The segment [seq, end) lies at packet offset poff.
static __always_inline void latency_on_request(struct __sk_buff *skb, struct conn_state *st, __u32 seq, __u32 poff,
					       __u32 end)
{
	struct latency_track *l = &st->lat;
	__u32 req_seq = l->cand_seq, size = l->cand_size;
	l->cand_size = 0;
	// Whether the pending request keeps its place needs no finer clock
	// than the coarse one (a tick, the same clock behind): the precise
	// one is read only for a request that becomes pending.
	__u64 now = coarse_now();
	// A pending request keeps its place while the response stream is
	// followed (its answer cannot have gone by unseen). While it is not,
	// one that has waited a second gives its place to a newer request: its
	// response may have started mid-segment, where no sync is found, and it
	// would hold the connection's measurements until it expired.
	if (latency_pending(l, now) && (l->resp_synced || latency_age(l, now) < latency_unsynced_wait_ns))
		return;
	if (l->first_ns)
		stat_inc(STAT_LATENCY_EXPIRED);
	l->first_ns = 0;
	// size, api key, version, correlation id: a header a segment end cuts
	// is not measured.
	__u8 h[12];
	if (seq_before(req_seq, seq) || end - req_seq < sizeof(h) || end - req_seq > 0xffff ||
	    load(skb, poff + (req_seq - seq), h, sizeof(h)) < 0)
		return;
	now = bpf_ktime_get_ns();
	l->api_key = (__u16)h[4] << 8 | h[5];
	l->corr_id = (__s32)be32_at(h + 8);
	l->end_seq = req_seq + 4 + size;
	l->req_size = size;
	l->last_ns = seq_before(end, l->end_seq) ? 0 : now;
	l->first_ns = now;
}

// latency_on_segment notes when the pending request's last byte arrives
// (an ingress segment [seq, end) that holds it).
static __always_inline void latency_on_segment(struct conn_state *st, __u32 seq, __u32 end)
{
	struct latency_track *l = &st->lat;
	if (l->first_ns && !l->last_ns && seq_before(seq, l->end_seq) && !seq_before(end, l->end_seq))
		l->last_ns = bpf_ktime_get_ns();
}

// latency_quiet_until lowers *until (where request tracking next has work)
// to the pending request's last byte while its arrival is not yet noted.
static __always_inline void latency_quiet_until(const struct conn_state *st, __u32 *until)
{
	const struct latency_track *l = &st->lat;
	if (l->first_ns && !l->last_ns && seq_before(l->end_seq - 1, *until))
		*until = l->end_seq - 1;
}

// emit_latency sends the pending request's measurement, answered now by a
// response of Kafka size resp_size, through this CPU's latency ring
// (maps.h), as kafka.h's emit sends a sample fragment: the slot written in
// place, then the head published.
static __always_inline void emit_latency(const struct parsed *seg, struct conn_state *st, __u64 now, __u32 resp_size)
{
	struct latency_track *l = &st->lat;
	__u32 cpu = bpf_get_smp_processor_id();
	struct sample_ring *ring = bpf_map_lookup_elem(&latency_rings, &cpu);
	if (!ring)
		return;
	// head is this CPU's alone; tail is the agent's, and a slot is written
	// only after the agent has moved tail past it (the branch orders them).
	__u64 head = ring->head;
	if (head - *(volatile __u64 *)&ring->tail >= latency_slots_per_cpu) {
		stat_inc(STAT_LATENCY_DROPS);
		return;
	}
	__u32 slot = cpu * latency_slots_per_cpu + ((__u32)head & (latency_slots_per_cpu - 1));
	struct latency_event *ev = bpf_map_lookup_elem(&latency_slots, &slot);
	if (!ev)
		return;
	conn_key_of(seg, &ev->key);
	ev->bound = st->bound;
	ev->conn_born = st->born;
	ev->first_ns = l->first_ns;
	ev->last_ns = l->last_ns;
	ev->resp_ns = now;
	ev->corr_id = l->corr_id;
	ev->api_key = l->api_key;
	ev->pad = 0;
	ev->req_size = l->req_size;
	ev->resp_size = resp_size;
	publish_head(ring, head + 1);
	stat_inc(STAT_LATENCY_EVENTS);
}

// response_start takes the response whose header (size, correlation id)
// starts at resp_seq: *answered is set to its size (never 0: at least
// MIN_RESPONSE_SIZE) when it answers the pending request, and resp_seq
// moves past it. 0: an implausible size (sync lost).
static __always_inline int response_start(struct latency_track *l, const __u8 *h, __u32 *answered)
{
	__u32 size = be32_at(h);
	if (size < MIN_RESPONSE_SIZE || size > MAX_RESPONSE_SIZE)
		return 0;
	if (l->first_ns && (__s32)be32_at(h + 4) == l->corr_id)
		*answered = size;
	l->resp_seq += 4 + size;
	return 1;
}

static __always_inline void response_desync(struct latency_track *l)
{
	l->resp_synced = 0;
	l->hdr_have = 0;
	stat_inc(STAT_RESP_DESYNCS);
}

// follow_responses moves resp_seq through the response starts in one
// egress segment [seq, seq+plen) at packet offset poff, setting *answered
// to the size of one that answers the pending request. The loop does the
// least it can (one helper read per start, no measurement): the verifier
// walks its body once per iteration.
static __always_inline void follow_responses(struct __sk_buff *skb, struct latency_track *l, __u32 seq, __u32 poff,
					     __u32 plen, __u32 *answered)
{
	__u32 end = seq + plen;
	__u8 h[8];

	// Not synchronised: only the pending request's response, starting
	// this segment, gives the stream's position.
	if (!l->resp_synced) {
		if (!l->first_ns || plen < sizeof(h) || bpf_skb_load_bytes(skb, poff, h, sizeof(h)) < 0)
			return;
		__u32 size = be32_at(h);
		if (size < MIN_RESPONSE_SIZE || size > MAX_RESPONSE_SIZE || (__s32)be32_at(h + 4) != l->corr_id)
			return;
		l->resp_synced = 1;
		l->resp_seq = seq;
		l->hdr_have = 0;
		stat_inc(STAT_RESP_RESYNCS);
	}

	// 1. Complete a header the previous segment cut.
	if (l->hdr_have) {
		__u32 at = l->resp_seq + l->hdr_have;
		if (seq_before(at, seq)) {
			response_desync(l); // a gap: bytes this hook never saw
			return;
		}
		if (!seq_before(at, end))
			return; // a retransmission of bytes already followed
		__u32 off = at - seq;
		for (int i = 0; i < 7; i++) {
			__u8 b;
			if (l->hdr_have >= sizeof(h) || off >= plen)
				break;
			if (bpf_skb_load_bytes(skb, poff + off, &b, 1) < 0)
				return;
			l->hdr[l->hdr_have & 7] = b;
			l->hdr_have++;
			off++;
		}
		if (l->hdr_have < sizeof(h))
			return;
		l->hdr_have = 0;
		__builtin_memcpy(h, l->hdr, sizeof(h));
		if (!response_start(l, h, answered)) {
			response_desync(l);
			return;
		}
	}

	// 2. Every response whose whole header lies in this segment.
	int lost = 0;
#pragma clang loop unroll(disable)
	for (int i = 0; i < MAX_RESPONSES_PER_SEGMENT; i++) {
		if (!seq_before(l->resp_seq, end))
			return;
		if (seq_before(l->resp_seq, seq) || end - l->resp_seq < sizeof(h))
			break; // its start went by unseen, or its header is cut
		if (bpf_skb_load_bytes(skb, poff + (l->resp_seq - seq), h, sizeof(h)) < 0 || !response_start(l, h, answered)) {
			lost = 1;
			break;
		}
	}
	// 3. A header the segment end cuts: its first bytes, for the next one.
	__u32 avail = end - l->resp_seq;
	if (!lost && !seq_before(l->resp_seq, seq) && avail < sizeof(h)) {
		__u8 b[8] = {};
		__u32 have = avail - 1; // avail is 1..7: have is [1, 8] for the verifier
		verifier_mask(have, 7);
		have += 1;
		if (bpf_skb_load_bytes(skb, poff + (l->resp_seq - seq), b, have) < 0)
			return;
		__builtin_memcpy(l->hdr, b, sizeof(b));
		l->hdr_have = avail;
		return;
	}
	// An implausible size, a start that went by unseen, or more responses
	// than one segment is followed for: sync is lost.
	response_desync(l);
}

// track_response_starts follows response boundaries through one egress
// segment of a governed connection and measures the pending request when
// its response starts there.
static __always_inline void track_response_starts(struct __sk_buff *skb, const struct parsed *seg,
						  struct conn_state *st)
{
	struct latency_track *l = &st->lat;
	__u32 answered = 0; // the answering response's size
	follow_responses(skb, l, seg->seq, seg->payload_off, seg->payload_len, &answered);
	if (!answered)
		return;
	__u64 now = bpf_ktime_get_ns();
	if (latency_pending(l, now))
		emit_latency(seg, st, now, answered);
	else
		stat_inc(STAT_LATENCY_EXPIRED);
	l->first_ns = 0;
}

// resp_quiet_until tells whether response tracking has nothing to do for
// egress segments that end by *until (the next response start); never is
// set when it has nothing to do at all (not synchronised and no request
// pending).
static __always_inline int resp_quiet_until(const struct conn_state *st, __u32 *until, int *never)
{
	const struct latency_track *l = &st->lat;
	*until = l->resp_seq;
	*never = !l->resp_synced && !l->first_ns;
	return l->resp_synced && !l->hdr_have;
}
