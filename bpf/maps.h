//go:build ignore

// Map definitions. Sizes marked "set by the loader" are placeholders that
// maps/ replaces from the configuration before loading.
#pragma once

#include <linux/bpf.h>
#include "include/bpf_helpers.h"
#include "types.h"

// Connection -> entity per direction (bound by the agent, or marked by
// the data path for exempt peers) and request tracking. LRU: a full table
// forgets idle connections.
// One table per address family: IPv4 keys are a third the size.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 262144); // set by the loader
	__type(key, struct conn_key4);
	__type(value, struct conn_state);
} conns4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 262144); // set by the loader
	__type(key, struct conn_key);
	__type(value, struct conn_state);
} conns6 SEC(".maps");

// The flow cache (flowcache.h): per CPU, one slot per connection hash, a
// copy of what the connection table holds for the connection last seen
// there.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FLOW_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct flow_entry4);
} flows4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FLOW_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct flow_entry6);
} flows6 SEC(".maps");

// Shared by all CPUs: per cache slot, how often a connection hashing to it
// was bound, forgotten or replaced. A cached copy filled before the last
// such change is stale.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FLOW_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} flow_epochs SEC(".maps");

// Bindings the agent queues for sluice_bind, which writes them into the
// connection tables without touching the tracking beside them.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BIND_BATCH);
	__type(key, __u32);
	__type(value, struct bind_request);
} bind_queue SEC(".maps");

// See struct coarse_clock.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct coarse_clock);
} coarse_clocks SEC(".maps");

// Broker listener ports: index = local port, value 1 = governed.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} listeners SEC(".maps");

// Peers never governed (other brokers).
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct exempt_key);
	__type(value, __u8);
} exempt SEC(".maps");

// TLS listeners' peers -> the entities of both directions (struct
// peer_key): read once per connection, when it starts.
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct peer_key);
	__type(value, struct conn_entities);
} peer_entities SEC(".maps");

// Counters per (direction * max_entities + entity), per CPU: no increments
// are lost and no cache line is shared between CPUs.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * 65538); // set by the loader
	__type(key, __u32);
	__type(value, struct entity_counters);
} counters SEC(".maps");

// HTB class id per (direction * max_entities + entity); 0 = leave alone.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * 65538); // set by the loader
	__type(key, __u32);
	__type(value, __u32);
} classes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct datapath_settings);
} settings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

// Request samples to the agent: one ring per possible CPU (sample_rings,
// indexed by CPU) over that CPU's run of slots_per_cpu slots here. Both are
// memory-mapped by the agent, which polls them: a fragment costs the data
// path a copy and one atomic store, where a BPF ring buffer's reserve and
// submit take a lock and cost ~50 ns more per request start.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * 256); // set by the loader: CPUs * slots_per_cpu
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sample);
} sample_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2); // set by the loader: possible CPUs
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sample_ring);
} sample_rings SEC(".maps");

// id -> entity, written by the agent only (see struct entity_name).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65538); // set by the loader
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct entity_name);
} entity_names SEC(".maps");

// Per (direction * max_entities + entity): the BPF shapers' rates, edt
// virtual clocks and police buckets.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * 65538); // set by the loader
	__type(key, __u32);
	__type(value, struct entity_rate);
} rates SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * 65538); // set by the loader
	__type(key, __u32);
	__type(value, struct edt_clock);
} clocks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * 65538); // set by the loader
	__type(key, __u32);
	__type(value, struct police_bucket);
} buckets SEC(".maps");

// Connection -> what it proved (struct conn_identity): written by the
// agent, deleted by it when the connection closes and by the data path
// when a new connection takes the 4-tuple. Only connections that began a
// SASL login have an entry (the mechanism from the handshake, then the
// principal), so it is allocated as they do.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144); // set by the loader
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct conn_key);
	__type(value, struct conn_identity);
} identities SEC(".maps");

// Connection -> the hash of a cut sample's client-id in progress (struct
// cut_id). Not pinned: a restart loses at most the samples in progress.
// LRU: at most this many connections' client-ids are hashed at once; an
// entry pushed out loses one sample its hash (the agent then holds that
// request to the unresolved entity).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct conn_key);
	__type(value, struct cut_id);
} cut_ids SEC(".maps");

// See struct scratch.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

// Request latency measurements (latency.h) for the agent, one per measured
// request: at most one pending request per connection, and only sampled
// ones, so the rate is bounded by the sample budget. Published as samples
// are: one ring per possible CPU (latency_rings, struct sample_ring's head
// and tail) over that CPU's run of latency_slots_per_cpu slots here, both
// memory-mapped and polled by the agent. A BPF ring buffer's reserve and
// submit (two helper calls, a lock, a full barrier) made a measured
// response cost as much as a sampled request start, ~30-40 ns more than
// this does (docs/measurements.md).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * 512); // set by the loader: CPUs * latency_slots_per_cpu
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct latency_event);
} latency_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2); // set by the loader: possible CPUs
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct sample_ring);
} latency_rings SEC(".maps");
