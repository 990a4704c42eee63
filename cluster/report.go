package cluster

import (
	"math"
	"time"
)

// Report is what one agent publishes each cycle. Its order in the log, its
// broker's epoch and its sequence number decide what it replaces; nothing in
// it is a wall-clock time.
type Report struct {
	// Cluster must equal Config.Cluster; otherwise the report is foreign.
	Cluster string
	// Broker is the reporting broker's id.
	Broker BrokerID
	// Epoch (≥ 1) grows with each start of the broker's agent; a report of
	// an older epoch is fenced.
	Epoch uint64
	// Instance is chosen at random by each agent process: two processes
	// reporting one broker id in one epoch are told apart by it.
	Instance uint64
	// Boot identifies the host's boot; SentAt is only comparable within it.
	Boot uint64
	// SentAt is the sender's own monotonic clock when it sent the report. No
	// other agent reads it: the sender's successor uses it, after a restart
	// without state on disk, to learn when its lease started.
	SentAt time.Duration
	// Seq (≥ 1) grows by one per report within an epoch.
	Seq uint64
	// Round (≥ 1) is the sender's round counter: on a periodic report
	// max(its last + 1, the highest round it has read). The first report of
	// a higher round in the log closes the rounds before it.
	Round uint64
	// Processed is the latest round whose targets the sender has computed
	// and lowered to; 0 for none. It promises that the sender's share is at
	// most its round-Processed target and that it will raise only to the
	// target of that round or a later one. Others may raise to their
	// round-r targets only once every live broker reports Processed ≥ r.
	Processed uint64
	// Ack marks a report sent at once on computing a round's targets, so
	// that others can raise within a round instead of a period later. Acks
	// keep the round (they close none) and are not counted when others
	// measure a broker's silence: only the periodic reports are paced.
	Ack bool
	// Digest is the sender's Config.Digest: membership and every parameter
	// the shares depend on except the budgets, which travel per entity. A
	// report whose digest differs from the reader's is from a broker
	// outside the reader's budget: counted, with an allowance, never split.
	// 0: not carried (versions 1 and 2): the reader assumes its own.
	Digest uint64
	// Members is the number of brokers in the sender's configuration: a
	// reader with outsiders splits over at least this many.
	Members uint32
	// Echo is the Seq of the newest report of its own life the sender had
	// seen land when it sent this one (0 for none yet), and EchoSent that
	// report's SentAt. The sender's lease runs from EchoSent of its newest
	// landed report; others measure its silence from the landing of its
	// echoed report, so an agent whose reports land but who reads nothing
	// (deaf) is reclaimed like a silent one. Versions 1 and 2 carry
	// neither: the report counts as its own echo (the rule before).
	Echo     uint64
	EchoSent time.Duration
	// Entities carries one entry per configured entity, in config order.
	Entities []EntityReport
	// Version is the wire format the report came in (UnmarshalReport) or
	// is to be sent in (MarshalReport; 0: the newest). An agent writes the
	// oldest version a live broker of its last round wrote, so that a
	// rolling upgrade never makes a broker unreadable, and so silent, to
	// the brokers not yet upgraded.
	Version uint8
}

// EntityReport is one cluster entity's state on the reporting broker.
type EntityReport struct {
	// Entity is the entity's ID.
	Entity string
	// Usage is the measured rate in bytes/s.
	Usage float64
	// Applied is the share (bytes/s) the broker's data path enforces now.
	Applied float64
	// Limit and Reservation are the cluster budget as the sender knows it
	// now (its configuration, or Kafka's quota store read on its host):
	// a round's shares split the smallest limit and reservation of its
	// live brokers' reports, so that every agent splits the same budget
	// and, while a change spreads, the smaller of the old and the new.
	// Version 1 reports carry neither: a View takes its own
	// configuration's.
	Limit, Reservation float64
	// Led is the number of the entity's partitions this broker leads, from
	// its own broker's metadata. Leadership enters the computation through
	// reports so that every agent uses the same numbers.
	Led uint32
	// HeldBack is set when the data path held some of the entity's bytes
	// back in the cycle: Usage then understates its demand.
	HeldBack bool
}

// Verdict is what a View did with a report.
type Verdict uint8

const (
	// Accepted: the report is its broker's newest and counts.
	Accepted Verdict = iota
	// Duplicate: the same (epoch, seq) was already accepted (redelivery).
	Duplicate
	// Stale: an older sequence number of the current epoch (reordered).
	Stale
	// Fenced: an older epoch of the broker (a previous life's late report).
	Fenced
	// Conflict: the broker's current epoch belongs to another agent
	// process: two agents claim one broker id.
	Conflict
	// Malformed: a field out of range (epoch or seq 0, processed after
	// round, negative or non-finite rates, round going back).
	Malformed
	// Foreign: another cluster, or entities that differ from the config.
	Foreign
	// UnknownBroker: a broker id not in the configuration.
	UnknownBroker
	// RoundJump: a round implausibly far above the log's highest, from a
	// life of a broker this View already counts.
	RoundJump
	// Outside: a broker outside this View's budget: an id not in its
	// brokers, or a configuration digest that differs from its own. Not
	// split, but counted: while it reports, every round reserves it an
	// allowance (docs/cluster-budgets.md §3a).
	Outside
	verdicts
)

var verdictNames = [verdicts]string{"accepted", "duplicate", "stale", "fenced", "conflict", "malformed", "foreign", "unknown_broker", "round_jump", "outside"}

func (v Verdict) String() string {
	if v < verdicts {
		return verdictNames[v]
	}
	return "invalid"
}

// Counters counts reports by verdict: every report ignored is counted, none
// is applied.
type Counters [verdicts]uint64

// Ignored is the number of reports not accepted.
func (c *Counters) Ignored() uint64 {
	var n uint64
	for v := Duplicate; v < verdicts; v++ {
		n += c[v]
	}
	return n
}

// checkShape returns Malformed or Foreign for a report that no prefix of the
// log could make valid, and Accepted otherwise.
func checkShape(cfg *Config, r *Report) Verdict {
	if r.Cluster != cfg.Cluster || len(r.Entities) != len(cfg.Entities) {
		return Foreign
	}
	if r.Epoch == 0 || r.Seq == 0 || r.Round == 0 || r.Processed > r.Round || r.Round > MaxRound {
		return Malformed
	}
	if carriesEcho(r) && r.Echo >= r.Seq {
		return Malformed // an echo is of an earlier report
	}
	for i := range r.Entities {
		e := &r.Entities[i]
		if e.Entity != cfg.Entities[i].ID {
			return Foreign
		}
		if !finiteNonNegative(e.Usage) || !(e.Applied >= 0) { // +Inf applies an unlimited entity
			return Malformed
		}
		if r.Version != 1 && (!(e.Limit >= 0) || !finiteNonNegative(e.Reservation)) {
			return Malformed
		}
	}
	return Accepted
}

// MaxRound is the highest round a report may carry: a View accepts any
// round from a life it does not count yet (the log may have been emptied
// or truncated), and the bound keeps a bad one from exhausting the counter.
const MaxRound = 1 << 62

// carriesEcho reports whether r carries Echo and Digest (version 3, or a
// report that did not come off the wire).
func carriesEcho(r *Report) bool { return r.Version == 0 || r.Version >= 3 }

// echoOf is the seq from which r's sender's silence is measured: its echo,
// or for a format without one the report itself.
func echoOf(r *Report) uint64 {
	if carriesEcho(r) {
		return r.Echo
	}
	return r.Seq
}

func finiteNonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }
