//go:build ignore

// Parsing a segment into what the data path needs from it.
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>

#include "include/bpf_endian.h"
#include "include/bpf_helpers.h"
#include "maps.h"
#include "types.h"

// A segment on a listener port. IPv4 connections are keyed by key4 (a
// 12-byte key hashes markedly faster than the 36 bytes IPv6 needs, and the
// connection table lookup is the dearest step per segment); key is filled
// only for IPv6 (conn_key_of builds it for IPv4 when a sample needs it).
struct parsed {
	struct conn_key4 key4;
	struct conn_key key;
	__u32 seq;
	__u32 ack_seq;
	__u32 payload_off; // from skb start
	__u32 payload_len;
	// A whole register, so that the verifier knows it wherever it is read
	// (a byte on the stack it forgets, and walks the other family's code).
	__u64 v6;
	__u8 syn, synack;
	__u8 fin_rst; // TCP_FLAG_FIN and TCP_FLAG_RST bits of the segment (0: neither)
};

// The TCP flags byte's FIN and RST bits, as parsed keeps them.
#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_RST 0x04

static __always_inline void v4_mapped(__u8 *dst, __be32 addr)
{
	__builtin_memset(dst, 0, 10);
	dst[10] = 0xff;
	dst[11] = 0xff;
	__builtin_memcpy(dst + 12, &addr, 4);
}

// conn_key_of writes the segment's connection as user space knows it
// (IPv4 as v4-mapped IPv6).
static __always_inline void conn_key_of(const struct parsed *p, struct conn_key *out)
{
	if (p->v6) {
		__builtin_memcpy(out, &p->key, sizeof(*out));
		return;
	}
	// A word at a time (struct conn_key is 4-aligned): v4_mapped writes
	// bytes, as its other destinations may be unaligned.
	__u32 *peer = (__u32 *)out->peer_addr, *local = (__u32 *)out->local_addr;
	peer[0] = peer[1] = local[0] = local[1] = 0;
	peer[2] = local[2] = bpf_htonl(0xffff);
	peer[3] = p->key4.peer_addr;
	local[3] = p->key4.local_addr;
	out->peer_port = p->key4.peer_port;
	out->local_port = p->key4.local_port;
}

// listener_ports returns the segment's (local, peer) ports when its
// broker-side (local) port is a listener, else 0: the first and cheapest
// test every packet meets.
static __always_inline int listener_ports(struct tcphdr *tcp, int dir, __u16 *local, __u16 *peer)
{
	*local = bpf_ntohs(dir == DIR_PRODUCE ? tcp->dest : tcp->source);
	__u32 port = *local;
	__u8 *governed = bpf_map_lookup_elem(&listeners, &port);
	if (!governed || !*governed)
		return 0;
	*peer = bpf_ntohs(dir == DIR_PRODUCE ? tcp->source : tcp->dest);
	return 1;
}

// parse fills p for a TCP segment on a listener port, or returns 0.
static __always_inline int parse(struct __sk_buff *skb, int dir, struct parsed *p)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return 0;
	struct tcphdr *tcp;
	__u32 l3_len;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) > data_end || ip->protocol != IPPROTO_TCP)
			return 0;
		l3_len = ip->ihl * 4;
		if (l3_len < sizeof(*ip))
			return 0;
		tcp = (void *)ip + l3_len;
		if ((void *)(tcp + 1) > data_end)
			return 0;
		if (!listener_ports(tcp, dir, &p->key4.local_port, &p->key4.peer_port))
			return 0;
		p->v6 = 0;
		p->key4.peer_addr = dir == DIR_PRODUCE ? ip->saddr : ip->daddr;
		p->key4.local_addr = dir == DIR_PRODUCE ? ip->daddr : ip->saddr;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		// Extension headers before TCP are not followed (rare on Kafka traffic).
		if ((void *)(ip6 + 1) > data_end || ip6->nexthdr != IPPROTO_TCP)
			return 0;
		l3_len = sizeof(*ip6);
		tcp = (void *)(ip6 + 1);
		if ((void *)(tcp + 1) > data_end)
			return 0;
		if (!listener_ports(tcp, dir, &p->key.local_port, &p->key.peer_port))
			return 0;
		p->v6 = 1;
		__builtin_memcpy(p->key.peer_addr, dir == DIR_PRODUCE ? &ip6->saddr : &ip6->daddr, 16);
		__builtin_memcpy(p->key.local_addr, dir == DIR_PRODUCE ? &ip6->daddr : &ip6->saddr, 16);
	} else {
		return 0;
	}
	__u32 headers = sizeof(*eth) + l3_len + tcp->doff * 4;
	if (skb->len < headers)
		return 0;
	p->payload_off = headers;
	p->payload_len = skb->len - headers;
	p->seq = bpf_ntohl(tcp->seq);
	p->ack_seq = bpf_ntohl(tcp->ack_seq);
	p->syn = tcp->syn && !tcp->ack;
	p->synack = tcp->syn && tcp->ack;
	p->fin_rst = ((const __u8 *)tcp)[13] & (TCP_FLAG_FIN | TCP_FLAG_RST);
	return 1;
}
