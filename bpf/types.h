//go:build ignore

// Layouts shared with user space. maps/ is the only Go package that knows
// them (through the bpf2go-generated types); keep both in step with
// `make generate`.
#pragma once

#include <linux/types.h>

// Directions index counters and classes: produce = bytes the broker
// receives (TC ingress), fetch = bytes it sends (TC egress).
#define DIR_PRODUCE 0
#define DIR_FETCH 1

// Entity ids: dense indexes written by the agent's registry.
#define ENTITY_UNKNOWN 0
#define ENTITY_NOT_GOVERNED 0xffffffffu

// The most request bytes one sample record carries.
#define SAMPLE_MAX 512

// A client chooses its client-id's length (up to 32767 bytes): a sample of
// a request whose client-id is longer than CLIENT_ID_KEPT +
// CLIENT_ID_HASH_BYTES keeps the header, the client-id's first
// CLIENT_ID_KEPT bytes, CLIENT_ID_HASH_BYTES of a hash of the client-id's
// other bytes (kafka.h, id_mix; little-endian) in their place, then
// the bytes after the client-id: no length hides the request's topics or
// login, and long client-ids that share their first bytes stay apart. The
// fragments that carry its header and kept client-id bytes have
// SAMPLE_CLIENT_ID_CUT in frag_off (the first of them, when the client-id's
// length came in a later segment than the request's start); every offset
// and length of such a sample counts the bytes it keeps, as if the
// client-id were CLIENT_ID_KEPT + CLIENT_ID_HASH_BYTES long.
#define CLIENT_ID_KEPT 128
#define CLIENT_ID_HASH_BYTES 8
#define SAMPLE_CLIENT_ID_CUT 0x8000

// The cut bytes one step of the client-id hash reads at a time (kafka.h,
// a bpf_loop callback).
#define HASH_CHUNK 256

// The bytes a stream that lost its position probes for a request start
// (kafka.h's PROBE_BYTES offsets, each with a header's HEADER_BYTES),
// copied to struct scratch once a segment: a header check per offset on
// packet bytes was two helper calls on the paged segments GRO builds.
// 512: a length masked to 511, plus one, fits whatever clang keeps of a
// tighter bound (PROBE_BYTES + HEADER_BYTES, 270, are used).
#define PROBE_WINDOW 512

// A cut sample's client-id bytes past CLIENT_ID_KEPT, hashed as the
// segments that carry them go by (kafka.h): 8-byte words from the first
// cut byte, a word cut by a segment end carried to the next. Kept apart
// from struct track (the connection table's layout stays as it is), and
// in the cut_ids map only while a sample's cut bytes or client-id length
// span segments (else in struct scratch); a lost entry loses that one
// sample's hash.
struct cut_id {
	__u64 hash;      // the words mixed so far
	__u64 carry;     // the bytes of an unfinished word, little-endian
	__u32 req_seq;   // the sample's request (track.sample_seq): else stale
	__u8 carry_len;  // bytes in carry (0..7)
	__u8 len_first;  // the client-id length's first byte, when a segment ended after it
	__u8 pad[2];
};

// A connection, normalised so that ingress and egress find the same entry:
// the broker (local) side and the client (peer) side. The key of IPv6
// connections, and how samples and the agent name every connection (IPv4
// as v4-mapped IPv6).
// 4-aligned (its size is unchanged) so that the data path writes and
// compares its addresses a word at a time.
struct conn_key {
	__u8 peer_addr[16];
	__u8 local_addr[16];
	__u16 peer_port;  // host byte order
	__u16 local_port; // host byte order
} __attribute__((aligned(4)));

// An IPv4 connection, the same way round (addresses in network order).
struct conn_key4 {
	__be32 peer_addr;
	__be32 local_addr;
	__u16 peer_port;  // host byte order
	__u16 local_port; // host byte order
};

// Written by the agent: the entity of each direction of a connection.
// ENTITY_NOT_GOVERNED in both marks a connection passed untouched (the
// data path also writes that for exempt peers). 8-aligned so that both
// directions are read and written in one access: never a mix of old and new.
struct conn_entities {
	__u32 entity[2];
} __attribute__((aligned(8)));

// Kafka request boundary tracking on one client->broker stream, owned by
// the data path: the agent's bindings write only the entities beside it.
struct track {
	// synced: the TCP sequence number where the next request starts.
	// Not synced, regain REGAIN_CANDIDATE: a request start to confirm.
	__u32 next_seq;
	union {
		__u32 size_partial; // synced: bytes of a size field cut by a segment end
		__u32 lost_end;     // not synced: one past the newest payload byte seen since (kafka.h)
	};
	__u32 sample_seq;   // start of the request whose sample continues
	__u32 sample_next;  // next sample byte wanted
	__u32 sample_end;   // one past the last sample byte wanted
	__u32 req_len;      // 4 + size of that request (0 while unknown)
	__u64 refill_ns;    // sample budget: last refill
	__u32 tokens;       // sample budget: samples left
	__u32 requests;     // requests seen (the first ones are always sampled)
	__u8 synced;        // next_seq is trusted
	__u8 size_have;     // bytes of size_partial collected (0..3)
	__u8 closing;       // a FIN or RST went by: the agent reclaims the entry
	__u8 by_peer;       // attributed by its peer at start (TLS listener): no request tracking
	__u16 sample_gap;   // client-id bytes the continuing sample leaves out (CLIENT_ID_KEPT)
	// Following the client's payload reached next_seq from a position it
	// followed, and no byte it followed lies past it (a client's RST: tc.c).
	__u8 settled;
	__u8 regain; // not synced: REGAIN_* (kafka.h), how position is looked for
};
// settled and regain take the two pad bytes of earlier releases (zero in
// the entries a restart carries over: not settled, REGAIN_FRESH), and
// lost_end shares size_partial's word: struct track, and struct conn_state
// around it, keep their size and layout, so pinned tables are reused whole.
_Static_assert(sizeof(struct track) == 48, "struct track keeps its layout");

// Request latency on one connection (latency.h): one sampled request at a
// time is pending, from its arrival until its response's first byte leaves;
// response boundaries are followed by TCP sequence number on egress, as
// request boundaries are on ingress.
struct latency_track {
	__u64 first_ns;   // the pending request's first byte arrived (0: none pending)
	__u64 last_ns;    // its last byte arrived (0: not yet)
	__u32 end_seq;    // ingress: one past its last byte
	__s32 corr_id;    // its correlation id
	__u32 resp_seq;   // egress: where the next response starts
	__u16 api_key;    // the pending request's
	__u8 resp_synced; // resp_seq is trusted
	__u8 hdr_have;    // bytes of a response header (size, correlation id) cut by a segment end, in hdr
	__u8 hdr[8];
	// The first sampled request start of the segment being tracked (its
	// sequence number and size; size 0: none): kept here rather than on the
	// stack so that the request loop's verifier states stay alike.
	__u32 cand_seq;
	__u32 cand_size;
	// The pending request's Kafka size field, for its measurement (the
	// agent tells a fetch that returned data from a long poll by its
	// response's size against its request's). No word above is free for
	// it: cand_* are rewritten by every sampled request start while one is
	// pending, and the request's start is not kept to derive it from
	// end_seq. So it is appended (conn_state grows; an earlier agent's
	// entries are carried over with it zero: maps/migrate.go).
	__u32 req_size;
	__u32 pad; // named, so the struct's 8-byte alignment hides no hole
};

// The connection table's value. Attribution and request tracking share one
// entry so that a segment costs one hash lookup (the dearest step of the
// data path).
struct conn_state {
	struct conn_entities bound; // written by the agent through sluice_bind
	struct track track;         // written by the data path
	// When the data path entered the connection (CLOCK_MONOTONIC_COARSE):
	// tells apart two connections that reuse one 4-tuple, so the agent
	// never carries what it learned of one over to the next.
	__u64 born;
	// Appended (an earlier agent's entries are carried over with it zeroed:
	// maps/migrate.go), so it must stay last.
	struct latency_track lat;
};

// Per CPU: what one run of a program keeps off the stack (the data
// path's frames must fit 512 bytes together). Valid only within the run.
struct scratch {
	// kafka.h: the cut client-id bytes being hashed, and the hash of cut
	// bytes one segment holds from first to last.
	__u64 buf[HASH_CHUNK / 8];
	struct cut_id local;
	// kafka.h: the first bytes of a segment probed for a request start.
	__u8 probe[PROBE_WINDOW];
	// tc.c, benchmarks only (bench_rewind): tracking to put back.
	struct track track;
	struct latency_track lat;
};

// One measured request, for the agent (a latency_slots slot). Times are
// CLOCK_MONOTONIC (bpf_ktime_get_ns). The hole after key is never
// written: it stays zero in every slot.
struct latency_event {
	struct conn_key key;
	struct conn_entities bound; // the connection's entities when it was answered
	__u64 conn_born;
	__u64 first_ns; // the request's first byte arrived
	__u64 last_ns;  // its last byte arrived
	__u64 resp_ns;  // its response's first byte left
	__s32 corr_id;
	__u16 api_key;
	__u16 pad;
	// Kafka size fields (the bytes after each message's 4-byte size) of
	// the request and of the response that answered it. req_size is 0 for
	// a request an earlier agent's data path made pending.
	__u32 req_size;
	__u32 resp_size;
};

// What a bind_request asks of sluice_bind.
#define BIND_OP_BIND 0   // write the connection's entities (entering it if new)
#define BIND_OP_FORGET 1 // remove the connection from its table

// One binding the agent queues for sluice_bind.
struct bind_request {
	struct conn_key key;
	__u32 op; // BIND_OP_*
	struct conn_entities bound;
};

// How many bindings sluice_bind applies per run (the bind_queue's size).
#define BIND_BATCH 1024

// sluice_bind's context: how many queued bindings to apply.
struct bind_args {
	__u32 count;
};

// The flow cache (flowcache.h): slots per CPU and family, a power of two.
#define FLOW_CACHE_BITS 10
#define FLOW_CACHE_SLOTS (1 << FLOW_CACHE_BITS)

// What a cached connection's segments need: its entities, and whether its
// request tracking has anything to do (the state of struct track that
// track_request_starts skips at once).
#define FLOW_TRACK_BUSY 0  // tracking has work pending: segments take the table
#define FLOW_TRACK_QUIET 1 // no request starts before quiet_until
#define FLOW_TRACK_NEVER 2 // attributed by its peer (TLS listener): never tracked

struct flow_view {
	__u64 jiffies;              // the jiffy it was filled in (0 while claimed): valid for that jiffy only
	struct conn_entities bound; // the table entry's entities when filled
	__u32 epoch;                // its slot's flow_epochs count, read before the table
	__u32 quiet_until;          // FLOW_TRACK_QUIET: the entry's next_seq
	__u8 track;                 // FLOW_TRACK_*
	__u8 resp_track;            // FLOW_TRACK_* of response tracking (egress)
	__u8 pad[2];
	__u32 resp_quiet_until;     // resp_track FLOW_TRACK_QUIET: where the next response starts
};

struct flow_entry4 {
	struct conn_key4 key;
	__u32 pad;
	struct flow_view view;
};

struct flow_entry6 {
	struct conn_key key;
	__u32 pad;
	struct flow_view view;
};

// Per CPU: CLOCK_MONOTONIC_COARSE as of the jiffy this CPU last read it.
struct coarse_clock {
	__u64 jiffies;
	__u64 now_ns;
};

// Per entity and direction, per CPU (summed by user space).
struct entity_counters {
	__u64 bytes;        // TCP payload bytes
	__u64 packets;      // segments carrying payload
	__u64 held_bytes;   // bytes a BPF shaper held back (dropped or delayed)
	__u64 held_packets;
};

// Shaper backends the data path knows.
#define SHAPER_NONE 0   // count only (shadow mode, or no shaper)
#define SHAPER_HTB 1    // set skb->priority to the entity's HTB class; ingress via IFB
#define SHAPER_EDT 2    // earliest departure time from the entity's rate (needs fq); ingress via IFB
#define SHAPER_POLICE 3 // token bucket, over-rate segments dropped: a last-resort hard cap
// Fetch (egress) as SHAPER_HTB; produce (ingress) policed in place instead of
// redirected to the IFB, so every later ingress hook (clsact filters,
// nftables netdev ingress) still sees it.
#define SHAPER_HTB_POLICE 4

// The major number of sluice's HTB trees (class ids HTB_MAJOR:minor).
#define HTB_MAJOR 1

// An entity's rate for the BPF shapers (edt, police), written by the agent.
struct entity_rate {
	__u64 bytes_per_sec; // TCP payload bytes/s; 0 = not shaped
};

// edt: the entity's virtual clock, the departure time of its next byte.
// Owned by the data path; rate writes never touch it.
struct edt_clock {
	__u64 next_ns;
};

// police: the entity's token bucket.
struct police_bucket {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 tokens;  // bytes
	__u64 last_ns; // last refill
};

// Live settings, written by the agent every cycle.
struct datapath_settings {
	__u64 heartbeat_ns;   // CLOCK_MONOTONIC of the agent's last cycle
	__u64 stale_after_ns; // older heartbeat: hold nothing back
	__u32 shaper;         // SHAPER_*
	__u32 ifb_ifindex;    // ingress redirect target (htb, edt)
	__u32 samples_per_sec;
	// htb on several interfaces: the IFB every interface's classified
	// egress segments pass through (0: the tree sits on the one device).
	__u32 egress_ifb_ifindex;
	__u64 horizon_ns;     // edt: beyond this delay a segment is dropped
	__u64 ecn_ns;         // edt: beyond this delay an ECN-capable segment is marked CE
	__u64 police_burst;   // police: bucket depth in bytes
};

// One sample slot: a fragment of a request's first bytes. A sample whose
// bytes span segments arrives as several fragments of one request (same
// req_seq, rising frag_off); user space stitches them.
//
// The header is one cache line and slots are whole lines (the mmapable
// array's values start on a page): a 256-byte sample is 5 lines, written
// by one CPU and read by the agent's. Moving those lines is most of what a
// sampled request start costs beyond tracking (docs/measurements.md, data path per
// segment: ~113-122 ns with the slot on the reader's CPU or out of cache,
// ~67 ns with it kept in this CPU's), so the header holds nothing the
// agent can tell itself: the time a fragment was taken is the reader's.
struct sample {
	struct conn_key key;
	__u32 req_seq;              // TCP sequence number of the request's first byte
	__u32 req_len;              // 4 + size of the request, 0 if not known yet
	__u16 frag_off;             // offset of data[0] within the sample (< SAMPLE_MAX), | SAMPLE_CLIENT_ID_CUT
	__u16 len;                  // bytes in data
	__u64 conn_born;            // the connection entry's born
	struct conn_entities bound; // what the entry held when sampled
	__u8 data[SAMPLE_MAX];
};
_Static_assert(__builtin_offsetof(struct sample, data) == 64, "a sample's header is one cache line");
_Static_assert(sizeof(struct sample) % 64 == 0, "sample slots are whole cache lines");

// One CPU's sample ring: slots [tail, head) of its share of sample_slots
// hold fragments the agent has not read yet. Only the data path on that
// CPU writes head (TC programs on one CPU never interleave: they run with
// bottom halves off; were one ever to nest inside another, the worst is a
// garbled sample, and the learner takes every sample as untrusted bytes),
// only the agent writes tail; each on its own cache line, so that the data
// path's stores do not bounce the agent's line. A CPU's latency ring
// (latency_rings, over latency_slots) is the same, written by egress only.
struct sample_ring {
	__u64 head; // fragments published on this CPU (slot head % slots is next)
	__u64 pad_head[7];
	__u64 tail; // fragments the agent has read
	__u64 pad_tail[7];
};

// The agent's entity registry (id -> kind and name), pinned so that a
// restarted agent gives entities the ids the connection table points to.
// The data path never reads it.
#define ENTITY_NAME_MAX 254
struct entity_name {
	__u8 kind;
	__u8 len;
	__u8 name[ENTITY_NAME_MAX];
};

// What a connection proved once and no later request repeats: the SASL
// mechanism and principal of its login (from its handshake until then,
// the mechanism alone: the login cannot be read without it), written by
// the agent only (so a restarted agent still knows who a live connection
// is, or how to read its login). The data path
// drops it when the broker accepts a new connection on the 4-tuple
// (SYN-ACK), so no later connection inherits it.
#define IDENTITY_MECHANISM_MAX 16
#define IDENTITY_USER_MAX 255
struct conn_identity {
	__u8 mechanism[IDENTITY_MECHANISM_MAX]; // NUL-padded
	__u8 user_len;
	__u8 user[IDENTITY_USER_MAX];
};

struct exempt_key {
	__u32 prefixlen; // over addr, v4 as v4-mapped (96 + v4 prefix)
	__u8 addr[16];
};

// A peer on a TLS listener (SSL, SASL_SSL), where no request can be read:
// the listener port (big-endian) then the peer address (v4 as v4-mapped),
// matched longest prefix first. prefixlen 16 is the listener's own entry,
// which every peer of it matches (the listener's fallback entity).
struct peer_key {
	__u32 prefixlen; // over port and addr: 16 + 96 + v4 prefix, or 16 + v6 prefix
	__u8 port[2];
	__u8 addr[16];
	__u8 pad[2];
};

// Data path statistics (per CPU).
enum stat {
	STAT_SAMPLES = 0,      // sample first fragments sent
	STAT_FRAGMENTS,        // continuation fragments sent
	STAT_BUDGET_DROPS,     // request starts not sampled: budget spent
	STAT_RINGBUF_DROPS,    // fragments not sent: the CPU's sample ring was full
	STAT_DESYNCS,          // implausible size at a boundary: lost sync
	STAT_RESYNCS,          // re-synchronised on a plausible header
	STAT_EXEMPT,           // connections marked exempt
	STAT_FAIL_OPEN,        // governed segments passed because the heartbeat is stale
	STAT_EXEMPT_BYTES_PRODUCE, // payload bytes from exempt peers (counted, never held)
	STAT_EXEMPT_BYTES_FETCH,   // payload bytes to exempt peers
	STAT_UNPROVEN,         // segments of connections the broker has not answered yet
	STAT_LATENCY_EVENTS,   // requests measured (latency ring slots published)
	STAT_LATENCY_DROPS,    // measurements lost: the CPU's latency ring was full
	STAT_LATENCY_EXPIRED,  // pending requests given up unanswered (acks=0 produce, lost sync)
	STAT_RESP_DESYNCS,     // implausible response size at a boundary: lost sync
	STAT_RESP_RESYNCS,     // re-synchronised on the pending request's response
	STAT_MAX,
};
