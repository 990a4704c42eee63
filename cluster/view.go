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
	// Budgets[e] is entity e's budget in the round: the smallest limit and
	// reservation its live brokers reported.
	Budgets []Budget
	// Split[e] is what the round split: Budgets[e], or with brokers
	// outside the budget reporting, the live brokers' part of it
	// (View.computeTargets).
	Split []Budget
	// Outside is the number of brokers reporting from outside the budget
	// (another configuration); Members the count the round's part is of.
	Outside, Members int
	// Unseen is how many of the Outside are configured brokers this View
	// has no report of yet (its history is partial: retention, an emptied
	// log, a new process). Unlike another configuration's brokers, they do
	// not hold themselves to their part: each splits by its own view, in
	// which this host still holds what it last reported. Agent.raise makes
	// no raise on such a round.
	Unseen int
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
	t.Outside, t.Members, t.Unseen = o.Outside, o.Members, o.Unseen
	t.Split = append(t.Split[:0], o.Split...)
	t.Live = append(t.Live[:0], o.Live...)
	t.Shares = append(t.Shares[:0], o.Shares...)
	t.Budgets = append(t.Budgets[:0], o.Budgets...)
}

// Equal reports whether two target sets are identical, bit for bit.
func (t *Targets) Equal(o *Targets) bool {
	if t.Round != o.Round || t.Previous != o.Previous || t.LiveCount != o.LiveCount || t.Outside != o.Outside || t.Members != o.Members || t.Unseen != o.Unseen ||
		len(t.Live) != len(o.Live) || len(t.Shares) != len(o.Shares) || len(t.Split) != len(o.Split) {
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
	for e := range t.Split {
		if t.Split[e] != o.Split[e] {
			return false
		}
	}
	return true
}

// epochCount is a broker's life (the View's own count of the lives it has
// seen of the broker: epochs alone do not tell lives apart once a lower
// epoch may start one) and its number of periodic reports in it.
type epochCount struct{ life, count uint64 }

// mark is where in the log one accepted report of a broker's life landed:
// every broker's epochCount then.
type mark struct {
	seq  uint64
	snap []epochCount
}

// markRing is how many marks of a life a View keeps. Silence is measured
// from the first kept mark at or after the broker's echo; when the echoed
// one was not kept, a later one is used, which only reclaims later.
const markRing = 16

// brokerState is what a View knows of one broker.
type brokerState struct {
	seen     bool
	epoch    uint64
	instance uint64
	life     uint64 // lives seen, this one included
	// last is the newest accepted report of the current life; its
	// Entities slice belongs to the View.
	last Report
	// periodic counts the accepted periodic reports of the current life.
	periodic uint64
	// marks[(head+k) % markRing], k < nmarks, are the landings of the
	// life's reports from the first at or after echo to the newest: how
	// many reports each other broker made since the oldest is how long
	// this broker has been silent or deaf; since the newest, how long
	// nothing of it has landed.
	marks        [markRing]mark
	head, nmarks int
	// echo is the highest Echo of the life's reports (echoOf).
	echo uint64
	// outside: the life's newest report carries a configuration digest
	// other than the View's; members is its reported broker count.
	outside bool
	members uint32
	// maxProcessed is the highest Processed the broker reported in any
	// epoch: a restarted agent never raises for an older round.
	maxProcessed uint64
	// version is the newest wire format the broker's agent wrote in its
	// current epoch (the newest for a report that did not come off the
	// wire): what it can read.
	version uint8
}

// outsider is a broker id not in the View's configuration that reports
// to the log: another configuration (a roll of brokers:) counts it.
type outsider struct {
	snap    []epochCount // every broker's epochCount at its newest report
	members uint32
}

// maxOutsiders bounds the unknown ids a View tracks: past it, reports of
// new ones are counted as UnknownBroker and not tracked.
const maxOutsiders = 64

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
	digest   uint64
	// outsiders are the unknown broker ids seen reporting, by id.
	outsiders map[BrokerID]*outsider
	// origin is every broker's epochCount when the View began: nothing.
	origin []epochCount

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
	v := &View{cfg: cfg, k: cfg.ReclaimReports(), index: make(map[BrokerID]int, n), brokers: make([]brokerState, n),
		digest: cfg.Digest(), outsiders: map[BrokerID]*outsider{}, origin: make([]epochCount, n)}
	for i, b := range cfg.Brokers {
		v.index[b] = i
		for m := range v.brokers[i].marks {
			v.brokers[i].marks[m].snap = make([]epochCount, n)
		}
	}
	v.targets.Live = make([]bool, n)
	v.targets.Shares = make([]Share, n*len(cfg.Entities))
	v.targets.Budgets = make([]Budget, len(cfg.Entities))
	v.targets.Split = make([]Budget, len(cfg.Entities))
	return v, nil
}

// Ingest takes the next report of the log and says what it did with it.
// Every report that is neither Accepted nor Outside is counted and changes
// nothing else. When an accepted report is the first of a round higher
// than any before, the targets of its round are computed first, from the
// reports before it. An Outside report is tracked (its broker is counted
// outside the budget while it reports) and closes no round.
func (v *View) Ingest(r *Report) Verdict {
	verdict := v.judge(r)
	if verdict == UnknownBroker {
		verdict = v.trackOutsider(r)
	}
	v.counters[verdict]++
	if verdict != Accepted && !(verdict == Outside && v.known(r.Broker)) {
		return verdict
	}
	if verdict == Accepted && r.Round > v.maxRound {
		v.computeTargets(r.Round)
		v.maxRound = r.Round
	}
	i := v.index[r.Broker]
	b := &v.brokers[i]
	if !b.seen || r.Epoch != b.epoch || r.Instance != b.instance {
		// A new life: its silence is measured from its own reports only.
		b.seen, b.epoch, b.instance, b.periodic, b.version = true, r.Epoch, r.Instance, 0, 0
		b.life++
		b.head, b.nmarks, b.echo = 0, 0, 0
	}
	b.version = max(b.version, version(r))
	b.outside, b.members = verdict == Outside, r.Members
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
	v.mark(b, r)
	b.maxProcessed = max(b.maxProcessed, r.Processed)
	return verdict
}

// known reports whether id is one of the configured brokers.
func (v *View) known(id BrokerID) bool {
	_, ok := v.index[id]
	return ok
}

// mark records where r landed and drops the marks before the first at or
// after the life's echo: the sender had seen those land.
func (v *View) mark(b *brokerState, r *Report) {
	if b.nmarks == markRing {
		// Full (a deaf broker's echo stands still): the newest is replaced,
		// never the oldest, which the silence is measured from. An echo
		// that later passes the kept marks is measured from the newest:
		// later, so the reclaim only comes later.
		b.nmarks--
	}
	m := &b.marks[(b.head+b.nmarks)%markRing]
	b.nmarks++
	m.seq = r.Seq
	for c := range v.brokers {
		m.snap[c] = epochCount{v.brokers[c].life, v.brokers[c].periodic}
	}
	b.echo = max(b.echo, echoOf(r))
	for b.nmarks > 1 && b.marks[b.head].seq < b.echo {
		b.head = (b.head + 1) % markRing
		b.nmarks--
	}
}

// trackOutsider counts a report of a broker id the configuration does not
// list: another configuration's member, outside this View's budget.
func (v *View) trackOutsider(r *Report) Verdict {
	o := v.outsiders[r.Broker]
	if o == nil {
		if len(v.outsiders) >= maxOutsiders {
			return UnknownBroker
		}
		o = &outsider{snap: make([]epochCount, len(v.brokers))}
		v.outsiders[r.Broker] = o
	}
	o.members = r.Members
	for c := range v.brokers {
		o.snap[c] = epochCount{v.brokers[c].life, v.brokers[c].periodic}
	}
	return Outside
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
	b := &v.brokers[i]
	sameLife := b.seen && r.Epoch == b.epoch && r.Instance == b.instance
	switch {
	case !b.seen || sameLife:
	case v.landedSince(i) >= v.k:
		// Nothing of the counted life has landed for K reports of another
		// broker: by the reclaim argument (§4) that process has taken its
		// fallback share, so any other life is a new one, whatever its
		// epoch. A host replaced after retention dropped its broker's
		// reports picks a low epoch; it must not be fenced forever.
	case mutant == MutantNoFencing:
	case r.Epoch < b.epoch:
		return Fenced
	case r.Epoch == b.epoch:
		return Conflict
	}
	if sameLife {
		switch {
		case r.Seq == b.last.Seq:
			return Duplicate
		case r.Seq < b.last.Seq:
			return Stale
		case r.Round < b.last.Round:
			return Malformed
		}
	}
	if digestDiffers(r, v.digest) {
		return Outside
	}
	// Only a life the View already counts can jump: the first report of a
	// life in this View (the log emptied or truncated by retention, a new
	// process) may carry any round, so that a View that started from an
	// emptied log follows the others instead of ignoring them forever.
	if sameLife && v.maxRound > 0 && r.Round > v.maxRound+v.cfg.MaxRoundJump {
		return RoundJump
	}
	return Accepted
}

// digestDiffers reports whether r carries a configuration digest other
// than ours. A report without one (versions 1 and 2) is assumed to share
// the reader's configuration, as those versions always did.
func digestDiffers(r *Report, ours uint64) bool {
	return carriesEcho(r) && r.Digest != 0 && r.Digest != ours
}

// madeSince is the most periodic reports any other broker than i has made
// since snap was taken (all of them, if it changed life since).
func (v *View) madeSince(i int, snap []epochCount) uint64 {
	var most uint64
	for c := range v.brokers {
		o := &v.brokers[c]
		if c == i || !o.seen {
			continue
		}
		then := snap[c]
		made := o.periodic
		if then.life == o.life {
			made -= then.count
		}
		most = max(most, made)
	}
	return most
}

// landedSince is madeSince broker i's newest report.
func (v *View) landedSince(i int) uint64 {
	b := &v.brokers[i]
	return v.madeSince(i, b.marks[(b.head+b.nmarks-1)%markRing].snap)
}

// silent reports whether broker i is dead: some other broker has made k
// periodic reports since the landing of i's report that i's newest echo
// names (or the first after it the View knows). That covers a broker whose
// reports stop landing and one whose reports land but who reads nothing
// (deaf): its lease runs from an echoed report's send, so it has taken its
// fallback share by then (§4).
func (v *View) silent(i int) bool {
	b := &v.brokers[i]
	return v.madeSince(i, b.marks[b.head].snap) >= v.k
}

// outsiderLive reports whether an outsider has reported within K periodic
// reports of every configured broker.
func (v *View) outsiderLive(o *outsider) bool {
	return v.madeSince(-1, o.snap) < v.k
}

// computeTargets computes round's targets from the reports ingested so far.
//
// Brokers outside the budget (another configuration's: an unknown id, or
// a digest that differs) are not split but not ignored: each is assumed to
// split by its own view. When any reports, the live brokers split
// ⌊L · live ÷ members⌋ instead of L, members being the most of: this
// configuration's broker count, every outsider's reported count, and the
// live brokers plus outsiders. Each configuration's live brokers then take
// at most their count's part of L over a members count that covers every
// broker reporting, so the parts sum to at most L whatever the mix.
func (v *View) computeTargets(round uint64) {
	t := &v.targets
	t.Previous, t.Round = t.Round, round
	t.LiveCount = 0
	clear(t.Shares)
	v.liveIdx = v.liveIdx[:0]
	outside, members, unseen := 0, len(v.cfg.Brokers), 0
	for i := range v.brokers {
		b := &v.brokers[i]
		alive := b.seen && !v.silent(i)
		t.Live[i] = alive && !b.outside
		if t.Live[i] {
			v.liveIdx = append(v.liveIdx, i)
		}
		if alive && b.outside {
			outside++
			members = max(members, int(b.members))
		}
		// A broker this View has no report of may have reported just
		// before the log it read begins (retention, an emptied log, a
		// new process): another View may count it live. Until K reports
		// of another broker have landed since this View began, it is
		// counted outside, so a View with a truncated history never
		// hands its share to the brokers it knows.
		if !b.seen && v.madeSince(i, v.origin) < v.k {
			outside++
			unseen++
		}
	}
	for _, o := range v.outsiders {
		if v.outsiderLive(o) {
			outside++
			members = max(members, int(o.members))
		}
	}
	t.LiveCount = len(v.liveIdx)
	members = max(members, t.LiveCount+outside)
	t.Outside, t.Members, t.Unseen = outside, members, unseen
	clear(t.Budgets)
	clear(t.Split)
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
		if outside > 0 {
			part := float64(t.LiveCount) / float64(members)
			if !math.IsInf(ent.Limit, 1) {
				ent.Limit = math.Floor(ent.Limit * part)
			}
			ent.Reservation = math.Floor(min(ent.Reservation, ent.Limit) * part)
		}
		t.Split[e] = Budget{Limit: ent.Limit, Reservation: ent.Reservation}
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

// Vacated reports whether broker index i's counted life has had nothing
// land for K periodic reports of another broker: any other life of the
// broker would now be taken up (§3, "No share counted twice").
func (v *View) Vacated(i int) bool {
	return v.brokers[i].seen && v.landedSince(i) >= v.k
}

// Outsiders returns how many brokers of other configurations are
// reporting in the latest round (Targets.Outside).
func (v *View) Outsiders() int { return v.targets.Outside }

// Deaf reports whether broker index i's reports still land but it is dead
// in the latest round: the View counts it silent from its echo, not from
// its newest report.
func (v *View) Deaf(i int) bool {
	b := &v.brokers[i]
	return b.seen && !v.targets.Live[i] && !b.outside && v.landedSince(i) < v.k
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
