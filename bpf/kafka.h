//go:build ignore

// Kafka request boundary tracking on client->broker streams.
//
// A Kafka request is a big-endian int32 size followed by that many bytes.
// The data path follows where the next request starts by TCP sequence
// number, so it finds request starts wherever segments cut the stream: a
// size field split across segments, several requests in one segment, a
// request header spanning segments. At a request start it sends the first
// bytes of the request to the agent through its CPU's sample ring, as fragments
// the agent stitches (a sample whose bytes span segments continues with the
// next in-order segment). Retransmitted bytes lie before next_seq and are
// never sampled twice. Connections that predate the agent, or whose stream
// was lost (a gap, an implausible size), re-synchronise on a segment that
// begins with a plausible request header.
#pragma once

#include <linux/bpf.h>
#include "include/bpf_helpers.h"
#include "include/bpf_endian.h"
#include "clock.h"
#include "maps.h"
#include "packet.h"
#include "helpers.h"
#include "latency.h"

// socket.request.max.bytes defaults to 100 MiB; nothing larger is a request.
#define MAX_REQUEST_SIZE (100u << 20)
// The smallest request: api key, version, correlation id, client-id length.
#define MIN_REQUEST_SIZE 10u
// Requests looked for in one segment (GRO segments hold many small ones;
// the rest of such a segment is found again only by re-synchronising).
#define MAX_REQUESTS_PER_SEGMENT 16

// Runtime knobs fixed at load (set through spec.Variables).
volatile const __u32 sample_bytes = 256;          // <= SAMPLE_MAX
volatile const __u32 first_requests_sampled = 8;  // always sampled per connection
volatile const __u32 slots_per_cpu = 256;         // a power of two: each CPU's sample ring
volatile const __u8 bench_rewind = 0;             // benchmarks only: undo tracking after each run

// copy_sample copies n (1..SAMPLE_MAX) bytes of the packet at offset off
// into dst, a sample's SAMPLE_MAX bytes (8-aligned). When n <= 256 and
// the 256 bytes at off lie in the packet's linear part, they are copied
// inline, a word at a time (bytes past n ride along and are ignored: the
// sample says its length); else bpf_skb_load_bytes copies exactly n, at
// the cost of a helper call and a memcpy (~45 ns for 256 bytes here). The
// block is fixed so that the verifier walks one path through it, whatever
// n is.
static __always_inline int copy_sample(struct __sk_buff *skb, __u32 off, __u8 *dst, __u32 n)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	// The verifier takes a packet range only from offsets it knows stay
	// under 64 KiB, block included.
	if (off < 0xfe00) {
		const __u64 *from = data + off;
		__u64 *to = (__u64 *)dst;
		if (n <= 256 && (void *)(from + 32) <= data_end) {
#pragma unroll
			for (int i = 0; i < 32; i++)
				to[i] = from[i];
			return 0;
		}
	}
	return bpf_skb_load_bytes(skb, off, dst, n);
}

// emit sends payload bytes [off, off+n) as one fragment of the request
// starting at req_seq. It returns the bytes sent, or 0.
static __always_inline __u32 emit(struct __sk_buff *skb, const struct parsed *seg, const struct conn_state *st,
				  __u32 poff, __u32 off, __u32 n, __u32 req_seq, __u32 frag_off, __u32 req_len)
{
	if (n == 0)
		return 0;
	if (n > SAMPLE_MAX)
		n = SAMPLE_MAX;
	// [1, SAMPLE_MAX] in a form the verifier tracks whatever clang proved.
	_Static_assert(SAMPLE_MAX == 512, "the mask below is SAMPLE_MAX - 1");
	n -= 1;
	verifier_mask(n, 511);
	n += 1;
	__u32 cpu = bpf_get_smp_processor_id();
	struct sample_ring *ring = bpf_map_lookup_elem(&sample_rings, &cpu);
	if (!ring)
		return 0;
	// head is this CPU's alone; tail is the agent's, and a slot is written
	// only after the agent has moved tail past it (the branch orders them).
	__u64 head = ring->head;
	if (head - *(volatile __u64 *)&ring->tail >= slots_per_cpu) {
		stat_inc(STAT_RINGBUF_DROPS);
		return 0;
	}
	__u32 slot = cpu * slots_per_cpu + ((__u32)head & (slots_per_cpu - 1));
	struct sample *s = bpf_map_lookup_elem(&sample_slots, &slot);
	if (!s || copy_sample(skb, poff + off, s->data, n) < 0)
		return 0; // nothing published: the slot is written again next time
	conn_key_of(seg, &s->key);
	s->req_seq = req_seq;
	s->frag_off = frag_off;
	s->req_len = req_len;
	s->len = n;
	s->conn_born = st->born;
	s->bound = st->bound;
	publish_head(ring, head + 1);
	stat_inc((frag_off & ~SAMPLE_CLIENT_ID_CUT) == 0 ? STAT_SAMPLES : STAT_FRAGMENTS);
	return n;
}

// take_sample spends the connection's sample budget: its first requests
// are always sampled, then a token bucket of samples_per_sec. Times here are
// CLOCK_MONOTONIC_COARSE (coarse_now): a tick of resolution is plenty for a
// budget and a sample's age.
static __always_inline int take_sample(struct track *t)
{
	if (t->requests < first_requests_sampled) {
		t->requests++;
		return 1;
	}
	__u32 zero = 0;
	struct datapath_settings *cfg = bpf_map_lookup_elem(&settings, &zero);
	__u32 rate = cfg ? cfg->samples_per_sec : 0;
	__u64 now = coarse_now();
	__u64 elapsed = now - t->refill_ns;
	if (elapsed > 1000000000ull)
		elapsed = 1000000000ull;
	// The coarse clock moves once a jiffy: most calls find nothing elapsed
	// and skip the division (tens of cycles).
	__u64 add = elapsed ? elapsed * rate / 1000000000ull : 0;
	if (add) {
		__u64 tokens = t->tokens + add;
		t->tokens = tokens > rate ? rate : tokens;
		t->refill_ns = now;
	}
	if (!t->tokens) {
		stat_inc(STAT_BUDGET_DROPS);
		return 0;
	}
	t->tokens--;
	return 1;
}

// plausible_header checks the 14 bytes at a segment start for a request
// header: size, api key, version, correlation id, client-id length.
static __always_inline int plausible_header(struct __sk_buff *skb, __u32 poff, __u32 plen)
{
	__u8 h[14];
	if (plen < sizeof(h) || load(skb, poff, h, sizeof(h)) < 0)
		return 0;
	__u32 size = (__u32)h[0] << 24 | (__u32)h[1] << 16 | (__u32)h[2] << 8 | h[3];
	__u16 key = (__u16)h[4] << 8 | h[5];
	__u16 version = (__u16)h[6] << 8 | h[7];
	__s16 client_len = (__s16)((__u16)h[12] << 8 | h[13]);
	if (size < MIN_REQUEST_SIZE || size > MAX_REQUEST_SIZE)
		return 0;
	if (key > 100 || version > 30 || (h[8] & 0x80))
		return 0; // unknown api key, version, or a negative correlation id
	if (client_len < -1 || (client_len > 0 && (__u32)client_len + MIN_REQUEST_SIZE > size))
		return 0;
	return 1;
}

// The header a cut sample keeps: size, api key, version, correlation id,
// client-id length, and CLIENT_ID_KEPT bytes of the client-id.
#define CLIENT_ID_HEAD (14 + CLIENT_ID_KEPT)

// client_id_gap returns how many client-id bytes a sample of the request
// starting at offset off leaves out: those past CLIENT_ID_KEPT, when the
// client-id's length lies in this segment (avail bytes from off) and is
// plausible; else 0, and the sample is the request's first bytes.
static __always_inline __u32 client_id_gap(struct __sk_buff *skb, __u32 off, __u32 avail, __u32 size)
{
	__u8 l[2];
	// A sample too small to hold more than the kept head is never cut.
	if (sample_bytes <= CLIENT_ID_HEAD || avail < 14 || bpf_skb_load_bytes(skb, off + 12, l, 2) < 0)
		return 0;
	__u32 n = (__u32)l[0] << 8 | l[1];
	if (n <= CLIENT_ID_KEPT || n > 0x7fff || 10 + n > size)
		return 0; // short, null (0xffff) or longer than the request
	return n - CLIENT_ID_KEPT;
}

// sample_pending_before tells whether a sample's next bytes lie before end
// (in the segment that ends there). Only a cut sample's can, after step 4:
// an uncut one took every byte the segment had.
static __always_inline int sample_pending_before(const struct track *t, __u32 end)
{
	return t->sample_next != t->sample_end && seq_before(t->sample_next, end);
}

// continue_sample sends the pending sample's bytes that the segment [seq,
// end) holds from sample_next on. A cut sample (sample_gap) sends the kept
// head of its client-id first, then jumps past the bytes cut out; its
// offsets count only the bytes it keeps.
static __always_inline void continue_sample(struct __sk_buff *skb, const struct parsed *seg, struct conn_state *st,
					    __u32 seq, __u32 end)
{
	struct track *t = &st->track;
	__u32 at = t->sample_next - t->sample_seq; // offset in the request
	__u32 n = min_u32(t->sample_end - t->sample_next, end - t->sample_next);
	__u32 frag_off = at;
	if (t->sample_gap) {
		if (at < CLIENT_ID_HEAD)
			n = min_u32(n, CLIENT_ID_HEAD - at);
		else
			frag_off = at - t->sample_gap;
	}
	__u32 sent = emit(skb, seg, st, seg->payload_off, t->sample_next - seq, n, t->sample_seq, frag_off, t->req_len);
	if (!sent) {
		t->sample_next = t->sample_end;
		return;
	}
	t->sample_next += sent;
	if (t->sample_gap && at < CLIENT_ID_HEAD && at + sent == CLIENT_ID_HEAD)
		t->sample_next += t->sample_gap;
}

// track_quiet_until tells whether tracking has nothing to do (no size field
// cut, no sample to continue) for segments that end by *until, where the
// next request starts (or, while a pending request's last byte is awaited,
// where that byte is: latency.h).
static __always_inline int track_quiet_until(const struct conn_state *st, __u32 *until)
{
	const struct track *t = &st->track;
	*until = t->next_seq;
	latency_quiet_until(st, until);
	return t->synced && !t->size_have && t->sample_next == t->sample_end;
}

// track_request_starts follows request boundaries through one ingress
// segment (payload [seq, seq+plen) at offset poff of the skb).
static __always_inline void track_request_starts(struct __sk_buff *skb, const struct parsed *seg,
						 struct conn_state *st)
{
	struct track *t = &st->track;
	__u32 seq = seg->seq, poff = seg->payload_off, plen = seg->payload_len;
	__u32 end = seq + plen;

	latency_on_segment(st, seq, end);
	// Most segments of a big request (and retransmissions) end before the
	// next request starts, with no sample to continue: nothing to do.
	__u32 until;
	if (track_quiet_until(st, &until) && !seq_before(until, end))
		return;

	// A gap: the stream jumped past where the next request starts (a
	// segment this hook never saw in order). Find the stream again.
	if (t->synced && seq_before(t->next_seq + t->size_have, seq)) {
		t->synced = 0;
		t->size_have = 0;
		stat_inc(STAT_DESYNCS);
	}

	// 1. Complete a size field the previous segment cut.
	if (t->synced && t->size_have) {
		__u32 at = t->next_seq + t->size_have;
		if (!seq_before(at, seq) && seq_before(at, end)) {
			__u32 off = at - seq;
			for (int i = 0; i < 3; i++) {
				__u8 b;
				if (t->size_have >= 4 || off >= plen)
					break;
				if (bpf_skb_load_bytes(skb, poff + off, &b, 1) < 0)
					break;
				t->size_partial = t->size_partial << 8 | b;
				t->size_have++;
				off++;
			}
			if (t->size_have == 4) {
				__u32 size = t->size_partial;
				t->size_have = 0;
				if (size < MIN_REQUEST_SIZE || size > MAX_REQUEST_SIZE) {
					t->synced = 0;
					stat_inc(STAT_DESYNCS);
				} else {
					if (t->sample_seq == t->next_seq && t->sample_next != t->sample_end) {
						t->req_len = 4 + size;
						if (seq_before(t->next_seq + 4 + size, t->sample_end))
							t->sample_end = t->next_seq + 4 + size;
					}
					t->next_seq += 4 + size;
				}
			}
		}
	}

	// 2. Continue a sample whose first bytes an earlier segment carried.
	if (t->sample_next != t->sample_end) {
		if (seq_before(t->sample_next, seq))
			t->sample_next = t->sample_end; // its bytes went by out of order
		else if (seq_before(t->sample_next, end))
			continue_sample(skb, seg, st, seq, end);
	}

	// 3. Re-synchronise on a segment that starts with a plausible header.
	if (!t->synced) {
		if (!plausible_header(skb, poff, plen))
			return;
		t->synced = 1;
		t->next_seq = seq;
		t->size_have = 0;
		stat_inc(STAT_RESYNCS);
	}

	// 4. Every request that starts in this segment. Not unrolled: sixteen
	// copies would make the program too big for the instruction cache.
	// The first sampled one may become the pending request whose latency is
	// measured (latency.h: st->lat.cand_*).
	st->lat.cand_size = 0;
#pragma clang loop unroll(disable)
	for (int i = 0; i < MAX_REQUESTS_PER_SEGMENT; i++) {
		if (t->size_have || seq_before(t->next_seq, seq) || !seq_before(t->next_seq, end))
			break;
		__u32 off = t->next_seq - seq;
		__u32 avail = end - t->next_seq;
		// A cut sample's rest in this segment (step 5) comes first: a
		// request after it in the segment is tracked, not sampled.
		int sample = !sample_pending_before(t, end) && take_sample(t);
		if (avail < 4) {
			// The size field is cut: keep its first bytes for the next segment.
			__u8 b[4] = {};
			__u32 have = avail - 1; // avail is 1..3: have is [1, 4] for the verifier
			verifier_mask(have, 3);
			have += 1;
			if (bpf_skb_load_bytes(skb, poff + off, b, have) < 0)
				break;
			t->size_partial = 0;
			for (int j = 0; j < 3; j++)
				if (j < avail)
					t->size_partial = t->size_partial << 8 | b[j];
			t->size_have = avail;
			if (sample) {
				__u32 sent = emit(skb, seg, st, poff, off, avail, t->next_seq, 0, 0);
				t->sample_seq = t->next_seq;
				t->sample_gap = 0;
				t->req_len = 0;
				t->sample_next = t->next_seq + sent;
				t->sample_end = sent ? t->next_seq + sample_bytes : t->sample_next;
			}
			break;
		}
		__be32 be;
		if (load(skb, poff + off, &be, 4) < 0)
			break;
		__u32 size = bpf_ntohl(be);
		if (size < MIN_REQUEST_SIZE || size > MAX_REQUEST_SIZE) {
			t->synced = 0;
			stat_inc(STAT_DESYNCS);
			break;
		}
		if (sample && !st->lat.cand_size) {
			// Measured after the loop (latency.h), which the verifier
			// then walks once.
			st->lat.cand_seq = t->next_seq;
			st->lat.cand_size = size;
		}
		if (sample) {
			// With a long client-id cut out (gap bytes), the sample's
			// first fragment is the header and CLIENT_ID_KEPT bytes of it,
			// and the rest starts at tail, after the client-id.
			__u32 gap = client_id_gap(skb, poff + off, avail, size);
			__u32 len = 4 + size - gap; // the request as the sample counts it
			__u32 want = min_u32(sample_bytes, len);
			__u32 first = gap ? CLIENT_ID_HEAD : want;
			__u32 sent = emit(skb, seg, st, poff, off, min_u32(first, avail), t->next_seq,
					  gap ? SAMPLE_CLIENT_ID_CUT : 0, len);
			// The rest comes in this segment (step 5, after the
			// client-id) or later ones (step 2).
			if (sent && sent < want) {
				t->sample_seq = t->next_seq;
				t->sample_gap = gap;
				t->req_len = len;
				t->sample_next = t->next_seq + (sent < first ? sent : sent + gap);
				t->sample_end = t->next_seq + want + gap;
			}
		}
		t->next_seq += 4 + size;
	}

	if (st->lat.cand_size)
		latency_on_request(skb, st, seq, poff, end);

	// 5. The rest of a cut sample (step 4) that lies in this segment.
	if (sample_pending_before(t, end) && !seq_before(t->sample_next, seq))
		continue_sample(skb, seg, st, seq, end);
}
