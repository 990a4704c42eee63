//go:build ignore

// TC programs of the sluice data path, attached to each configured
// interface: sluice_ingress (bytes the broker receives: produce) and
// sluice_egress (bytes it sends: fetch).
//
// Per packet: classify (IPv4/IPv6 TCP on a broker listener port, peer not
// exempt; everything else passes at once), attribute the connection to its
// entity (unknown until the agent binds it), count payload bytes per entity
// and direction, follow Kafka request boundaries on ingress and sample
// request headers, and, while the agent's heartbeat is fresh, hand the
// packet to the shaper. A stale heartbeat holds nothing back (fail open).
// O(1) map operations per packet, no loop over entities, no lock shared by
// all CPUs; most segments find their connection in this CPU's flow cache
// (flowcache.h) instead of the connection table.

#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#include "include/bpf_helpers.h"
#include "bind.h"
#include "clock.h"
#include "flowcache.h"
#include "kafka.h"
#include "maps.h"
#include "packet.h"
#include "types.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

// Entities per direction; counters and classes hold 2 * max_entities.
volatile const __u32 max_entities = 65538;

// Passing with TC_ACT_UNSPEC lets programs and filters after ours run
// (TCX_NEXT); TC_ACT_OK would end the chain for everyone.
#define PASS TC_ACT_UNSPEC

// is_exempt looks the segment's peer up in the exempt CIDRs.
static __always_inline int is_exempt(const struct parsed *p)
{
	struct exempt_key k = {.prefixlen = 128};
	if (p->v6)
		__builtin_memcpy(k.addr, p->key.peer_addr, 16);
	else
		v4_mapped(k.addr, p->key4.peer_addr);
	return bpf_map_lookup_elem(&exempt, &k) != NULL;
}

// peer_decision looks a TLS listener's peer up: the entities of its
// longest matching prefix, or of the listener's own entry; NULL on a
// listener that is not TLS (its connections are learned from requests).
static __always_inline struct conn_entities *peer_decision(const struct parsed *p)
{
	struct peer_key k = {.prefixlen = 16 + 128};
	__u16 port = p->v6 ? p->key.local_port : p->key4.local_port;
	k.port[0] = port >> 8;
	k.port[1] = port & 0xff;
	if (p->v6)
		__builtin_memcpy(k.addr, p->key.peer_addr, 16);
	else
		v4_mapped(k.addr, p->key4.peer_addr);
	return bpf_map_lookup_elem(&peer_entities, &k);
}

static __always_inline void count_held(struct entity_counters *c, __u32 len)
{
	if (c) {
		c->held_bytes += len;
		c->held_packets++;
	}
}

// edt stamps the segment with its departure time on the entity's virtual
// clock: the clock advances by len / rate per segment, so fq releases the
// entity's segments at its rate. Beyond the horizon the segment is dropped
// (TCP backs off); beyond the ECN threshold an ECN-capable one is marked.
// Delayed and dropped segments count as held back.
static __always_inline int edt(struct __sk_buff *skb, int dir, __u32 slot, __u32 len,
			       struct datapath_settings *cfg, struct entity_counters *c)
{
	struct entity_rate *rate = bpf_map_lookup_elem(&rates, &slot);
	struct edt_clock *clock = bpf_map_lookup_elem(&clocks, &slot);
	if (!rate || !clock || !rate->bytes_per_sec)
		return PASS;
	__u64 now = bpf_ktime_get_ns();
	__u64 next = clock->next_ns;
	if (next < now)
		next = now;
	__u64 wait = next - now;
	if (wait > cfg->horizon_ns) {
		count_held(c, len);
		return TC_ACT_SHOT;
	}
	// Racing CPUs may both read the same clock: the entity then sends a
	// little early, never late, and nobody waits on a lock.
	clock->next_ns = next + (__u64)len * 1000000000ull / rate->bytes_per_sec;
	if (wait) {
		count_held(c, len);
		if (wait > cfg->ecn_ns)
			bpf_skb_ecn_set_ce(skb);
	}
	// A delivery time on the monotonic clock, said so: written at ingress
	// as a plain skb->tstamp it is taken for a receive time and cleared on
	// the redirect to the IFB, so fq there would never see it (a probe on
	// the IFB measured tstamp 0; test/datapath TestEDTIngress…).
	bpf_skb_set_tstamp(skb, next, BPF_SKB_TSTAMP_DELIVERY_MONO);
	if (dir == DIR_PRODUCE)
		return bpf_redirect(cfg->ifb_ifindex, 0);
	return PASS;
}

// police drops what exceeds the entity's token bucket: a hard cap that
// needs no qdisc, and costs greedy TCP retransmissions (a last resort).
static __always_inline int police(__u32 slot, __u32 len, struct datapath_settings *cfg,
				  struct entity_counters *c)
{
	struct entity_rate *rate = bpf_map_lookup_elem(&rates, &slot);
	struct police_bucket *b = bpf_map_lookup_elem(&buckets, &slot);
	if (!rate || !b || !rate->bytes_per_sec)
		return PASS;
	__u64 now = bpf_ktime_get_ns();
	int ok;
	bpf_spin_lock(&b->lock);
	__u64 elapsed = now - b->last_ns;
	if (elapsed > 1000000000ull)
		elapsed = 1000000000ull;
	__u64 tokens = b->tokens + elapsed * rate->bytes_per_sec / 1000000000ull;
	if (tokens > cfg->police_burst)
		tokens = cfg->police_burst;
	b->last_ns = now;
	ok = tokens >= len;
	b->tokens = ok ? tokens - len : tokens;
	bpf_spin_unlock(&b->lock);
	if (ok)
		return PASS;
	count_held(c, len);
	return TC_ACT_SHOT;
}

// steer_to_class points the segment at the entity's HTB class; 0 when
// the entity has none (it passes unshaped).
static __always_inline int steer_to_class(struct __sk_buff *skb, __u32 slot)
{
	__u32 *classid = bpf_map_lookup_elem(&classes, &slot);
	if (!classid || !*classid)
		return 0;
	skb->priority = *classid;
	return 1;
}

// account counts a segment of the entity and hands it to the shaper.
static __always_inline int account(struct __sk_buff *skb, int dir, const struct parsed *p, __u32 entity)
{
	// Pure ACKs and SYN/FIN/RST without payload pass at once: holding back
	// one direction's ACKs would throttle the other.
	if (!p->payload_len || entity == ENTITY_NOT_GOVERNED)
		return PASS;
	if (entity >= max_entities)
		entity = ENTITY_UNKNOWN;
	__u32 slot = (dir & 1) * max_entities + entity;
	struct entity_counters *c = bpf_map_lookup_elem(&counters, &slot);
	if (c) {
		c->bytes += p->payload_len;
		c->packets++;
	}

	__u32 zero = 0;
	struct datapath_settings *cfg = bpf_map_lookup_elem(&settings, &zero);
	if (!cfg || cfg->shaper == SHAPER_NONE)
		return PASS;
	// Fail open: a dead agent never throttles a broker.
	if ((__s64)(coarse_now() - cfg->heartbeat_ns) > (__s64)cfg->stale_after_ns) {
		stat_inc(STAT_FAIL_OPEN);
		return PASS;
	}
	switch (cfg->shaper) {
	case SHAPER_HTB:
		if (!steer_to_class(skb, slot))
			return PASS;
		if (dir == DIR_PRODUCE)
			return bpf_redirect(cfg->ifb_ifindex, 0);
		return PASS;
	case SHAPER_HTB_POLICE:
		if (dir == DIR_PRODUCE)
			return police(slot, p->payload_len, cfg, c);
		steer_to_class(skb, slot);
		return PASS;
	case SHAPER_EDT:
		return edt(skb, dir, slot, p->payload_len, cfg, c);
	case SHAPER_POLICE:
		return police(slot, p->payload_len, cfg, c);
	}
	return PASS;
}

// conn_lookup and conn_update use the segment's family's connection table.
// Each map must keep a call site of its own: the verifier inlines a lookup
// only where one map reaches the call, and clang would otherwise merge the
// two calls into one. The distinct empty asm statements stop that.
#define ONE_MAP_PER_CALL(tag) asm volatile("# " tag)

static __always_inline struct conn_state *conn_lookup(const struct parsed *p)
{
	struct conn_state *st;
	if (p->v6) {
		st = bpf_map_lookup_elem(&conns6, &p->key);
		ONE_MAP_PER_CALL("conns6");
	} else {
		st = bpf_map_lookup_elem(&conns4, &p->key4);
		ONE_MAP_PER_CALL("conns4");
	}
	return st;
}

static __always_inline long conn_update(const struct parsed *p, const struct conn_state *v, __u64 flags)
{
	long err;
	if (p->v6) {
		err = bpf_map_update_elem(&conns6, &p->key, v, flags);
		ONE_MAP_PER_CALL("conns6");
	} else {
		err = bpf_map_update_elem(&conns4, &p->key4, v, flags);
		ONE_MAP_PER_CALL("conns4");
	}
	return err;
}

static __always_inline void conn_delete(const struct parsed *p)
{
	if (p->v6) {
		bpf_map_delete_elem(&conns6, &p->key);
		ONE_MAP_PER_CALL("conns6");
	} else {
		bpf_map_delete_elem(&conns4, &p->key4);
		ONE_MAP_PER_CALL("conns4");
	}
}

// count_exempt adds an exempt peer's payload to its direction's total:
// replication is never held back, but operators see how much of the NIC
// it takes.
static __always_inline void count_exempt(int dir, __u32 len)
{
	__u32 which = dir == DIR_PRODUCE ? STAT_EXEMPT_BYTES_PRODUCE : STAT_EXEMPT_BYTES_FETCH;
	__u64 *v = bpf_map_lookup_elem(&stats, &which);
	if (v)
		*v += len;
}

// conn_start enters a connection into its table when the broker's own
// segment (egress, neither SYN nor RST nor FIN) proves that the kernel
// holds an established socket for it: a spoofed SYN or a stray segment
// never gets that far, so it cannot push live connections out of the LRU
// table. An exempt peer is marked not governed (once, so later segments
// skip the trie); any other starts unbound until the agent learns its
// entity, with request tracking placed where the broker's acknowledgement
// says the client's stream stands (if that lands inside a request, the
// tracking re-synchronises on the next plausible header). On a TLS
// listener no request can be read: the peer decides the entities here,
// once, and nothing is tracked. It returns 1 for an exempt peer.
static __always_inline int conn_start(const struct parsed *p)
{
	struct conn_state fresh = {};
	fresh.born = coarse_now();
	int exempt = is_exempt(p);
	struct conn_entities *by_peer;
	if (exempt) {
		fresh.bound.entity[0] = fresh.bound.entity[1] = ENTITY_NOT_GOVERNED;
	} else if ((by_peer = peer_decision(p))) {
		fresh.bound = *by_peer;
		fresh.track.by_peer = 1;
	} else {
		fresh.track.next_seq = p->ack_seq;
		fresh.track.synced = 1;
	}
	if (conn_update(p, &fresh, BPF_NOEXIST) == 0 && exempt)
		stat_inc(STAT_EXEMPT);
	return exempt;
}

// from_egress_ifb: a segment the shared egress IFB sends back out of its
// interface after its tree held it (htb on several interfaces). It was
// counted and classified on its first pass; its class id is cleared so
// that the device's own root qdisc (priomap bands) does not read it.
static __always_inline int from_egress_ifb(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct datapath_settings *cfg = bpf_map_lookup_elem(&settings, &zero);
	if (!cfg || !cfg->egress_ifb_ifindex || skb->ingress_ifindex != cfg->egress_ifb_ifindex)
		return 0;
	skb->priority = 0;
	return 1;
}

// attributed counts and shapes a segment of a connection whose entry holds
// bound.
static __always_inline int attributed(struct __sk_buff *skb, int dir, const struct parsed *p,
				      struct conn_entities bound)
{
	__u32 entity = bound.entity[dir & 1];
	if (entity == ENTITY_NOT_GOVERNED && bound.entity[(dir + 1) & 1] == ENTITY_NOT_GOVERNED) {
		// An exempt peer (only the data path marks both directions so).
		count_exempt(dir, p->payload_len);
		return PASS;
	}
	return account(skb, dir, p, entity);
}

// tracked tells whether a segment is one request tracking follows: the
// client's payload on a governed connection.
static __always_inline int tracked(int dir, const struct parsed *p, __u32 entity)
{
	return dir == DIR_PRODUCE && p->payload_len && entity != ENTITY_NOT_GOVERNED;
}

// responses_tracked tells whether a segment is one response tracking
// follows (latency.h): the broker's payload on a connection that is not an
// exempt peer's.
static __always_inline int responses_tracked(int dir, const struct parsed *p, struct conn_entities bound)
{
	return dir == DIR_FETCH && p->payload_len &&
	       !(bound.entity[0] == ENTITY_NOT_GOVERNED && bound.entity[1] == ENTITY_NOT_GOVERNED);
}

// cache_answers tells whether this CPU's cached copy of the connection is
// all a segment needs: no request or response tracking work lies in it.
static __always_inline int cache_answers(int dir, const struct parsed *p, const struct flow_view *v)
{
	__u32 end = p->seq + p->payload_len;
	if (dir == DIR_FETCH)
		return !responses_tracked(dir, p, v->bound) || v->resp_track == FLOW_TRACK_NEVER ||
		       (v->resp_track == FLOW_TRACK_QUIET && !seq_before(v->resp_quiet_until, end));
	return !tracked(dir, p, v->bound.entity[dir & 1]) || v->track == FLOW_TRACK_NEVER ||
	       (v->track == FLOW_TRACK_QUIET && !seq_before(v->quiet_until, end));
}

// Entities that send a segment to the unknown entity, or pass it as an
// exempt peer's.
#define UNKNOWN_ENTITIES ((struct conn_entities){{ENTITY_UNKNOWN, ENTITY_UNKNOWN}})
#define EXEMPT_ENTITIES ((struct conn_entities){{ENTITY_NOT_GOVERNED, ENTITY_NOT_GOVERNED}})

// synchronized tells whether a socket in state takes a RST only at exactly
// its rcv_nxt (RFC 5961): every state after the handshake in which it
// still receives.
static __always_inline int synchronized(__u32 state)
{
	return state == BPF_TCP_ESTABLISHED || state == BPF_TCP_FIN_WAIT1 || state == BPF_TCP_FIN_WAIT2 ||
	       state == BPF_TCP_CLOSE_WAIT || state == BPF_TCP_CLOSING || state == BPF_TCP_LAST_ACK;
}

// broker_expects tells whether the broker's socket for the segment's
// connection (in the namespace of the device the segment came in on) is
// synchronized and expects seq as its next byte (rcv_nxt). A lookup that
// finds the listener instead (no such connection) is no. A global function:
// the verifier checks it once, on its own, instead of walking the lookup's
// stack (the tuple) into every path after it.
__noinline int broker_expects(struct __sk_buff *skb, const struct parsed *p, __u32 seq)
{
	if (!p)
		return 0;
	struct bpf_sock_tuple tuple = {};
	__u32 size;
	if (p->v6) {
		__builtin_memcpy(tuple.ipv6.saddr, p->key.peer_addr, 16);
		__builtin_memcpy(tuple.ipv6.daddr, p->key.local_addr, 16);
		tuple.ipv6.sport = bpf_htons(p->key.peer_port);
		tuple.ipv6.dport = bpf_htons(p->key.local_port);
		size = sizeof(tuple.ipv6);
	} else {
		tuple.ipv4.saddr = p->key4.peer_addr;
		tuple.ipv4.daddr = p->key4.local_addr;
		tuple.ipv4.sport = bpf_htons(p->key4.peer_port);
		tuple.ipv4.dport = bpf_htons(p->key4.local_port);
		size = sizeof(tuple.ipv4);
	}
	struct bpf_sock *sk = bpf_sk_lookup_tcp(skb, &tuple, size, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	int expects = 0;
	if (synchronized(sk->state)) {
		struct bpf_tcp_sock *tp = bpf_tcp_sock(sk);
		expects = tp && tp->rcv_nxt == seq;
	}
	bpf_sk_release(sk);
	return expects;
}

// ends_connection tells whether a FIN or RST ends the connection (the
// agent then reclaims its entry). The broker's own segments (egress) come
// from its kernel: they do. A client's FIN is answered by the broker's own
// FIN, which is the one counted. A client's RST counts only where the
// broker's kernel takes it: Linux acts on a RST only at exactly the next
// byte it expects (rcv_nxt, RFC 5961) and answers any other with a
// challenge ACK. Two views of that byte must agree with the RST's:
//   - request tracking's: the client's stream stands exactly there, at a
//     request start that following its payload reached (stream_stands_at,
//     kafka.h). It alone is not enough: segments the shaper holds back (at
//     the IFB) have gone by this hook but reach the socket after a RST,
//     which passes at once;
//   - the broker's socket's (broker_expects). It alone is not enough
//     either: segments that went by this hook just before the RST may not
//     have reached the socket yet (one NAPI batch goes through this hook
//     before TCP sees any of it), and would move rcv_nxt past the RST.
// Where both agree, every byte that went by this hook before the RST has
// reached the socket, so the socket takes the RST: an off-path host must
// guess the exact 32-bit number, and a client cannot end its entry while
// its socket lives on.
// The socket is looked up only for a RST that passes the first test. A RST
// that is not counted (mid-request, before any payload, on a stream not
// followed or whose socket another namespace holds) changes nothing: the
// connection then ends by the broker's own FIN or RST, or leaves the LRU
// table.
static __always_inline int ends_connection(struct __sk_buff *skb, int dir, const struct parsed *p,
					   const struct conn_state *st)
{
	if (dir == DIR_FETCH)
		return 1;
	return (p->fin_rst & TCP_FLAG_RST) && stream_stands_at(st, p->seq) && broker_expects(skb, p, p->seq);
}

// identity_forget drops what an earlier connection on the segment's
// 4-tuple proved (struct conn_identity).
static __always_inline void identity_forget(const struct parsed *p)
{
	struct conn_key k;
	conn_key_of(p, &k);
	bpf_map_delete_elem(&identities, &k);
}

// from_table finds the segment's connection in the connection table
// (entering it when the broker's segment proves it), follows its requests,
// refreshes this CPU's cached copy, and returns its entities.
static __always_inline struct conn_entities from_table(struct __sk_buff *skb, int dir, const struct parsed *p)
{
	struct conn_state *st = conn_lookup(p);
	if (!st) {
		if (dir == DIR_PRODUCE || p->fin_rst) {
			// Not proven yet (the client's first request, before the broker
			// answers), or a stray segment: counted, never entered.
			if (is_exempt(p))
				return EXEMPT_ENTITIES;
			stat_inc(STAT_UNPROVEN);
			return UNKNOWN_ENTITIES;
		}
		if (conn_start(p))
			return EXEMPT_ENTITIES;
		st = conn_lookup(p);
		if (!st)
			return UNKNOWN_ENTITIES;
	}
	if (p->fin_rst && ends_connection(skb, dir, p, st))
		st->track.closing = 1;

	struct conn_entities bound = st->bound; // one load: both directions agree
	// Benchmarks only: the tracking state to put back after the run, kept
	// in this CPU's scratch rather than on the stack (its frame and those
	// of the functions it calls must fit 512 bytes together).
	struct scratch *saved = NULL;
	if (bench_rewind) {
		__u32 zero = 0;
		saved = bpf_map_lookup_elem(&scratch, &zero);
	}
	if (tracked(dir, p, bound.entity[dir & 1]) && !st->track.by_peer) {
		if (saved) {
			__builtin_memcpy(&saved->track, &st->track, sizeof(saved->track));
			__builtin_memcpy(&saved->lat, &st->lat, sizeof(saved->lat));
		}
		track_request_starts(skb, p, st);
		if (saved) {
			__builtin_memcpy(&st->track, &saved->track, sizeof(saved->track));
			__builtin_memcpy(&st->lat, &saved->lat, sizeof(saved->lat));
		}
	} else if (responses_tracked(dir, p, bound) && !st->track.by_peer) {
		if (saved)
			__builtin_memcpy(&saved->lat, &st->lat, sizeof(saved->lat));
		track_response_starts(skb, p, st);
		if (saved)
			__builtin_memcpy(&st->lat, &saved->lat, sizeof(saved->lat));
	}
	flow_fill(p, st);
	return bound;
}

static __always_inline int handle(struct __sk_buff *skb, int dir)
{
	// Not zeroed: parse writes every field the segment's family reads, and
	// ungoverned packets should not pay for clearing it.
	struct parsed p;
	if (!parse(skb, dir, &p))
		return PASS;
	if (dir == DIR_FETCH && skb->ingress_ifindex && from_egress_ifb(skb))
		return PASS;

	// The handshake creates nothing: a SYN proves no peer. The broker's
	// SYN-ACK says its kernel took a new connection on this 4-tuple, so
	// whatever an earlier connection on it left is stale.
	if (p.syn)
		return PASS;
	if (p.synack) {
		if (dir == DIR_FETCH) {
			conn_delete(&p);
			identity_forget(&p);
			flow_bump(flow_slot(&p));
		}
		return PASS;
	}

	// Most segments: this CPU's cached copy of the connection's entry
	// answers, unless request tracking has work at this segment. Every path
	// ends in the one attributed() below, which the verifier then walks
	// once per distinct state rather than once per path.
	struct flow_view *v = p.fin_rst ? NULL : flow_find(&p);
	struct conn_entities bound;
	if (v && cache_answers(dir, &p, v))
		bound = v->bound;
	else
		bound = from_table(skb, dir, &p);
	return attributed(skb, dir, &p, bound);
}

SEC("tc")
int sluice_ingress(struct __sk_buff *skb)
{
	return handle(skb, DIR_PRODUCE);
}

SEC("tc")
int sluice_egress(struct __sk_buff *skb)
{
	return handle(skb, DIR_FETCH);
}

// sluice_egress_select steers classified egress segments to the shared
// egress IFB when htb drives several interfaces: one tree per direction
// for the whole host, so an entity's connections on different interfaces
// share one class and one ceiling. It runs as a classic cls_bpf filter (not
// direct action) after sluice_egress, whose skb->priority it reads: a
// nonzero return is a match, and the filter's mirred action moves the
// segment to the IFB. A BPF redirect cannot do this: the IFB sends back
// only what names the device it came from (skb_iif), which mirred sets and
// bpf_redirect does not.
SEC("tc")
int sluice_egress_select(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct datapath_settings *cfg = bpf_map_lookup_elem(&settings, &zero);
	if (!cfg || (cfg->shaper != SHAPER_HTB && cfg->shaper != SHAPER_HTB_POLICE) || !cfg->egress_ifb_ifindex)
		return 0;
	if (skb->ingress_ifindex == cfg->egress_ifb_ifindex)
		return 0; // its second pass, on its way out
	return (skb->priority >> 16) == HTB_MAJOR ? -1 : 0;
}

// Types user space reads but no program names by value: referenced here so
// that their BTF is emitted and bpf2go generates Go types for them.
const struct sample *unused_sample __attribute__((unused));
const enum stat *unused_stat __attribute__((unused));
const struct entity_name *unused_entity_name __attribute__((unused));
const struct conn_identity *unused_conn_identity __attribute__((unused));
const struct latency_event *unused_latency_event __attribute__((unused));
