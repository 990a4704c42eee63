package agent

import "github.com/sluice-dev/sluice/allocator"

// unknownFloor is the least the unknown entity is held to: a new
// connection's first requests (ApiVersions, a SASL handshake: a few
// hundred bytes) wait at most a few milliseconds at it, even in a shaper
// without a bucket (edt).
const unknownFloor = 64 << 10

// unknownLimit is what the unknown entity (connections no sample has bound
// yet) is held to: the strictest limit in force in the direction (the
// least dynamic limit, folded by stricter), between unknownFloor and
// max(H, min_limit).
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
func unknownLimit(cfg allocator.Config, strictest float64) float64 {
	return min(cfg.UnknownLimit(), max(unknownFloor, strictest))
}

// stricter folds one entity's dynamic limit into the strictest so far
// (start from +Inf): a zero is no allocation, not a limit. The cycle folds
// them in the loop that builds the shaper's targets, not in a pass of its
// own.
func stricter(strictest, limit float64) float64 {
	if limit > 0 {
		return min(strictest, limit)
	}
	return strictest
}
