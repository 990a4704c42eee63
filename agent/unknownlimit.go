package agent

import (
	"math"

	"github.com/sluice-dev/sluice/allocator"
)

// unknownFloor is the least the unknown entity is held to: a new
// connection's first requests (ApiVersions, a SASL handshake: a few
// hundred bytes) wait at most a few milliseconds at it, even in a shaper
// without a bucket (edt).
const unknownFloor = 64 << 10

// unknownLimit is what the unknown entity (connections no sample has bound
// yet) is held to: the strictest limit in force in the direction, between
// unknownFloor and max(H, min_limit).
//
// Why not H: a client binds at its connection's first sample, which the
// agent reads a little after the data path saw it, and the Java client
// sends its first Produce as soon as ApiVersions is answered. A producer
// held to a small cluster share reconnects whenever a request outlives
// request.timeout.ms, and each new connection's first Produce went at H
// before the sample bound it: on a real three-broker cluster, 0.26 to 3.5
// MB in a second through a broker whose share was 20 kB/s, and the
// tenant's total 9.6 MB/s against a 6 MB/s budget (TestKafkaClusterBudgets).
// Held to the strictest limit any entity has, a reconnect gains nothing
// over the limit it left; what passes before the bind is bounded by the
// floor times the bind's delay and the class's burst.
func unknownLimit(cfg allocator.Config, outputs []allocator.Allocation) float64 {
	strictest := math.Inf(1)
	for i := range outputs {
		if l := outputs[i].DynamicLimit; l > 0 {
			strictest = min(strictest, l)
		}
	}
	return min(cfg.UnknownLimit(), max(unknownFloor, strictest))
}
