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
// never sampled twice.
//
// A client-id longer than CLIENT_ID_KEPT + CLIENT_ID_HASH_BYTES is cut
// (types.h): the sample keeps its first CLIENT_ID_KEPT bytes and, in place
// of the rest, their hash, so that neither the request's topics and login
// fall out of the sample nor long client-ids that share their first bytes
// become one. The cut is decided where the client-id's length is seen: in
// the request's first segment, or in a later one when the first ends
// before byte 14 (sample_more), at whichever byte segments cut the
// header. Whatever of a sample a segment holds is sent before the next
// request in the segment is looked at (sample_more), so a request
// pipelined behind one with a long client-id (a SaslAuthenticate behind
// its SaslHandshake) is sampled too.
//
// Position is kept through any segment: the first MAX_REQUESTS_PER_SEGMENT
// requests starting in it may be sampled, and the rest are followed by
// their size fields alone (follow_rest), so a segment of many small
// requests costs their samples, never the position. It is lost only at a
// gap (a segment this hook never saw in order), at an implausible size, or
// in a segment of more than MAX_REQUESTS_FOLLOWED requests (none of up to
// 64 KiB holds so many). Connections that predate the agent start where the
// broker's acknowledgement says the stream stands, which may be inside a
// request.
//
// Position is found again (track_regain) only in the newest bytes seen
// since it was lost, at the first of:
//   - a segment that begins with a plausible request header;
//   - a plausible header in a segment's first PROBE_BYTES bytes whose size
//     leads to another plausible header: in the same segment (found at
//     once), or in a later one (a candidate, confirmed by the segment that
//     holds it; the search goes on meanwhile, keeping the nearest).
// Each probed segment costs a token of the connection's sample budget, so
// a stream of junk costs at most samples_per_sec probes a second.
//
// The bound. Requests of at most PROBE_BYTES bytes put a request start in
// the first PROBE_BYTES bytes of every segment. Where segments are also at
// least two requests and a header long (2 * size + 14 bytes), that start's
// successor lies in the same segment: a stream that loses its position at
// a gap finds it again in the first segment after the gap, at its first
// request start, budget allowing. What goes unsampled is the requests that
// started in the bytes never seen and before that start.
// Smaller segments confirm the successor in the later segment that holds
// it (a header a segment end cuts starts the search again there). A stream
// of larger requests whose segments never begin at, nor hold early, a
// request start stays unsampled until one does: what that costs is
// samples (the agent's view of its client-id), never its counting or
// shaping.
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
// Requests looked for, and maybe sampled, in one segment (GRO segments hold
// many small ones; the rest of such a segment is followed, not sampled).
#define MAX_REQUESTS_PER_SEGMENT 16
// The largest segment this hook sees: GRO and GSO build none larger unless
// BIG TCP raises a device's gro_max_size.
#define MAX_SEGMENT_BYTES (1u << 16)
// Requests followed in one segment past the looked-for ones: enough for a
// segment of MAX_SEGMENT_BYTES of the smallest requests. Each costs a size
// field read (a few ns), far less than what the broker spends on it.
#define MAX_REQUESTS_FOLLOWED (MAX_SEGMENT_BYTES / (4 + MIN_REQUEST_SIZE) + 1)
// How far into a segment a stream that lost its position looks for a
// request start (track_regain), a header check per byte: a bound on what
// a stream of junk costs per segment.
#define PROBE_BYTES 256u
// Request header bytes plausible_header reads.
#define HEADER_BYTES 14u

// How a stream that lost its position looks for it (struct track's regain).
#define REGAIN_FRESH 0     // lost_end not set yet (a connection entered unsynchronised)
#define REGAIN_SEARCHING 1 // lost_end set: probing the newest segments
#define REGAIN_CANDIDATE 2 // next_seq is a request start to confirm

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

// claim_slot finds the next free slot of this CPU's sample ring, or NULL
// (ring full: counted). head is the ring's head to publish past it.
static __always_inline struct sample *claim_slot(struct sample_ring **ring, __u64 *head)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct sample_ring *r = bpf_map_lookup_elem(&sample_rings, &cpu);
	if (!r)
		return NULL;
	// head is this CPU's alone; tail is the agent's, and a slot is written
	// only after the agent has moved tail past it (the branch orders them).
	__u64 h = r->head;
	if (h - *(volatile __u64 *)&r->tail >= slots_per_cpu) {
		stat_inc(STAT_RINGBUF_DROPS);
		return NULL;
	}
	__u32 slot = cpu * slots_per_cpu + ((__u32)h & (slots_per_cpu - 1));
	*ring = r;
	*head = h;
	return bpf_map_lookup_elem(&sample_slots, &slot);
}

// publish_slot fills in a claimed slot's header and hands it to the agent.
static __always_inline void publish_slot(struct sample *s, struct sample_ring *ring, __u64 head,
					 const struct parsed *seg, const struct conn_state *st, __u32 n,
					 __u32 req_seq, __u32 frag_off, __u32 req_len)
{
	conn_key_of(seg, &s->key);
	s->req_seq = req_seq;
	s->frag_off = frag_off;
	s->req_len = req_len;
	s->len = n;
	s->conn_born = st->born;
	s->bound = st->bound;
	publish_head(ring, head + 1);
	stat_inc((frag_off & ~SAMPLE_CLIENT_ID_CUT) == 0 ? STAT_SAMPLES : STAT_FRAGMENTS);
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
	struct sample_ring *ring;
	__u64 head;
	struct sample *s = claim_slot(&ring, &head);
	if (!s || copy_sample(skb, poff + off, s->data, n) < 0)
		return 0; // nothing published: the slot is written again next time
	publish_slot(s, ring, head, seg, st, n, req_seq, frag_off, req_len);
	return n;
}

// spend_token takes a token of the connection's sample budget
// (samples_per_sec a second, refilled here), and returns whether there was
// one. Times here are CLOCK_MONOTONIC_COARSE (coarse_now): a tick of
// resolution is plenty for a budget and a sample's age.
static __always_inline int spend_token(struct track *t)
{
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
	if (!t->tokens)
		return 0;
	t->tokens--;
	return 1;
}

// take_sample spends the connection's sample budget: its first requests
// are always sampled, then a token bucket of samples_per_sec.
static __always_inline int take_sample(struct track *t)
{
	if (t->requests < first_requests_sampled) {
		t->requests++;
		return 1;
	}
	if (spend_token(t))
		return 1;
	stat_inc(STAT_BUDGET_DROPS);
	return 0;
}

// header_size checks the HEADER_BYTES bytes at h for a request header:
// size, api key, version, correlation id, client-id length. It returns the
// request's size field, or 0 (no request is that small).
static __always_inline __u32 header_size(const __u8 *h)
{
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
	return size;
}

// plausible_header checks the header at packet offset poff, where plen
// payload bytes are left (header_size).
static __always_inline __u32 plausible_header(struct __sk_buff *skb, __u32 poff, __u32 plen)
{
	__u8 h[HEADER_BYTES];
	if (plen < sizeof(h) || load(skb, poff, h, sizeof(h)) < 0)
		return 0;
	return header_size(h);
}

// lose_position: where the next request starts is no longer known.
// lost_end remembers the newest byte seen (end), so that position is found
// again only in bytes at least as new: an old retransmission that begins
// with a header would place it behind bytes already gone by.
static __always_inline void lose_position(struct track *t, __u32 end)
{
	t->synced = 0;
	t->size_have = 0;
	t->settled = 0;
	t->regain = REGAIN_SEARCHING;
	t->lost_end = end;
	stat_inc(STAT_DESYNCS);
}

// regain_position: the next request starts at at. Not settled: the bytes
// before it were not followed.
static __always_inline void regain_position(struct track *t, __u32 at)
{
	t->synced = 1;
	t->next_seq = at;
	t->size_have = 0;
	t->settled = 0;
	stat_inc(STAT_RESYNCS);
}

// keep_cut_size keeps the first avail (1..3) bytes of a size field that a
// segment end cuts, at packet offset off, for the next segment to complete.
static __always_inline int keep_cut_size(struct __sk_buff *skb, struct track *t, __u32 off, __u32 avail)
{
	__u8 b[4] = {};
	__u32 have = avail - 1; // avail is 1..3: have is [1, 4] for the verifier
	verifier_mask(have, 3);
	have += 1;
	if (bpf_skb_load_bytes(skb, off, b, have) < 0)
		return -1;
	t->size_partial = 0;
	for (int j = 0; j < 3; j++)
		if (j < avail)
			t->size_partial = t->size_partial << 8 | b[j];
	t->size_have = avail;
	return 0;
}

// The segment follow_rest and probe_segment walk: payload [seq, end) at
// packet offset poff.
struct walk {
	struct __sk_buff *skb;
	struct track *t;
	__u32 seq, end, poff;
	__u32 found;     // probe_one: the offset of a request start, or 0
	__u32 candidate; // probe_one: the offset of the nearest successor past the segment, or 0
	__u8 *probe;     // probe_one: the segment's first bytes (this CPU's scratch)
	__u32 probed;    // probe_one: how many of them
};

// follow_one steps over the request that starts at next_seq inside the
// segment, unsampled. It returns 1 (stop) when the segment holds no
// further request start, or position is lost.
static long follow_one(__u32 i, struct walk *w)
{
	struct track *t = w->t;
	if (!seq_before(t->next_seq, w->end))
		return 1;
	__u32 off = w->poff + (t->next_seq - w->seq);
	__u32 avail = w->end - t->next_seq;
	if (avail < 4) {
		if (keep_cut_size(w->skb, t, off, avail) < 0)
			lose_position(t, w->end);
		return 1;
	}
	__be32 be;
	if (load(w->skb, off, &be, 4) < 0) {
		lose_position(t, w->end);
		return 1;
	}
	__u32 size = bpf_ntohl(be);
	if (size < MIN_REQUEST_SIZE || size > MAX_REQUEST_SIZE) {
		lose_position(t, w->end);
		return 1;
	}
	t->next_seq += 4 + size;
	return 0;
}

// follow_rest follows the requests of a segment [seq, end) at packet
// offset poff past those step 4 looked at, so that position survives any
// number of them (up to MAX_REQUESTS_FOLLOWED). A bpf_loop, whose body the
// verifier walks once however many requests there are, in a global
// function, which it checks once on its own rather than on every path of
// the data path that reaches it.
__noinline int follow_rest(struct __sk_buff *skb, struct track *t, __u32 seq, __u32 poff, __u32 end)
{
	if (!t)
		return 0;
	struct walk w = {.skb = skb, .t = t, .seq = seq, .end = end, .poff = poff};
	bpf_loop(MAX_REQUESTS_FOLLOWED, follow_one, &w, 0);
	if (t->synced && !t->size_have && seq_before(t->next_seq, end))
		lose_position(t, end); // more requests than followed (BIG TCP)
	return 0;
}

// probe_one looks for a request start at offset i + 1 of the segment (its
// start was tried): a plausible header whose size leads to another one in
// the segment (found), or past its end (a candidate, confirmed later; the
// nearest is kept). It returns 1 (stop) at a find, or past the bytes a
// header fits in. The header is read from the bytes probe_segment copied;
// only a plausible one's successor is read from the packet.
static long probe_one(__u32 i, struct walk *w)
{
	__u32 plen = w->end - w->seq;
	__u32 o = i + 1;
	if (o + HEADER_BYTES > w->probed || o > PROBE_BYTES)
		return 1;
	// i < PROBE_BYTES: the mask changes nothing but shows the verifier a
	// bound on the register it reads with.
	_Static_assert(PROBE_BYTES == 256 && PROBE_BYTES + HEADER_BYTES <= PROBE_WINDOW, "the mask below keeps a probed header in struct scratch's probe");
	__u32 k = i;
	verifier_mask(k, 255);
	__u32 size = header_size(w->probe + 1 + k);
	if (!size)
		return 0;
	__u32 next = o + 4 + size; // no overflow: o < 64 KiB, size <= 100 MiB
	if (next >= plen) {
		if (!w->candidate || next < w->candidate)
			w->candidate = next;
		return 0;
	}
	if (plausible_header(w->skb, w->poff + next, plen - next)) {
		w->found = o;
		return 1;
	}
	return 0;
}

// probe_segment looks through the first PROBE_BYTES bytes of a segment for
// a request start (probe_one), for a stream that lost its position. It
// returns whether position was found in the segment; a candidate found
// instead is confirmed by the segment that holds it (track_regain). The
// bytes are copied once to this CPU's scratch: read from the packet, a
// check per offset cost ~100 ns on a paged segment, a probe ~25 us.
static __always_inline int probe_segment(struct __sk_buff *skb, struct track *t, __u32 seq, __u32 poff, __u32 end)
{
	__u32 zero = 0;
	struct scratch *sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return 0;
	__u32 n = min_u32(end - seq, PROBE_BYTES + HEADER_BYTES);
	if (n <= HEADER_BYTES)
		return 0; // no offset past the first holds a header
	n--;
	_Static_assert(PROBE_WINDOW == 512, "the mask below keeps the copy in struct scratch's probe");
	verifier_mask(n, 511);
	if (bpf_skb_load_bytes(skb, poff, sc->probe, n + 1) < 0)
		return 0;
	struct walk w = {.skb = skb, .t = t, .seq = seq, .end = end, .poff = poff, .probe = sc->probe, .probed = n + 1};
	bpf_loop(min_u32(end - seq, PROBE_BYTES), probe_one, &w, 0);
	if (w.found) {
		regain_position(t, seq + w.found);
		return 1;
	}
	if (!w.candidate)
		return 0;
	// Of two candidates the nearer is confirmed (or not) first: a false
	// one far ahead (bytes that pass for a header of a 70 MB request) then
	// costs nothing.
	__u32 candidate = seq + w.candidate;
	if (t->regain != REGAIN_CANDIDATE || seq_before(candidate, t->next_seq)) {
		t->next_seq = candidate;
		t->regain = REGAIN_CANDIDATE;
	}
	return 0;
}

// track_regain looks for the position of a stream that lost it in the
// segment [seq, end) at packet offset poff (the bound: top of this file),
// and returns whether it found it: tracking then carries on from next_seq.
// A global function, as follow_rest.
__noinline int track_regain(struct __sk_buff *skb, struct track *t, __u32 seq, __u32 poff, __u32 end)
{
	if (!t)
		return 0;
	if (t->regain == REGAIN_FRESH || seq_before(t->lost_end, end)) {
		t->lost_end = end;
		if (t->regain == REGAIN_FRESH)
			t->regain = REGAIN_SEARCHING;
	}
	if (seq_before(end, t->lost_end))
		return 0; // older bytes than some already seen
	// A candidate is confirmed by the segment that holds it. Segments
	// before it are searched all the same: it may be false.
	if (t->regain == REGAIN_CANDIDATE && seq_before(t->next_seq, end)) {
		__u32 at = t->next_seq;
		t->regain = REGAIN_SEARCHING;
		if (!seq_before(at, seq) && plausible_header(skb, poff + (at - seq), end - at)) {
			regain_position(t, at);
			return 1;
		}
	}
	if (plausible_header(skb, poff, end - seq)) {
		regain_position(t, seq);
		return 1;
	}
	// Probing (a header check per byte) is paid from the sample budget: a
	// stream of junk costs at most samples_per_sec probes a second.
	if (!spend_token(t))
		return 0;
	return probe_segment(skb, t, seq, poff, end);
}

// stream_stands_at tells whether the client's stream, as request tracking
// follows it, stands exactly at seq: a request start that following its
// payload reached, with no byte followed past it (settled), on a connection
// whose every client segment tracking sees (governed, not attributed by its
// peer). Unknown (not synced, no payload followed yet, a size field cut,
// the middle of a request: the cached copies of the entry answer segments
// there without the table) is no.
static __always_inline int stream_stands_at(const struct conn_state *st, __u32 seq)
{
	const struct track *t = &st->track;
	return t->synced && t->settled && !t->size_have && !t->by_peer &&
	       st->bound.entity[DIR_PRODUCE] != ENTITY_NOT_GOVERNED && t->next_seq == seq;
}

// The header a cut sample keeps: size, api key, version, correlation id,
// client-id length, and CLIENT_ID_KEPT bytes of the client-id.
#define CLIENT_ID_HEAD (14 + CLIENT_ID_KEPT)

// cut_gap returns how many bytes of a client-id of length n a sample of a
// request of size size leaves out (hashing them instead): those past
// CLIENT_ID_KEPT, when n is plausible and longer than what a cut sample
// keeps of it; else 0, and the sample is the request's first bytes.
static __always_inline __u32 cut_gap(__u32 n, __u32 size)
{
	// A sample too small to hold the kept head and the hash is never cut.
	if (sample_bytes < CLIENT_ID_HEAD + CLIENT_ID_HASH_BYTES)
		return 0;
	if (n <= CLIENT_ID_KEPT + CLIENT_ID_HASH_BYTES || n > 0x7fff || 10 + n > size)
		return 0; // short (the sample would not be shorter), null (0xffff) or longer than the request
	return n - CLIENT_ID_KEPT;
}

// client_id_gap is cut_gap for the request starting at offset off, when
// the client-id's length lies in this segment (avail bytes from off); else
// 0 for now, and sample_more looks again once the length comes.
static __always_inline __u32 client_id_gap(struct __sk_buff *skb, __u32 off, __u32 avail, __u32 size)
{
	__u8 l[2];
	if (avail < 14 || bpf_skb_load_bytes(skb, off + 12, l, 2) < 0)
		return 0;
	return cut_gap((__u32)l[0] << 8 | l[1], size);
}

// sample_pending_before tells whether a sample's next bytes lie before end
// (in the segment that ends there).
static __always_inline int sample_pending_before(const struct track *t, __u32 end)
{
	return t->sample_next != t->sample_end && seq_before(t->sample_next, end);
}

// The client-id hash: each 8-byte word (little-endian) of the cut bytes is
// mixed in (xor, multiply by an odd constant, fold the high half down: each
// step a bijection, so two client-ids of one length that differ in one
// word never meet), then the last bytes with their count, then the count
// of cut bytes. Not a cryptographic hash: a client can find two client-ids
// that share one, which gives it nothing a client-id cannot (any client
// may name itself as another does). agent/entity's LongClientHash is its
// Go twin.
#define ID_HASH_SEED 0x736c756963652d31ull
#define ID_HASH_MUL 0x9e3779b97f4a7c15ull

static __always_inline __u64 id_mix(__u64 h, __u64 w)
{
	h = (h ^ w) * ID_HASH_MUL;
	return h ^ (h >> 32);
}

// How hash_bytes walks a segment's cut bytes.
struct hash_walk {
	struct __sk_buff *skb;
	struct cut_id *c;
	__u64 *buf; // this CPU's scratch buf
	__u32 off;  // packet offset of the next byte
	__u32 left; // bytes left to hash in the segment (not 0 after a failed read)
};

// hash_chunk mixes the next (up to) HASH_CHUNK bytes into the hash: whole
// words, and the bytes of an unfinished word (only the segment's last
// chunk has them) to the carry. It returns 1 (stop) when no byte is left,
// or they could not be read. The bytes are copied to this CPU's scratch
// buffer, not the stack: the data path's frames, this one's included,
// must fit 512 bytes together.
static long hash_chunk(__u32 i, struct hash_walk *w)
{
	__u64 *buf = w->buf;
	__u32 n = w->left;
	if (n == 0 || !buf)
		return 1;
	n = min_u32(n, HASH_CHUNK) - 1;
	_Static_assert(HASH_CHUNK == 256, "the mask below is HASH_CHUNK - 1");
	verifier_mask(n, 255);
	n += 1;
	if (bpf_skb_load_bytes(w->skb, w->off, buf, n) < 0)
		return 1;
	struct cut_id *c = w->c;
	__u64 h = c->hash;
	__u32 words = n / 8;
#pragma unroll
	for (int j = 0; j < HASH_CHUNK / 8; j++)
		if (j < words)
			h = id_mix(h, buf[j]);
	c->hash = h;
	__u32 rest = n & 7;
	if (rest) {
		// The buffer's bytes past n are an earlier chunk's.
		c->carry = buf[words & (HASH_CHUNK / 8 - 1)] & ((1ull << (8 * rest)) - 1);
		c->carry_len = rest;
	}
	w->off += n;
	w->left -= n;
	return 0;
}

// hash_bytes mixes n cut bytes at packet offset off into c, first
// finishing the word a segment end cut. It returns 0, or -1 when the
// bytes could not be read. Not inlined, as cut_entry.
static __noinline int hash_bytes(struct __sk_buff *skb, struct cut_id *c, __u32 off, __u32 n)
{
	__u32 zero = 0;
	struct scratch *sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return -1;
	__u64 *buf = sc->buf;
	if (c->carry_len && n) {
		__u32 k = min_u32(8 - (c->carry_len & 7), n) - 1;
		verifier_mask(k, 7);
		k += 1;
		if (bpf_skb_load_bytes(skb, off, buf, k) < 0)
			return -1;
		c->carry |= (buf[0] & ((1ull << (8 * k)) - 1)) << (8 * (c->carry_len & 7));
		c->carry_len += k;
		off += k;
		n -= k;
		if (c->carry_len >= 8) {
			c->hash = id_mix(c->hash, c->carry);
			c->carry = 0;
			c->carry_len = 0;
		}
	}
	if (!n)
		return 0;
	struct hash_walk w = {.skb = skb, .c = c, .buf = buf, .off = off, .left = n};
	bpf_loop((n + HASH_CHUNK - 1) / HASH_CHUNK, hash_chunk, &w, 0);
	return w.left ? -1 : 0;
}

// cut_entry returns the connection's cut_id for the sample starting at
// req_seq: a fresh copy of init when init is given, else the one an
// earlier segment left; NULL when there is none (lost from the LRU, or
// another request's). Not inlined: its key would take stack in every
// caller's frame, and the data path's frames must fit 512 bytes together.
static __noinline struct cut_id *cut_entry(const struct parsed *seg, __u32 req_seq, const struct cut_id *init)
{
	struct conn_key k;
	conn_key_of(seg, &k);
	if (init && bpf_map_update_elem(&cut_ids, &k, init, BPF_ANY) < 0)
		return NULL;
	struct cut_id *c = bpf_map_lookup_elem(&cut_ids, &k);
	return c && c->req_seq == req_seq ? c : NULL;
}

// decide_cut reads the client-id's length of the pending sample's request
// (bytes 12 and 13), which its first segment did not hold, once the
// segment [seq, end) at packet offset poff does, and cuts the sample if
// the client-id is long. A segment that ends between the two bytes leaves
// the first in the connection's cut_id.
static __always_inline void decide_cut(struct __sk_buff *skb, const struct parsed *seg, struct track *t,
				       __u32 seq, __u32 end, __u32 poff)
{
	__u32 hi_seq = t->sample_seq + 12, lo_seq = t->sample_seq + 13;
	__u8 hi, lo;
	if (!seq_before(lo_seq, end)) {
		if (seq_before(hi_seq, end) && !seq_before(hi_seq, seq)) {
			struct cut_id init = {.req_seq = t->sample_seq};
			struct cut_id *c = cut_entry(seg, t->sample_seq, &init);
			if (c && bpf_skb_load_bytes(skb, poff + (hi_seq - seq), &hi, 1) == 0)
				c->len_first = hi;
		}
		return;
	}
	if (!seq_before(hi_seq, seq)) {
		if (bpf_skb_load_bytes(skb, poff + (hi_seq - seq), &hi, 1) < 0)
			return;
	} else {
		struct cut_id *c = cut_entry(seg, t->sample_seq, NULL);
		if (!c)
			return; // not cut: the sample may end inside the client-id
		hi = c->len_first;
	}
	if (bpf_skb_load_bytes(skb, poff + (lo_seq - seq), &lo, 1) < 0)
		return;
	// The size field came whole before byte 13 (req_len: 0 if it did not).
	__u32 gap = t->req_len >= 14 ? cut_gap((__u32)hi << 8 | lo, t->req_len - 4) : 0;
	if (!gap)
		return;
	__u32 len = t->req_len - gap + CLIENT_ID_HASH_BYTES;
	t->sample_gap = gap;
	t->req_len = len;
	t->sample_end = t->sample_seq + min_u32(sample_bytes, len) + gap - CLIENT_ID_HASH_BYTES;
}

// abandon_sample gives up the pending sample: the agent delivers what it
// has of it, incomplete.
static __always_inline void abandon_sample(struct track *t)
{
	t->sample_next = t->sample_end;
}

// sample_more sends what the segment [seq, end) holds of the pending
// sample, from sample_next on (sample_next lies in the segment):
//   - its header and, when its client-id is cut (sample_gap), the kept
//     head of the client-id (once the client-id's length is seen: not
//     before byte 14 when the request's first segment was shorter); when
//     it is not, everything up to sample_end;
//   - a cut client-id's other bytes, hashed (struct cut_id) and, at their
//     end, the hash in their place;
//   - the bytes after the client-id, up to sample_end.
// Each step carries on in the same segment, so a sample whose bytes the
// segment holds is done when it returns, and the next request in the
// segment can be sampled. A fragment that cannot be sent gives the sample
// up. A global function, verified once on its own.
__noinline int sample_more(struct __sk_buff *skb, const struct parsed *seg, struct conn_state *st, __u32 seq,
			   __u32 end)
{
	if (!skb || !seg || !st)
		return 0;
	struct track *t = &st->track;
	__u32 poff = seg->payload_off;
	if (!sample_pending_before(t, end) || seq_before(t->sample_next, seq))
		return 0;
	if (!t->sample_gap && t->sample_next - t->sample_seq < 14)
		decide_cut(skb, seg, t, seq, end, poff);

	__u32 gap = t->sample_gap;
	__u32 at = t->sample_next - t->sample_seq; // offset in the request
	__u32 gap_end = t->sample_seq + CLIENT_ID_HEAD + gap;
	// The cut bytes' hash in progress: in this CPU's scratch when the
	// segment holds them all from the first, else in the connection's
	// cut_id (which an earlier segment may have started).
	struct cut_id *c = NULL;
	if (!gap || at < CLIENT_ID_HEAD) {
		__u32 stop = gap ? t->sample_seq + CLIENT_ID_HEAD : t->sample_end;
		__u32 n = min_u32(stop - t->sample_next, end - t->sample_next);
		__u32 sent = emit(skb, seg, st, poff, t->sample_next - seq, n, t->sample_seq,
				  gap ? at | SAMPLE_CLIENT_ID_CUT : at, t->req_len);
		if (!sent) {
			abandon_sample(t);
			return 0;
		}
		t->sample_next += sent;
		if (!gap || t->sample_next != stop)
			return 0; // done, or the segment ends first
		__u32 zero = 0;
		struct scratch *sc = bpf_map_lookup_elem(&scratch, &zero);
		if (!sc) {
			abandon_sample(t);
			return 0;
		}
		sc->local = (struct cut_id){.hash = ID_HASH_SEED, .req_seq = t->sample_seq};
		c = seq_before(gap_end, end) || gap_end == end ? &sc->local : cut_entry(seg, t->sample_seq, &sc->local);
	}

	if (seq_before(t->sample_next, gap_end)) {
		if (!seq_before(t->sample_next, end))
			return 0;
		if (!c)
			c = cut_entry(seg, t->sample_seq, NULL);
		__u32 n = min_u32(gap_end - t->sample_next, end - t->sample_next);
		if (!c || hash_bytes(skb, c, poff + (t->sample_next - seq), n) < 0) {
			abandon_sample(t);
			return 0;
		}
		t->sample_next += n;
		if (t->sample_next != gap_end)
			return 0;
		__u64 h = id_mix(c->hash, c->carry | (__u64)c->carry_len << 56);
		h = id_mix(h, gap);
		struct sample_ring *ring;
		__u64 head;
		struct sample *s = claim_slot(&ring, &head);
		if (!s) {
			abandon_sample(t);
			return 0;
		}
		__builtin_memcpy(s->data, &h, sizeof(h));
		publish_slot(s, ring, head, seg, st, sizeof(h), t->sample_seq, CLIENT_ID_HEAD, t->req_len);
	}

	if (!seq_before(t->sample_next, end) || !seq_before(t->sample_next, t->sample_end))
		return 0;
	__u32 n = min_u32(t->sample_end - t->sample_next, end - t->sample_next);
	__u32 frag_off = t->sample_next - t->sample_seq - gap + CLIENT_ID_HASH_BYTES;
	__u32 sent = emit(skb, seg, st, poff, t->sample_next - seq, n, t->sample_seq, frag_off, t->req_len);
	if (!sent) {
		abandon_sample(t);
		return 0;
	}
	t->sample_next += sent;
	return 0;
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
	if (t->synced && seq_before(t->next_seq + t->size_have, seq))
		lose_position(t, end);
	// The segment holds the followed position (it cannot lie before it:
	// that is a gap): following it to its end settles the stream there
	// (stream_stands_at).
	int from_position = t->synced && seq_before(t->next_seq + t->size_have, end);

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
					lose_position(t, end);
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
			sample_more(skb, seg, st, seq, end);
	}

	// 3. A stream that lost its position looks for it.
	if (!t->synced && !track_regain(skb, t, seq, poff, end))
		return;

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
		// A sample in progress is never pending here: step 2 and
		// sample_more below send whatever of it the segment holds.
		int sample = !sample_pending_before(t, end) && take_sample(t);
		if (avail < 4) {
			// The size field is cut: keep its first bytes for the next segment.
			if (keep_cut_size(skb, t, poff + off, avail) < 0)
				break;
			if (sample) {
				// Its size and client-id length come later (step 1,
				// sample_more).
				t->sample_seq = t->sample_next = t->next_seq;
				t->sample_gap = 0;
				t->req_len = 0;
				t->sample_end = t->next_seq + sample_bytes;
				sample_more(skb, seg, st, seq, end);
			}
			break;
		}
		__be32 be;
		if (load(skb, poff + off, &be, 4) < 0)
			break;
		__u32 size = bpf_ntohl(be);
		if (size < MIN_REQUEST_SIZE || size > MAX_REQUEST_SIZE) {
			lose_position(t, end);
			break;
		}
		if (sample && !st->lat.cand_size) {
			// Measured after the loop (latency.h), which the verifier
			// then walks once.
			st->lat.cand_seq = t->next_seq;
			st->lat.cand_size = size;
		}
		if (sample) {
			// A long client-id is cut (gap bytes hashed into
			// CLIENT_ID_HASH_BYTES): the request as the sample counts it
			// is len bytes, of which it wants the first want.
			__u32 gap = client_id_gap(skb, poff + off, avail, size);
			__u32 len = gap ? 4 + size - gap + CLIENT_ID_HASH_BYTES : 4 + size;
			__u32 want = min_u32(sample_bytes, len);
			if (!gap && want <= avail) {
				// The common case: the whole sample in one fragment.
				emit(skb, seg, st, poff, off, want, t->next_seq, 0, len);
			} else {
				// Sent in pieces (the client-id's length may still
				// be to come: then sample_more cuts it once it comes),
				// here as far as the segment goes, the rest from later
				// segments (step 2).
				t->sample_seq = t->sample_next = t->next_seq;
				t->sample_gap = gap;
				t->req_len = len;
				t->sample_end = t->next_seq + want + (gap ? gap - CLIENT_ID_HASH_BYTES : 0);
				sample_more(skb, seg, st, seq, end);
			}
		}
		t->next_seq += 4 + size;
	}
	// The requests past those: followed, not sampled. next_seq is right
	// where the loop stopped, and the bytes it has to follow are in this
	// segment only: stopping there and carrying on at the next segment
	// would find next_seq behind it, a gap.
	if (t->synced && !t->size_have && !seq_before(t->next_seq, seq) && seq_before(t->next_seq, end))
		follow_rest(skb, t, seq, poff, end);
	if (from_position && t->synced)
		t->settled = !t->size_have;

	if (st->lat.cand_size)
		latency_on_request(skb, st, seq, poff, end);

}
