// Package shaping is what the agent asks of a shaper backend and the
// values it exchanges with one: each entity's rate and guarantee, and what
// the backend held back. It needs no netlink; the backends that drive the
// kernel's qdiscs (htb, edt, police) are in agent/shaper.
package shaping

import (
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
	// Kind names the backend, and so what the data path does for it.
	Kind() Kind
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
	// last call. The answer is the caller's until its next call (the
	// agent publishes it for status).
	Held(dir maps.Direction) ([]Held, error)
	// Close takes everything the shaper created off the devices.
	Close() error
}

// DefaultPoliceBurst is the police bucket depth: measured here, a 256 KiB
// bucket leaves greedy TCP at a fraction of the rate, 4 MiB reaches it.
const DefaultPoliceBurst = 4 << 20

// ECNThreshold is the edt delay beyond which ECN-capable segments are
// marked: a tenth of the delay bound, so senders that negotiated ECN back
// off long before the horizon drops anything.
func ECNThreshold(delayBound time.Duration) time.Duration { return delayBound / 10 }

// Kind names a shaper backend.
type Kind string

// The backends.
const (
	KindShadow Kind = "shadow" // counts only
	KindHTB    Kind = "htb"    // an HTB class per entity, ingress through an IFB
	KindEDT    Kind = "edt"    // departure times for fq
	KindPolice Kind = "police" // a token bucket per entity in the data path
	// KindHTBPolice: fetch through htb classes, produce policed in place
	// (produce_shaper: police), so later ingress hooks see every segment.
	KindHTBPolice Kind = "htb+police"
)

// DataPathMode is what the data path does with a governed segment while
// this backend holds traffic: nothing for shadow (it counts), else steer
// to a class, stamp a departure time, or police.
func (k Kind) DataPathMode() maps.Shaper {
	switch k {
	case KindHTB:
		return maps.ShaperHTB
	case KindEDT:
		return maps.ShaperEDT
	case KindPolice:
		return maps.ShaperPolice
	case KindHTBPolice:
		return maps.ShaperHTBPolice
	}
	return maps.ShaperNone
}
