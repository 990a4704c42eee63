package cluster

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Mode is an agent's standing towards the cluster.
type Mode uint8

const (
	// ModeNormal: the lease is valid; the agent lowers and raises by the rules.
	ModeNormal Mode = iota
	// ModeFallback: the agent could not confirm a report of its own for a
	// lease; it applies its fallback share (and still lowers to targets it
	// computes) until a report of its own lands again.
	ModeFallback
	// ModeFenced: another agent process reports this broker id in this or a
	// newer epoch. The agent stops reporting and lowers to its floor share
	// (a share already below it stays).
	ModeFenced
)

func (m Mode) String() string {
	switch m {
	case ModeFallback:
		return "fallback"
	case ModeFenced:
		return "fenced"
	default:
		return "normal"
	}
}

// Disk is what an agent persists between process lives on one host, written
// before anything that depends on it is sent.
type Disk struct {
	// Epoch is the last epoch the agent used.
	Epoch uint64
	// Boot is the host boot Anchor belongs to.
	Boot uint64
	// Anchor is the lease anchor on the host's monotonic clock; valid when
	// Anchored.
	Anchor   time.Duration
	Anchored bool
	// ProcessedSent is the highest Processed the agent has sent: its
	// successor must not raise for an older round.
	ProcessedSent uint64
}

// Local is one entity's measurement on this host for a cycle.
type Local struct {
	Usage    float64
	HeldBack bool
	Led      uint32
}

// Start describes an agent process starting on a host.
type Start struct {
	Broker BrokerID
	// Instance is random per process (two processes claiming one broker id
	// are told apart by it); Boot identifies the host's boot.
	Instance, Boot uint64
	// Disk is the previous life's persisted state, nil when there is none
	// (a new host, or lost state): the epoch is then learned from the topic.
	Disk *Disk
	// Applied is what the data path enforces now (its maps outlive the
	// agent process); nil on a fresh data path, which starts at the
	// fallback share.
	Applied []float64
	// WallEpoch is the least epoch the process may take: the host's wall
	// clock at start in milliseconds since the Unix epoch (0: none). A
	// process that starts later than another of its broker id then
	// outranks it whatever it finds on disk or in the retained log: a
	// host replaced after retention dropped its broker's reports is taken
	// up at once by every View, instead of being ignored as a previous
	// life while the old one's reports are remembered. Wall clocks are
	// only compared between lives of one broker id, seconds or more
	// apart; where they are not (a clock set back), the epoch from disk or
	// the topic still grows, and a View takes up a lower epoch once the
	// counted life has been silent for K reports (View.Ingest).
	WallEpoch uint64
}

// Agent is one broker host's side of the protocol: it reads the log, keeps
// its View, decides the share its data path applies and the reports it
// sends. It is a pure state machine: time is the host's monotonic clock,
// passed in.
type Agent struct {
	cfg  Config
	me   int
	view *View

	broker         BrokerID
	instance, boot uint64
	epoch          uint64 // 0 until known
	wallEpoch      uint64
	seq, round     uint64
	mode           Mode
	rebuildUntil   time.Duration
	rebuilding     bool
	readFrom       time.Duration // a catch-up at or after it ends the rebuild
	caughtUp       time.Duration // last time the reader reached the log's end
	hasCaughtUp    bool
	nextPublish    time.Duration
	ackDue         bool
	anchor         time.Duration
	anchored       bool
	processed      uint64 // latest round adopted
	streakFrom     uint64 // first round of the current run of rounds adopted without a gap
	processedSent  uint64
	applied        []float64
	fallback       []float64 // the fallback share of the current episode
	pending        Targets   // the latest round adopted while live in it
	hasPending     bool
	// lastSplitOver is what the even-split fallback divides by: the live
	// brokers of the last round adopted, or with outsiders reporting, the
	// members count that round's part was of.
	lastSplitOver int
	lastReserved  []float64
	digest        uint64
	// echo is the Seq of the newest report of this life seen land, and
	// echoSent its SentAt: the next reports carry them (Report.Echo).
	echo     uint64
	echoSent time.Duration
	// budgets[e] is entity e's budget as this host knows it (SetBudget);
	// lastBudgets[e] the budget of the last round adopted.
	budgets, lastBudgets []Budget
}

// ErrUnknownBroker is returned by NewAgent for a broker id not in the config.
var ErrUnknownBroker = errors.New("broker not in cluster config")

// NewAgent starts an agent at local time now. It reads for RebuildWait
// before it acts on any target, and before it sends anything when it must
// learn its epoch from the topic.
func NewAgent(cfg Config, st Start, now time.Duration) (*Agent, error) {
	view, err := NewView(cfg)
	if err != nil {
		return nil, err
	}
	me, ok := view.BrokerIndex(st.Broker)
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrUnknownBroker, st.Broker)
	}
	ne := len(cfg.Entities)
	// A state file written before the epoch was learned holds no epoch.
	epochKnown := st.Disk != nil && st.Disk.Epoch > 0
	wait := cfg.RebuildWait(epochKnown)
	a := &Agent{
		cfg: cfg, me: me, view: view,
		broker: st.Broker, instance: st.Instance, boot: st.Boot,
		rebuilding:   true,
		rebuildUntil: now + wait,
		readFrom:     now + wait - cfg.Period,
		nextPublish:  now,
		applied:      make([]float64, ne),
		fallback:     make([]float64, ne),
		lastReserved: make([]float64, ne),
		budgets:      make([]Budget, ne),
		lastBudgets:  make([]Budget, ne),
		digest:       cfg.Digest(),
	}
	for e, ent := range cfg.Entities {
		a.budgets[e] = Budget{Limit: ent.Limit, Reservation: ent.Reservation}
		a.lastBudgets[e] = a.budgets[e]
	}
	a.wallEpoch = st.WallEpoch
	if d := st.Disk; d != nil {
		if epochKnown {
			a.epoch = max(d.Epoch+1, st.WallEpoch)
		}
		a.processedSent = d.ProcessedSent
		if d.Anchored && d.Boot == st.Boot {
			a.anchor, a.anchored = d.Anchor, true
		}
	}
	switch {
	case st.Applied == nil:
		a.enterFallback() // a fresh data path has no share to keep
	case !a.anchored:
		// Without its lease anchor the agent cannot know whether the lease
		// ran out while it was down: it assumes it did. It may learn the
		// anchor from its previous life's reports and return to normal.
		copy(a.applied, st.Applied)
		a.enterFallback()
	default:
		copy(a.applied, st.Applied)
	}
	return a, nil
}

// Observe ingests the next report of the log (every report, in log order)
// and returns the View's verdict.
func (a *Agent) Observe(r *Report) Verdict {
	before := a.view.Targets().Round
	verdict := a.view.Ingest(r)
	if verdict == Accepted && r.Broker == a.broker && r.Boot == a.boot {
		if a.epoch != 0 && r.Epoch == a.epoch && r.Instance == a.instance && r.Seq > a.echo {
			a.echo, a.echoSent = r.Seq, r.SentAt
		}
		// One of ours landed (or a previous life's on this boot, which a
		// successor without disk learns its lease from). The lease runs
		// from the send of the report it echoes: others measure silence
		// from that report's landing, so an agent that reads nothing (deaf)
		// runs out of lease before they reclaim it. A format without an
		// echo is measured from the report itself, as before.
		at, ok := r.SentAt, true
		if carriesEcho(r) {
			at, ok = r.EchoSent, r.Echo > 0
		}
		if ok && (!a.anchored || at > a.anchor) {
			a.anchor, a.anchored = at, true
		}
	}
	if a.epoch != 0 && a.mode != ModeFenced && mutant != MutantNoFencing {
		epoch, instance := a.view.Epoch(a.me)
		if epoch > a.epoch || (epoch == a.epoch && instance != a.instance) {
			// Lower to the floor share, never raise to it: the other
			// process now holds the broker's target, and the others raise
			// against its reports, so all that may stand beside them is
			// what this one already held (§5, two processes on one id).
			// Raising a share held below the floor (simulation seeds
			// 203983, 523911, 894405: 7.2 -> 13.5, 17.5 -> 21.25 and
			// 7.9 -> 20.8 MB/s) put that much over L + the allowance.
			a.mode = ModeFenced
			for e := range a.applied {
				a.applied[e] = min(a.applied[e], a.floorShare(e))
			}
		}
	}
	if t := a.view.Targets(); t.Round > before && !a.rebuilding {
		a.adopt(t)
	}
	return verdict
}

// counted reports whether the View counts this process's life for its
// broker: only then is the broker's target this process's to take.
func (a *Agent) counted() bool {
	epoch, instance := a.view.Epoch(a.me)
	return a.epoch != 0 && epoch == a.epoch && instance == a.instance
}

// CaughtUp tells the agent that it has been given every report up to the
// log's end as of local time now (a fetch returned the high watermark). A
// restarted agent acts only after a catch-up that began late enough for
// its previous life's reports to have landed.
func (a *Agent) CaughtUp(now time.Duration) {
	a.caughtUp, a.hasCaughtUp = now, true
}

// adopt takes a round's targets: lower at once, remember the round to raise
// to, and acknowledge it so others may raise.
func (a *Agent) adopt(t *Targets) {
	if a.mode == ModeFenced || !t.Live[a.me] || !a.counted() {
		// Outside the round (not reported yet, reclaimed, or the View
		// counts another process for this broker id — a previous life
		// whose reports are still the newest, or a second process on
		// another host, whose share the round's target is): keep the
		// current share, which is bounded by the fallback share, and
		// forget older rounds: the others raised in this one without
		// waiting for us, so an older target is no longer ours to take.
		a.hasPending = false
		return
	}
	for e := range a.applied {
		s := t.Share(a.me, e)
		a.applied[e] = min(a.applied[e], s.Target)
		a.lastReserved[e] = s.Reserved
	}
	copy(a.lastBudgets, t.Budgets)
	a.lastSplitOver = t.LiveCount
	if t.Outside > 0 {
		a.lastSplitOver = t.Members
	}
	if a.streakFrom == 0 || a.processed != t.Previous {
		a.streakFrom = t.Round
	}
	a.processed = t.Round
	a.pending.CopyFrom(t)
	a.hasPending = true
	a.ackDue = true
}

// Step runs the agent at local time now with this cycle's measurements
// (one per entity) and returns the report to send, if any. The applied
// share is decided before it returns and never waits for the log.
func (a *Agent) Step(now time.Duration, local []Local) *Report {
	if a.mode == ModeFenced && !a.rebuilding && a.view.Vacated(a.me) {
		a.takeOver()
	}
	if a.mode == ModeFenced {
		return nil
	}
	if a.rebuilding && now >= a.rebuildUntil && a.hasCaughtUp && a.caughtUp >= a.readFrom {
		a.rebuilding = false
		if a.epoch == 0 {
			epoch, _ := a.view.Epoch(a.me)
			a.epoch = max(epoch+1, a.wallEpoch)
		}
		a.processedSent = max(a.processedSent, a.view.MaxProcessed(a.me))
		if t := a.view.Targets(); t.Round > 0 {
			a.adopt(t)
		}
	}
	lease := a.cfg.Lease
	if mutant == MutantDoubleLease {
		lease *= 2
	}
	expired := !a.anchored || now-a.anchor >= lease
	switch {
	case expired && a.mode == ModeNormal:
		a.enterFallback()
	case !expired && a.mode == ModeFallback:
		a.mode = ModeNormal
	}
	if a.mode == ModeNormal && !a.rebuilding && a.hasPending {
		a.raise()
	}
	if a.epoch == 0 {
		return nil // learning the epoch from the topic: nothing may be sent yet
	}
	periodic := now >= a.nextPublish
	if !periodic && !a.ackDue {
		return nil
	}
	return a.report(now, periodic, local)
}

// takeOver starts a new life of a fenced agent once nothing of the life
// that fenced it has landed for K reports of another broker: by the reclaim
// argument that process has taken its fallback share or gone (a second
// host for the id that was retired), and without this the broker would
// stay fenced, at its floor share, forever. The new life outranks every
// epoch the View has seen, starts in fallback, and keeps every promise of
// the old one (processedSent; the View's MaxProcessed of the broker).
func (a *Agent) takeOver() {
	epoch, _ := a.view.Epoch(a.me)
	a.epoch = max(a.epoch, epoch) + 1
	a.seq, a.echo, a.echoSent = 0, 0, 0
	a.anchored = false
	a.hasPending = false
	a.enterFallback()
}

// raise moves each entity up to its pending target once every other live
// broker of that round has reported processing it with a share at or below
// its own target. Only the latest round computed qualifies, and never one
// older than a round this broker already reported processing (in this life
// or a previous one): that promise is what others' raises rely on.
func (a *Agent) raise() {
	if mutant == MutantNeverRaise {
		return
	}
	t := &a.pending
	if t.Round != a.view.Targets().Round || t.Round < a.processedSent || t.Round < a.view.MaxProcessed(a.me) {
		return
	}
	// A round that counts configured brokers outside because this View has
	// no report of them splits L · live ÷ members, but those brokers split
	// by their own views, which still count this host at what it last
	// reported: raising to this round's target could add to what they
	// hold (simulation seed 977601: a host restarted onto an emptied log
	// raised to L ÷ 3 while the others held rounds that gave it 1.8 of 19).
	// Lowering is always safe; the raise waits until they are seen or K
	// reports show them gone.
	if t.Unseen > 0 {
		return
	}
	for b, live := range t.Live {
		if b == a.me || !live {
			continue
		}
		r, ok := a.view.Latest(b)
		if !ok || r.Processed < t.Round {
			return
		}
	}
	for e := range a.applied {
		want := t.Share(a.me, e).Target
		if want <= a.applied[e] {
			continue
		}
		ok := true
		for b, live := range t.Live {
			if b == a.me || !live {
				continue
			}
			r, _ := a.view.Latest(b)
			if r.Entities[e].Applied > t.Share(b, e).Target {
				ok = false
				break
			}
		}
		if ok {
			a.applied[e] = want
		}
	}
}

// HoldingRaise lists the brokers that hold this host's raise of entity e
// up: live in the pending round and, by their latest accepted report, not
// yet processing it or still applying more than their target for e. Empty
// when nothing is to be raised (applied at the target), and when the wait
// is this host's own (a newer round computed, an older promise kept): then
// no other broker holds it. Status names them, so an operator sees which
// host to look at when a share stays under its target.
func (a *Agent) HoldingRaise(e int) []BrokerID {
	t := &a.pending
	if !a.hasPending || e >= len(a.applied) || t.Share(a.me, e).Target <= a.applied[e] {
		return nil
	}
	var out []BrokerID
	for b, live := range t.Live {
		if b == a.me || !live {
			continue
		}
		if r, ok := a.view.Latest(b); !ok || r.Processed < t.Round || r.Entities[e].Applied > t.Share(b, e).Target {
			out = append(out, a.cfg.Brokers[b])
		}
	}
	return out
}

// report builds the next report and records what it promises.
func (a *Agent) report(now time.Duration, periodic bool, local []Local) *Report {
	a.seq++
	if periodic {
		a.round = max(a.round+1, a.view.MaxRound())
		a.nextPublish = now + a.cfg.Period
	} else {
		a.round = max(a.round, a.view.MaxRound(), 1)
	}
	a.ackDue = false
	a.processedSent = max(a.processedSent, a.processed)
	r := &Report{
		Cluster: a.cfg.Cluster, Broker: a.broker, Epoch: a.epoch, Instance: a.instance, Boot: a.boot,
		SentAt: now, Seq: a.seq, Round: a.round, Processed: a.processed, Ack: !periodic,
		Digest: a.digest, Members: uint32(len(a.cfg.Brokers)), Echo: a.echo, EchoSent: a.echoSent,
		Entities: make([]EntityReport, len(a.cfg.Entities)), Version: a.wireVersion(),
	}
	for e, ent := range a.cfg.Entities {
		er := EntityReport{Entity: ent.ID, Applied: a.applied[e], Limit: a.budgets[e].Limit, Reservation: a.budgets[e].Reservation}
		if e < len(local) {
			er.Usage, er.HeldBack, er.Led = local[e].Usage, local[e].HeldBack, local[e].Led
		}
		r.Entities[e] = er
	}
	return r
}

// enterFallback applies the fallback share: the lease ran out, so others
// may soon reclaim this broker's share.
func (a *Agent) enterFallback() {
	a.mode = ModeFallback
	for e := range a.applied {
		a.fallback[e] = a.fallbackShare(e)
		a.applied[e] = a.fallback[e]
	}
}

// fallbackShare splits the smaller of this host's budget and its last
// round's: a lowered limit this host has not seen split yet counts.
func (a *Agent) fallbackShare(e int) float64 {
	limit := min(a.budgets[e].Limit, a.lastBudgets[e].Limit)
	switch a.cfg.Fallback {
	case FallbackFloor:
		return a.floorShare(e)
	case FallbackFullLimit:
		return limit
	}
	if mutant == MutantEvenSplitFullLimit {
		return limit
	}
	over := a.lastSplitOver
	if over == 0 {
		over = len(a.cfg.Brokers)
	}
	return math.Floor(limit / float64(over))
}

// wireProbeEvery: an agent writing an older format for a peer's sake
// writes every so many reports in the newest, so that peers learn it reads
// it (an older format cannot say so). A peer that cannot read the probe
// misses one report in this many: too few to make the sender silent.
const wireProbeEvery = 10

// wireVersion is the format of the next report: the newest every other
// live broker of the last round can read, so that a broker not yet
// upgraded can read it, except for the probes.
func (a *Agent) wireVersion() uint8 {
	v := uint8(WireVersion)
	for i, live := range a.view.Targets().Live {
		if live && i != a.me {
			v = min(v, a.view.Reads(i))
		}
	}
	if v < WireVersion && a.seq%wireProbeEvery == 0 {
		return WireVersion
	}
	return v
}

// SetBudget changes entity e's budget as this host knows it (read from
// Kafka's quota store): its next reports carry it, and rounds split the
// smallest budget their live brokers report: a lowered limit is split by
// the first round that holds this host's report of it (and lowered to on
// adoption, as every round is), a raised one by the first in which every
// live broker reports it. In fallback the fallback share follows a
// lowered limit at once.
func (a *Agent) SetBudget(e int, b Budget) {
	a.budgets[e] = b
	if a.mode == ModeFallback {
		a.fallback[e] = min(a.fallback[e], a.fallbackShare(e))
		a.applied[e] = min(a.applied[e], a.fallback[e])
	}
}

// Budget returns entity e's budget as this host knows it.
func (a *Agent) Budget(e int) Budget { return a.budgets[e] }

// RoundBudget returns the budget the last adopted round split for entity e
// (this host's own before its first round).
func (a *Agent) RoundBudget(e int) Budget { return a.lastBudgets[e] }

// floorShare is the broker's reservation share of its last round, or an
// even part of the reservation before it has one.
func (a *Agent) floorShare(e int) float64 {
	if a.processed > 0 {
		return a.lastReserved[e]
	}
	return math.Floor(min(a.budgets[e].Reservation, a.budgets[e].Limit) / float64(len(a.cfg.Brokers)))
}

// Persist returns what to write to disk before sending the next report.
func (a *Agent) Persist() Disk {
	return Disk{Epoch: a.epoch, Boot: a.boot, Anchor: a.anchor, Anchored: a.anchored, ProcessedSent: a.processedSent}
}

// Applied returns the share of each entity the data path must enforce now.
// The slice belongs to the Agent.
func (a *Agent) Applied() []float64 { return a.applied }

// FallbackShares returns the shares applied when the current or last
// fallback began.
func (a *Agent) FallbackShares() []float64 { return a.fallback }

// Mode returns the agent's standing.
func (a *Agent) Mode() Mode { return a.mode }

// Rebuilding reports whether the agent is still reading before it acts.
func (a *Agent) Rebuilding() bool { return a.rebuilding }

// Processed returns the latest round adopted (0 for none).
func (a *Agent) Processed() uint64 { return a.processed }

// Streak returns the first round of the agent's current run of rounds
// adopted without a gap (0 for none): its share is at or below its target of
// every round from there to Processed, or was raised by the rules since.
func (a *Agent) Streak() uint64 { return a.streakFrom }

// Epoch returns the agent's epoch (0 while it is still learning it).
func (a *Agent) Epoch() uint64 { return a.epoch }

// View returns the agent's View (read only).
func (a *Agent) View() *View { return a.view }

// Pending returns the targets of the latest round adopted, and false if
// none has been.
func (a *Agent) Pending() (*Targets, bool) { return &a.pending, a.hasPending }
