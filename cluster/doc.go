// Package cluster computes cluster-wide bandwidth budgets (issue #35): a
// cluster entity's limit and reservation hold across every broker, and each
// broker host's agent enforces its own share of them.
//
// The coordination is leaderless and deterministic. Every agent publishes a
// Report each cycle to one ordered log (a single-partition Kafka topic in
// production, a slice in cluster/sim) and reads everyone's. A View is a pure
// function of a prefix of that log: every agent that has read to the same
// offset holds the same View and computes the same Targets with Shares. Each
// agent applies only its own target, lowering at once and raising only after
// every other live broker has reported a share at or below its target for
// that round, so the shares applied across the cluster never sum above the
// limit, not even while they move (docs/cluster-budgets.md has the argument
// and the bound in each failure case).
//
// The package is pure: no goroutines, no I/O, no clocks. Time is each agent's
// own monotonic clock, passed in as a time.Duration, and is never compared
// across agents; order comes from the log, epochs and sequence numbers.
package cluster
