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
// The argument needs every agent to count the same reports under the same
// configuration, and the log does not guarantee either: retention drops
// history, a host is replaced with no state, configurations roll one host at
// a time, an agent's reader stalls. So (docs/cluster-budgets.md §3a): a View
// counts lives, not epochs — a life whose reports have stopped landing for K
// reports of another broker gives way to any other (its process has fallen
// back by then), and epochs start at the wall clock so a later process
// outranks an earlier one at once; every report carries a digest of the
// configuration, and a broker outside it (or not yet seen by a View whose
// history may be truncated) is counted with an allowance of L ÷ members, never
// ignored; only a life already counted can jump rounds, so a View started on
// an emptied log follows the others; and silence is measured from the report
// a broker echoes as seen, with its lease anchored there, so a broker whose
// reports land but who reads nothing is reclaimed like a silent one.
//
// The package is pure: no goroutines, no I/O, no clocks. Time is each agent's
// own monotonic clock, passed in as a time.Duration, and is never compared
// across agents; order comes from the log, epochs and sequence numbers.
package cluster
