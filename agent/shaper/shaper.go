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
