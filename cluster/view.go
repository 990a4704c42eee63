package cluster

import (
	"fmt"
	"math"
)

var inf = math.Inf(1)

// Targets are one round's shares for every broker, computed by a View from
// the reports that precede the round's first report in the log.
type Targets struct {
	// Round is the round the targets are for; 0 before the first.
	Round uint64
	// Previous is the round computed before it (rounds may skip numbers).
	Previous uint64
	// Live[i] says whether Config.Brokers[i] takes part in the round: it
	// has reported, and no other broker has ReclaimReports periodic
	// reports in the log after its last one.
	Live []bool
	// LiveCount is the number of live brokers.
	LiveCount int
	// Shares[i*len(Entities)+e] is broker i's share of entity e; zero for a
	// broker that is not live.
	Shares []Share
	// Budgets[e] is the budget the round split for entity e: the smallest
	// limit and reservation its live brokers reported.
	Budgets []Budget
}

// Budget is an entity's cluster-wide limit and reservation.
type Budget struct{ Limit, Reservation float64 }

// Share returns broker index i's share of entity e.
func (t *Targets) Share(i, e int) Share {
	entities := len(t.Shares) / len(t.Live)
	return t.Shares[i*entities+e]
}

// CopyFrom makes t a deep copy of o, reusing t's slices.
func (t *Targets) CopyFrom(o *Targets) {
	t.Round, t.Previous, t.LiveCount = o.Round, o.Previous, o.LiveCount
	t.Live = append(t.Live[:0], o.Live...)
	t.Shares = append(t.Shares[:0], o.Shares...)
	t.Budgets = append(t.Budgets[:0], o.Budgets...)
}

// Equal reports whether two target sets are identical, bit for bit.
func (t *Targets) Equal(o *Targets) bool {
	if t.Round != o.Round || t.Previous != o.Previous || t.LiveCount != o.LiveCount || len(t.Live) != len(o.Live) || len(t.Shares) != len(o.Shares) {
		return false
	}
	for i := range t.Live {
		if t.Live[i] != o.Live[i] {
			return false
		}
	}
	for i := range t.Shares {
		if t.Shares[i] != o.Shares[i] {
			return false
		}
	}
	if len(t.Budgets) != len(o.Budgets) {
		return false
	}
	for e := range t.Budgets {
		if t.Budgets[e] != o.Budgets[e] {
			return false
		}
	}
	return true
}

// epochCount is a broker's epoch and its number of periodic reports in it.
type epochCount struct{ epoch, count uint64 }

// brokerState is what a View knows of one broker.
type brokerState struct {
	seen     bool
	epoch    uint64
	instance uint64
	// last is the newest accepted report of the current epoch; its
	// Entities slice belongs to the View.
	last Report
	// periodic counts the accepted periodic reports of the current epoch.
	periodic uint64
	// since[c] is broker c's epochCount when last was accepted: how many
	// reports c has made since is how long this broker has been silent.
	since []epochCount
	// maxProcessed is the highest Processed the broker reported in any
	// epoch: a restarted agent never raises for an older round.
	maxProcessed uint64
	// version is the newest wire format the broker's agent wrote in its
	// current epoch (the newest for a report that did not come off the
	// wire): what it can read.
	version uint8
}

// View is the state every agent derives from the log: a pure function of the
// sequence of reports it has ingested, so agents that have read the same
// prefix hold equal Views and compute equal Targets.
type View struct {
	cfg      Config
	k        uint64
	index    map[BrokerID]int
	brokers  []brokerState
	maxRound uint64
	targets  Targets
	counters Counters

	sharer  sharer
	inputs  []BrokerInput
	outs    []Share
	liveIdx []int
}

// NewView returns an empty View for cfg, or the error of cfg.Validate.
func NewView(cfg Config) (*View, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := len(cfg.Brokers)
	v := &View{cfg: cfg, k: cfg.ReclaimReports(), index: make(map[BrokerID]int, n), brokers: make([]brokerState, n)}
	for i, b := range cfg.Brokers {
		v.index[b] = i
		v.brokers[i].since = make([]epochCount, n)
	}
	v.targets.Live = make([]bool, n)
	v.targets.Shares = make([]Share, n*len(cfg.Entities))
	v.targets.Budgets = make([]Budget, len(cfg.Entities))
	return v, nil
}

// Ingest takes the next report of the log and says what it did with it.
// Every report that is not Accepted is counted and changes nothing else.
// When an accepted report is the first of a round higher than any before,
// the targets of its round are computed first, from the reports before it.
func (v *View) Ingest(r *Report) Verdict {
	verdict := v.judge(r)
	v.counters[verdict]++
	if verdict != Accepted {
		return verdict
	}
	if r.Round > v.maxRound {
		v.computeTargets(r.Round)
		v.maxRound = r.Round
	}
	i := v.index[r.Broker]
	b := &v.brokers[i]
	if !b.seen || r.Epoch > b.epoch {
		b.seen, b.epoch, b.instance, b.periodic, b.version = true, r.Epoch, r.Instance, 0, 0
	}
	b.version = max(b.version, version(r))
	if !r.Ack {
		b.periodic++
	}
	ents := append(b.last.Entities[:0], r.Entities...)
	b.last = *r
	b.last.Entities = ents
	if r.Version == 1 { // no budget on the wire: this View's configuration
		for e := range ents {
			ents[e].Limit, ents[e].Reservation = v.cfg.Entities[e].Limit, v.cfg.Entities[e].Reservation
		}
	}
	for c := range v.brokers {
		b.since[c] = epochCount{v.brokers[c].epoch, v.brokers[c].periodic}
	}
	b.maxProcessed = max(b.maxProcessed, r.Processed)
	return Accepted
}

// judge decides a report's verdict without changing the View.
func (v *View) judge(r *Report) Verdict {
	if verdict := checkShape(&v.cfg, r); verdict != Accepted {
		return verdict
	}
	i, ok := v.index[r.Broker]
	if !ok {
		return UnknownBroker
	}
	if b := &v.brokers[i]; b.seen {
		switch {
		case r.Epoch < b.epoch:
			return Fenced
		case r.Epoch > b.epoch:
		case r.Instance != b.instance:
			return Conflict
		case r.Seq == b.last.Seq:
			return Duplicate
		case r.Seq < b.last.Seq:
			return Stale
		case r.Round < b.last.Round:
			return Malformed
		}
	}
	// An empty View accepts any round: the retained log may start late.
	if v.maxRound > 0 && r.Round > v.maxRound+v.cfg.MaxRoundJump {
		return RoundJump
	}
	return Accepted
}

// silent reports whether broker i is dead: some other broker has made k
// periodic reports since i's last report (all of them, if it changed epoch
// since).
func (v *View) silent(i int) bool {
	b := &v.brokers[i]
	for c := range v.brokers {
		o := &v.brokers[c]
		if c == i || !o.seen {
			continue
		}
		then := b.since[c]
		made := o.periodic
		if then.epoch == o.epoch {
			made -= then.count
		}
		if made >= v.k {
			return true
		}
	}
	return false
}

// computeTargets computes round's targets from the reports ingested so far.
func (v *View) computeTargets(round uint64) {
	t := &v.targets
	t.Previous, t.Round = t.Round, round
	t.LiveCount = 0
	clear(t.Shares)
	v.liveIdx = v.liveIdx[:0]
	for i := range v.brokers {
		t.Live[i] = v.brokers[i].seen && !v.silent(i)
		if t.Live[i] {
			v.liveIdx = append(v.liveIdx, i)
		}
	}
	t.LiveCount = len(v.liveIdx)
	clear(t.Budgets)
	if t.LiveCount == 0 {
		return
	}
	ne := len(v.cfg.Entities)
	for e := range v.cfg.Entities {
		ent := Entity{ID: v.cfg.Entities[e].ID, Limit: inf, Reservation: inf}
		v.inputs = v.inputs[:0]
		for _, i := range v.liveIdx {
			er := &v.brokers[i].last.Entities[e]
			v.inputs = append(v.inputs, BrokerInput{Usage: er.Usage, HeldBack: er.HeldBack, Led: er.Led})
			ent.Limit, ent.Reservation = min(ent.Limit, er.Limit), min(ent.Reservation, er.Reservation)
		}
		t.Budgets[e] = Budget{Limit: ent.Limit, Reservation: ent.Reservation}
		if cap(v.outs) < len(v.inputs) {
			v.outs = make([]Share, len(v.inputs))
		}
		v.outs = v.outs[:len(v.inputs)]
		v.sharer.shares(ent, v.inputs, v.cfg.MinLeadWeight, v.outs)
		for j, i := range v.liveIdx {
			t.Shares[i*ne+e] = v.outs[j]
		}
	}
}

// Targets returns the latest round's targets. They belong to the View and
// change with the next Ingest; copy them to keep them.
func (v *View) Targets() *Targets { return &v.targets }

// MaxRound is the highest round accepted.
func (v *View) MaxRound() uint64 { return v.maxRound }

// Counters returns the reports counted by verdict.
func (v *View) Counters() Counters { return v.counters }

// Config returns the View's configuration.
func (v *View) Config() *Config { return &v.cfg }

// BrokerIndex returns id's index in Config.Brokers.
func (v *View) BrokerIndex(id BrokerID) (int, bool) {
	i, ok := v.index[id]
	return i, ok
}

// Latest returns broker index i's newest accepted report of its current
// epoch (owned by the View), or false if it has none.
func (v *View) Latest(i int) (*Report, bool) {
	b := &v.brokers[i]
	return &b.last, b.seen
}

// Reads returns the newest wire format broker index i's agent wrote in its
// current epoch: the newest it can read (WireVersion before it reported).
func (v *View) Reads(i int) uint8 {
	if !v.brokers[i].seen {
		return WireVersion
	}
	return v.brokers[i].version
}

// version is the format r came in; the newest for a report that did not
// come off the wire.
func version(r *Report) uint8 {
	if r.Version == 0 {
		return WireVersion
	}
	return r.Version
}

// Epoch returns broker index i's current epoch and agent instance (0, 0 if
// it has not reported).
func (v *View) Epoch(i int) (epoch, instance uint64) {
	return v.brokers[i].epoch, v.brokers[i].instance
}

// MaxProcessed is the highest Processed broker index i reported in any epoch.
func (v *View) MaxProcessed(i int) uint64 { return v.brokers[i].maxProcessed }

// String summarises the View for test failures.
func (v *View) String() string {
	return fmt.Sprintf("view{round %d, targets round %d, live %d, counters %v}", v.maxRound, v.targets.Round, v.targets.LiveCount, v.counters)
}
