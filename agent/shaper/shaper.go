// Package shaper holds each entity to the rate the control loop decided.
// The data path decides which entity a packet belongs to; a shaper backend
// holds packets to the entity's rate. Backends: htb (an HTB class per
// entity, ingress through an IFB device; works on every kernel) and shadow
// (count only). Rates are TCP payload bytes per second, what Kafka's
// BytesIn/BytesOut count; backends compensate for header overhead.
package shaper

import (
	"math"
	"time"

	"github.com/sluice-dev/sluice/maps"
)

// Rate is an entity's rate in one direction, in payload bytes per second;
// +Inf removes any hold on the entity. Guaranteed is what the entity may
// always send, even while others take the rest (its effective reservation);
// a backend with a hierarchy (htb) gives it first, from the direction's
// capacity, between control cycles. 0 guarantees nothing.
type Rate struct {
	Entity         uint32
	BytesPerSecond float64
	Guaranteed     float64
}

// Held is what a shaper held back of an entity since the last call.
type Held struct {
	Entity uint32
	// Throttled: the shaper delayed or dropped some of the entity's bytes
	// since the last call (its measured use understates its demand).
	Throttled bool
	// Backlog is the bytes queued now; Delay the time they will wait.
	Backlog uint64
	Delay   time.Duration
	// Dropped counts packets dropped beyond the delay bound since the last call.
	Dropped uint64
	// Sent is every byte the shaper has let through for the entity, in
	// payload bytes as its rates are (link-layer bytes converted back as
	// wireRate converts rates), or 0 where the backend cannot tell. Unlike
	// the data path's counters, which see segments before the shaper, it
	// leaves out what was dropped (so a retransmitted segment counts once).
	Sent uint64
}

// Shaper is what the agent drives every cycle.
type Shaper interface {
	// Kind names the backend ("htb", "shadow").
	Kind() string
	// SetRates sets many entities' rates in one direction at once,
	// creating what an entity needs on first use.
	SetRates(dir maps.Direction, rates []Rate) error
	// SetCapacity caps the direction's governed traffic as a whole (payload
	// bytes per second; +Inf: no cap): every entity borrows what others
	// leave from it, after the guarantees. Backends without a hierarchy
	// (police, edt, shadow) hold each entity alone and ignore it.
	SetCapacity(dir maps.Direction, bytesPerSecond float64) error
	// Remove releases an entity (reclaimed by the registry).
	Remove(dir maps.Direction, entity uint32) error
	// Held reports, per entity with a rate, what was held back since the
	// last call.
	Held(dir maps.Direction) ([]Held, error)
	// Close takes everything the shaper created off the devices.
	Close() error
}

// ClassWriter is the data path's entity → class table (maps.Datapath).
type ClassWriter interface {
	SetClass(dir maps.Direction, entity uint32, classID uint32) error
	// Classes lists a direction's entities that have a class (a restarted
	// agent adopts the tree they point into).
	Classes(dir maps.Direction) (map[uint32]uint32, error)
	// ClearClasses unsets every entity's class (a tree built anew).
	ClearClasses() error
}

var _ ClassWriter = (*maps.Datapath)(nil)

// Header overhead per full-size TCP segment that link-layer shapers count
// and payload rates do not: Ethernet 14, IPv4 20, TCP 20 + 12 of
// timestamps. A 1448-byte payload rides in a 1514-byte frame.
const (
	segmentOverhead = 14 + 20 + 32
	fullPayload     = 1448
)

// wireRate converts a payload rate to the link-layer rate a qdisc enforces.
func wireRate(payload float64) float64 {
	return payload * (fullPayload + segmentOverhead) / fullPayload
}

// payloadBytes converts link-layer bytes a qdisc counted back to payload,
// the inverse of wireRate.
func payloadBytes(wire uint64) uint64 {
	return wire * fullPayload / (fullPayload + segmentOverhead)
}

// queueBytes sizes an entity's queue from its wire rate and the delay
// bound, so no packet waits longer than the bound; it never drops below
// two GSO super-packets, which would drop everything a fast flow sends.
func queueBytes(wire float64, delay time.Duration) uint32 {
	const floor = 2 * 64 << 10
	b := wire * delay.Seconds()
	return uint32(math.Min(math.Max(b, floor), math.MaxUint32/2))
}
