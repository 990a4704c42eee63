package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"time"
)

// BrokerID is a Kafka broker.id: the identity an agent reports under.
type BrokerID int32

// Entity is a cluster entity: its limit and reservation are budgets for the
// whole cluster, split into one share per broker. Its weight is not here: it
// ranks the entity against the other entities of each host, which the local
// allocator does once the cluster share has become the entity's local limit.
type Entity struct {
	// ID names the entity in reports; every agent must configure the same
	// entities in the same order.
	ID string
	// Limit is the cluster-wide hard cap in bytes/s (+Inf for none).
	Limit float64
	// Reservation is the cluster-wide floor in bytes/s, clamped to Limit.
	Reservation float64
}

// FallbackMode is the share an agent applies once its lease has run out.
type FallbackMode uint8

const (
	// FallbackEvenSplit: Limit ÷ the live brokers of the agent's last round.
	// If every host falls back at once their sum is the limit.
	FallbackEvenSplit FallbackMode = iota
	// FallbackFloor: the agent's reservation share of its last round (its
	// leadership fraction of the reservation). Summed over hosts it is at
	// most the reservation: the smallest overshoot, the least service.
	FallbackFloor
	// FallbackFullLimit: the whole cluster limit, on each host cut off
	// (Kafka's own per-broker semantics): the largest overshoot.
	FallbackFullLimit
)

func (m FallbackMode) String() string {
	switch m {
	case FallbackFloor:
		return "floor"
	case FallbackFullLimit:
		return "full-limit"
	default:
		return "even-split"
	}
}

// Config is what every agent of one cluster must agree on: the computation is
// deterministic only if the inputs and these parameters are the same.
type Config struct {
	// Cluster names the Kafka cluster; a report naming another is foreign.
	Cluster string
	// Brokers are the cluster's broker ids (static broker.id configuration).
	Brokers []BrokerID
	// Entities are the cluster entities, in the order reports carry them.
	Entities []Entity
	// Period is the report interval P (the control-loop interval, 1 s).
	Period time.Duration
	// Lease is how long an agent that cannot confirm its reports keeps its
	// last share, on its own clock (default 30 s).
	Lease time.Duration
	// MaxClockSkew s bounds every agent's clock rate to [1−s, 1+s] of real
	// time (crystal oscillators drift ~1e-4; the default 0.01 is generous).
	MaxClockSkew float64
	// MaxDelivery D bounds the time from sending a report to its landing in
	// the log; a report not landed by then never lands (the producer's
	// delivery.timeout.ms).
	MaxDelivery time.Duration
	// MaxDowntime is the longest an agent process may be down while its
	// data path keeps enforcing the last share: the data path's stale_after
	// (docs/design.md §3, step 5; 10 s); past it the host fails open. No lease is
	// checked while the agent is down, so the reclaim waits this long more.
	MaxDowntime time.Duration
	// Fallback selects the share applied after the lease.
	Fallback FallbackMode
	// MinLeadWeight floors a broker's leadership fraction as its weight in
	// the water-fill, so a broker that leads none of the entity's partitions
	// (stale metadata, follower fetching) still gets some idle capacity.
	MinLeadWeight float64
	// MaxRoundJump: a report whose round is more than this above the
	// highest round in the log is ignored, so one bad report cannot push
	// every agent's round counter to the end of its range.
	MaxRoundJump uint64
}

// DefaultConfig returns the defaults of docs/cluster-budgets.md.
func DefaultConfig(cluster string, brokers []BrokerID, entities []Entity) Config {
	return Config{
		Cluster:       cluster,
		Brokers:       brokers,
		Entities:      entities,
		Period:        time.Second,
		Lease:         30 * time.Second,
		MaxClockSkew:  0.01,
		MaxDelivery:   5 * time.Second,
		MaxDowntime:   10 * time.Second,
		Fallback:      FallbackEvenSplit,
		MinLeadWeight: 0.01,
		MaxRoundJump:  1000,
	}
}

// ErrInvalidConfig wraps every error of Config.Validate.
var ErrInvalidConfig = errors.New("invalid cluster config")

// Validate reports the first bad parameter by name.
func (c Config) Validate() error {
	bad := func(field, why string, v any) error {
		return fmt.Errorf("%w: %s: %s (got %v)", ErrInvalidConfig, field, why, v)
	}
	switch {
	case c.Cluster == "":
		return bad("cluster", "must name the Kafka cluster", c.Cluster)
	case len(c.Brokers) == 0:
		return bad("brokers", "must list at least one broker", len(c.Brokers))
	case len(c.Entities) == 0:
		return bad("entities", "must list at least one entity", len(c.Entities))
	case c.Period <= 0:
		return bad("period", "must be > 0", c.Period)
	case c.Lease < c.Period:
		return bad("lease", "must be at least one period", c.Lease)
	case !(c.MaxClockSkew >= 0 && c.MaxClockSkew < 0.5):
		return bad("max_clock_skew", "must be in [0, 0.5)", c.MaxClockSkew)
	case c.MaxDelivery < 0:
		return bad("max_delivery", "must be >= 0", c.MaxDelivery)
	case c.MaxDowntime < 0:
		return bad("max_downtime", "must be >= 0", c.MaxDowntime)
	case c.Fallback > FallbackFullLimit:
		return bad("fallback", "must be even-split, floor or full-limit", c.Fallback)
	case !(c.MinLeadWeight > 0 && c.MinLeadWeight <= 1):
		return bad("min_lead_weight", "must be in (0, 1]", c.MinLeadWeight)
	case c.MaxRoundJump < 1:
		return bad("max_round_jump", "must be >= 1", c.MaxRoundJump)
	}
	seen := make(map[BrokerID]bool, len(c.Brokers))
	for i, b := range c.Brokers {
		if seen[b] {
			return bad(fmt.Sprintf("brokers[%d]", i), "listed twice", b)
		}
		seen[b] = true
	}
	ids := make(map[string]bool, len(c.Entities))
	for i, e := range c.Entities {
		field := fmt.Sprintf("entities[%d]", i)
		switch {
		case e.ID == "" || ids[e.ID]:
			return bad(field+".id", "must be unique and not empty", e.ID)
		case !(e.Limit >= 0):
			return bad(field+".limit", "must be >= 0 or unlimited", e.Limit)
		case !(e.Reservation >= 0) || math.IsInf(e.Reservation, 0):
			return bad(field+".reservation", "must be a finite number >= 0", e.Reservation)
		}
		ids[e.ID] = true
	}
	return nil
}

// RebuildWait is how long a restarted agent reads before it acts: one period
// to read the retained log when it knows its epoch from disk, plus the
// delivery bound when it must learn its epoch from the topic, so that no
// report of its previous life is still in flight when it picks the next one.
func (c Config) RebuildWait(epochFromDisk bool) time.Duration {
	if epochFromDisk {
		return c.Period
	}
	return c.MaxDelivery + c.Period
}

// ReclaimReports is K: a broker is dead in a round, and its share goes to the
// others, once some other broker has K valid periodic reports in the log
// after the broker's last one. One broker's periodic reports are at least
// P/(1+s) apart in real time and each lands within D of being sent, so K
// reports after it mean at least (K−1)·P/(1+s) − D has passed since the dead
// broker sent its last landed report. The silent agent has fallen back by
// then: its lease ran from the send of a report it saw land (no later); it
// checks the lease once a period; a restarted agent checks it at once (and
// one without an anchor on disk falls back at once), so only a crash of at
// most MaxDowntime delays the check. So K is the least integer with
//
//	(K−1)·P/(1+s) − D ≥ (Lease + P + MaxDowntime)/(1−s).
//
// With the defaults (P 1 s, lease 30 s, D 5 s, downtime 10 s, s 0.01) K = 48:
// reclaim about 48 s after the last report, 18 s after the lease.
func (c Config) ReclaimReports() uint64 {
	p := c.Period.Seconds()
	s := c.MaxClockSkew
	down := c.MaxDowntime
	if mutant == MutantNoDowntimeInK {
		down = 0
	}
	holder := (c.Lease + c.Period + down).Seconds() / (1 - s)
	k := 1 + math.Ceil((holder+c.MaxDelivery.Seconds())*(1+s)/p-1e-9)
	return uint64(k)
}

// reservation is the entity's reservation clamped to its limit.
func (e Entity) reservation() float64 { return min(e.Reservation, e.Limit) }

// Digest is a hash of everything the shares depend on except the budgets
// (which travel in reports and are split at their smallest): the cluster,
// the brokers in order, the entity ids in order, and the timing, fallback
// and weighting parameters. Agents whose digests differ would compute
// different targets from the same log; each counts the other as outside
// its budget. Never 0 (0 on the wire means "not carried").
func (c Config) Digest() uint64 {
	h := fnv.New64a()
	var buf []byte
	str := func(s string) {
		buf = binary.AppendUvarint(buf[:0], uint64(len(s)))
		h.Write(append(buf, s...))
	}
	num := func(v uint64) { h.Write(binary.LittleEndian.AppendUint64(buf[:0], v)) }
	str(c.Cluster)
	num(uint64(len(c.Brokers)))
	for _, b := range c.Brokers {
		num(uint64(uint32(b)))
	}
	num(uint64(len(c.Entities)))
	for _, e := range c.Entities {
		str(e.ID)
	}
	for _, d := range []time.Duration{c.Period, c.Lease, c.MaxDelivery, c.MaxDowntime} {
		num(uint64(d))
	}
	num(math.Float64bits(c.MaxClockSkew))
	num(math.Float64bits(c.MinLeadWeight))
	num(uint64(c.Fallback))
	num(c.MaxRoundJump)
	if d := h.Sum64(); d != 0 {
		return d
	}
	return 1
}
