// Package learner turns sampled request bytes into entity decisions for each
// connection: which entity its produce-direction and fetch-direction bytes
// belong to, following docs/design.md §5. Its input is bytes; it needs no BPF.
package learner

import (
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/kafka"
)

// TopicNames resolves the topic IDs of Produce and Fetch v13+ to names.
// An unknown ID returns false; the implementation may refresh in the
// background so that a later request resolves.
type TopicNames interface {
	TopicName(id [16]byte) (string, bool)
}

// Target is where one direction of a connection's bytes go. Every target
// the learner decides is governed: what a client sends can never exempt it.
// Replication is exempt by its peer (exempt_peers), which the data path
// decides before any request is parsed.
type Target struct {
	Key entity.Key
}

// Decision is a connection's entity per direction. A direction not
// decided is one no request has told yet: the agent keeps the entity the
// connection is bound to, or holds it to the unresolved entity when it is
// bound to none (agent/learn.go, docs/identity.md).
type Decision struct {
	Produce, Fetch Target
	// Decided reports which directions have been decided.
	Decided [2]bool
}

// Target returns the decision for a direction.
func (d Decision) Target(dir entity.Direction) (Target, bool) {
	if dir == entity.Produce {
		return d.Produce, d.Decided[entity.Produce]
	}
	return d.Fetch, d.Decided[entity.Fetch]
}

// Stats counts what the learner has seen, for metrics.
type Stats struct {
	Parsed    uint64 // samples parsed (possibly truncated)
	Truncated uint64 // of those, samples that ended before the fields read
	Failed    uint64 // samples that could not be parsed
	// ReplicationClaims counts requests from governed peers that claim to
	// be replication (a follower fetch's replica id, or a broker fetcher's
	// client-id): such a claim is ignored, since only exempt_peers exempt.
	ReplicationClaims uint64
	// NewConnections counts 4-tuples whose state was reset because a new
	// connection reused them.
	NewConnections uint64
	// Adopted counts connections whose state was rebuilt from what an
	// earlier learner left (their binding and their proven identity).
	Adopted uint64
	// Unresolved counts requests whose entity their sample could not tell
	// (entity.UnresolvedKey): a cut client-id whose entity may hang on the
	// bytes cut, a request cut before its topics, or a request that left
	// its connection without a decision in a direction (the agent holds
	// such a direction to the unresolved entity: a header that could not
	// be read, a login that named nobody). The SASL exchange before a
	// login (ApiVersions, SaslHandshake) decides nothing by design and is
	// not counted. The agent adds each connection it holds to unresolved
	// because nothing it sent could be sampled (agent/connections.go).
	Unresolved uint64
}

// Sample is one request's sampled bytes, as the data path delivered them.
type Sample struct {
	Data []byte
	// Whole: every byte the data path meant to send arrived (the request,
	// or the sample size of it). A sample that lost fragments may end
	// anywhere, so its end says nothing.
	Whole bool
	// ClientIDCut: the client-id was longer than a sample keeps, and Data
	// holds a request whose client-id is its first bytes only.
	ClientIDCut bool
	// ClientIDHash is a cut client-id's hash of its other bytes
	// (entity.LongClientHash), when ClientIDHashed: with the kept bytes it
	// names the client (entity.LongClientID).
	ClientIDHash   uint64
	ClientIDHashed bool
}

// Identity is what a connection proved once and no later request repeats:
// the principal of its SASL login, and before that the mechanism its
// handshake named (User empty: a login under way, whose SaslAuthenticate
// can only be read knowing the mechanism). The agent persists it next to
// the connection's binding (OnLogin), so that a restarted agent, or this
// one after freeing the connection's state, still knows it (Adopt).
type Identity struct {
	Mechanism string
	User      string
}

// Cause says why Learn changed a connection's decision.
type Cause uint8

const (
	CauseNone       Cause = iota // the decision did not change
	CauseRequest                 // a request's client-id or partitions (fetch session included)
	CauseLogin                   // a SASL login proved the principal
	CauseRuleChange              // the policy changed since the connection's last decision
)

func (c Cause) String() string {
	switch c {
	case CauseRequest:
		return "request"
	case CauseLogin:
		return "login"
	case CauseRuleChange:
		return "rule_change"
	}
	return "none"
}

// Learner holds per-connection state, keyed by the data path's connection
// key type C. Not safe for concurrent use: one goroutine reads samples.
type Learner[C comparable] struct {
	parser *kafka.Parser
	req    kafka.Request
	policy *entity.Policy
	topics TopicNames
	conns  map[C]*conn
	// saslListener reports whether a connection came in on a SASL_PLAINTEXT
	// listener, where the principal is read (nil: none is).
	saslListener func(C) bool
	// onLogin is told each principal a connection proves (nil: nobody).
	onLogin func(C, Identity)
	// policyGen counts SetPolicy calls: a connection decided under an
	// older generation that changes entity changed by a rule.
	policyGen uint64
	// long resolves cut client-ids under longOf, the policy it was built
	// for (built at the first cut client-id after a policy change).
	long    *entity.LongClients
	longOf  *entity.Policy
	cause   Cause
	lastAPI int16 // the API key of the last request parsed
	// unresolvedCounted: the sample being learned counted in
	// Stats.Unresolved already (a request counts once).
	unresolvedCounted bool
	Stats             Stats
}

type conn struct {
	born     uint64 // which connection on the 4-tuple (the data path's Born)
	clientID string
	decision Decision
	session  session
	// SASL_PLAINTEXT connections: the mechanism the handshake named and
	// the principal its first SaslAuthenticate named (kafka.Request keeps
	// nothing else of the exchange, and neither does the learner).
	mechanism string
	user      string
	policyGen uint64 // the policy generation of its last decision
	// clientIDCut: the last request's client-id is a prefix (Sample), and
	// clientIDHash the hash of the rest when clientIDHashed.
	clientIDCut    bool
	clientIDHashed bool
	clientIDHash   uint64
	// held is, per direction, the strictest topic-partition the
	// connection's requests have named under policy generation heldGen:
	// it holds the connection from then on (decide).
	held    [2]entity.Key
	heldGen uint64
}

// New returns a learner resolving entities with policy and topic IDs with
// topics (which may be nil when no broker metadata is available: topic-ID
// requests then fall back to their client entity).
func New[C comparable](policy *entity.Policy, topics TopicNames) *Learner[C] {
	return &Learner[C]{parser: kafka.NewParser(), policy: policy, topics: topics, conns: make(map[C]*conn)}
}

// SetPolicy swaps in a new policy (configuration reload). Connections are
// re-resolved as their next requests arrive.
func (l *Learner[C]) SetPolicy(p *entity.Policy) { l.policy = p; l.policyGen++ }

// Policy is the policy in use.
func (l *Learner[C]) Policy() *entity.Policy { return l.policy }

// OnLogin registers f to be told every principal a connection proves, as
// it is proved, and before that the mechanism its handshake names (an
// Identity without a User): the agent persists both, so that a restart or
// freed state between a SaslHandshake and its SaslAuthenticate still reads
// the login (Adopt).
func (l *Learner[C]) OnLogin(f func(C, Identity)) { l.onLogin = f }

// Known reports whether the learner holds state for this connection (c,
// born): if not, its next Learn starts from nothing unless Adopt seeds it.
func (l *Learner[C]) Known(c C, born uint64) bool {
	st, ok := l.conns[c]
	return ok && st.born == born
}

// Adopt seeds the state of a connection this learner has not followed
// from what outlives a learner: the identity it proved (zero if none; a
// mechanism without a user when its login was under way) and its current
// binding, as decided targets (a direction not in bound stays
// undecided). Until a request says otherwise, the connection keeps that
// binding: a request that decides nothing (a SASL connection's request
// before its principal is known, an incremental fetch of a session this
// learner never saw open) never moves it. A rule change still re-resolves
// it from its next request that names its entity.
func (l *Learner[C]) Adopt(c C, born uint64, id Identity, bound Decision) {
	st := &conn{born: born, decision: bound, mechanism: id.Mechanism, user: id.User, policyGen: l.policyGen, heldGen: l.policyGen}
	// A topic-partition binding is what the connection's requests named:
	// it keeps holding a producer, as it did under the earlier learner.
	if t, ok := bound.Target(entity.Produce); ok && t.Key.Kind == entity.KindTopicPartition {
		st.held[entity.Produce] = t.Key
	}
	l.conns[c] = st
	l.Stats.Adopted++
}

// Cause says why the last Learn changed its connection's decision
// (CauseNone when it did not).
func (l *Learner[C]) Cause() Cause { return l.cause }

// LastAPI is the API key of the last request Learn parsed (-1: none).
func (l *Learner[C]) LastAPI() int16 { return l.lastAPI }

// SetSASLListeners says which connections came in on SASL_PLAINTEXT
// listeners. Only there is a principal read: on any other listener a
// SaslAuthenticate was not asked for, and its name would be the client's
// claim. On those listeners a connection is decided only once its
// principal is known (until then the agent holds it to the unresolved
// entity), so losing the authentication's sample never frees a user from
// its quota; the broker answers nothing but ApiVersions and the SASL
// exchange before authentication, and closes a connection that fails it.
func (l *Learner[C]) SetSASLListeners(f func(C) bool) { l.saslListener = f }

// SetTopics replaces the topic-ID source (a reload changed the metadata
// client's settings).
func (l *Learner[C]) SetTopics(t TopicNames) { l.topics = t }

// Retain keeps the state of the connections keep returns true for and
// frees the rest (the agent's scans pass what the data path still holds).
// It returns how many it freed.
func (l *Learner[C]) Retain(keep func(C) bool) int {
	n := 0
	for c := range l.conns {
		if !keep(c) {
			delete(l.conns, c)
			n++
		}
	}
	return n
}

// Connections returns how many connections have state.
func (l *Learner[C]) Connections() int { return len(l.conns) }

// Decision returns a connection's current decision.
func (l *Learner[C]) Decision(c C) (Decision, bool) {
	st, ok := l.conns[c]
	if !ok {
		return Decision{}, false
	}
	return st.decision, true
}

// Learn reads one sample of connection c (born tells connections on one
// 4-tuple apart: a new value is a new connection, which inherits nothing)
// and returns the connection's decision and whether it changed. A sample
// that cannot be parsed returns the error and the connection keeps its
// last decision: a bad request never blocks traffic.
func (l *Learner[C]) Learn(c C, born uint64, sample []byte) (Decision, bool, error) {
	return l.LearnSample(c, born, Sample{Data: sample, Whole: true})
}

// LearnSample is Learn for a sample with what the data path said of it.
func (l *Learner[C]) LearnSample(c C, born uint64, s Sample) (Decision, bool, error) {
	sample := s.Data
	l.cause, l.lastAPI, l.unresolvedCounted = CauseNone, -1, false
	st := l.conns[c]
	if st != nil && st.born != born {
		l.Stats.NewConnections++
		st = nil
	}
	if st == nil {
		st = &conn{born: born}
		l.conns[c] = st
	}
	r := &l.req
	if err := l.parser.Parse(sample, r); err != nil {
		l.Stats.Failed++
		l.countUndecided(st)
		return st.decision, false, err
	}
	l.Stats.Parsed++
	l.lastAPI = r.APIKey
	if r.Truncated {
		l.Stats.Truncated++
	}
	if !r.HeaderComplete {
		l.countUndecided(st)
		return st.decision, false, nil // nothing to learn from a cut header
	}
	before := st.decision
	st.clientID, st.clientIDCut = r.ClientID, s.ClientIDCut
	st.clientIDHashed, st.clientIDHash = s.ClientIDCut && s.ClientIDHashed, s.ClientIDHash
	// A mechanism whose messages name no principal this parser reads
	// (GSSAPI, OAUTHBEARER) leaves the connection to its client-id.
	sasl := l.saslListener != nil && l.saslListener(c) && st.mechanism != kafka.MechanismOther
	if sasl && st.user == "" {
		switch r.APIKey {
		case kafka.KeySaslHandshake:
			st.mechanism = r.Mechanism
			if l.onLogin != nil {
				l.onLogin(c, Identity{Mechanism: st.mechanism})
			}
		case kafka.KeySaslAuthenticate:
			if principalFits(st.mechanism, r.PrincipalFormat) {
				st.user = r.Principal
				key := l.clientEntity(st)
				st.set(entity.Produce, key)
				st.set(entity.Fetch, key)
				if l.onLogin != nil {
					l.onLogin(c, Identity{Mechanism: st.mechanism, User: st.user})
				}
				if st.decision != before {
					l.cause = CauseLogin
				}
				st.policyGen = l.policyGen
			}
		}
		if st.user == "" && r.APIKey != kafka.KeyApiVersions && r.APIKey != kafka.KeySaslHandshake {
			l.countUndecided(st) // a login it could not read, or a request before any
		}
		return st.decision, st.decision != before, nil
	}
	if sasl {
		// A principal this learner did not see proved (Adopt) decides what
		// the login did: both directions are the user's until a request
		// says more.
		login := l.clientEntity(st)
		for _, d := range entity.Directions {
			if !st.decision.Decided[d] {
				st.set(d, login)
			}
		}
	}
	if r.IsFollowerFetch() || kafka.IsBrokerFetcherClientID(r.ClientID) {
		// Samples come only from governed peers (the data path never samples
		// exempt ones): a claim to be a broker is noted and ignored.
		l.Stats.ReplicationClaims++
	}
	switch {
	case r.APIKey == kafka.KeyProduce:
		switch {
		case len(r.Topics) > 0 || !r.Truncated:
			st.set(entity.Produce, l.decide(st, entity.Produce, nil, r))
		case s.Whole && l.policy.HasTopicPartitions():
			// The whole sample ended before its first partition: what the
			// client chose to put before them (a transactional.id, header
			// tags) hides them, and they may be a configured
			// topic-partition's.
			st.set(entity.Produce, l.unresolved())
		case !st.decision.Decided[entity.Produce]:
			// Fragments were lost: the client's until more is known.
			st.set(entity.Produce, l.hold(st, entity.Produce, entity.Key{}))
		}
	case r.APIKey == kafka.KeyFetch:
		if r.Truncated && len(r.Topics) == 0 && len(r.Forgotten) == 0 {
			if s.Whole && l.policy.HasTopicPartitions() {
				st.set(entity.Fetch, l.unresolved()) // hidden as Produce's can be
				break
			}
			if st.decision.Decided[entity.Fetch] {
				break // fragments lost before its partitions: says nothing new
			}
		}
		env := l.sessionEnv()
		st.session.update(r, &env)
		if !st.session.known && r.SessionEpoch != epochFinal {
			// An incremental request of a session this learner never saw
			// open: its set is not the broker's, so this request decides
			// nothing and the connection keeps its binding (or stays
			// unknown) until the client opens a session again.
			break
		}
		var set *session // sessionless: the request's own partitions are the set
		if r.SessionEpoch != epochFinal {
			set = &st.session
		}
		st.set(entity.Fetch, l.decide(st, entity.Fetch, set, r))
	case r.APIKey == kafka.KeyShareFetch:
		// A share group's records, attributed as Fetch's. A share session's
		// later requests name only what changed: one that names no topic
		// keeps the decision its session's topics made.
		if len(r.Topics) > 0 || !st.decision.Decided[entity.Fetch] {
			st.set(entity.Fetch, l.decide(st, entity.Fetch, nil, r))
		}
	default:
		// Every connection opens with ApiVersions, which names the client:
		// until a Produce or Fetch says more, both directions are the
		// client's.
		client := l.clientEntity(st)
		for _, d := range entity.Directions {
			if !st.decision.Decided[d] {
				st.set(d, client)
			}
		}
	}
	if st.decision != before {
		l.cause = CauseRequest
		if st.policyGen != l.policyGen && before.Decided != [2]bool{} {
			l.cause = CauseRuleChange
		}
	}
	st.policyGen = l.policyGen
	l.countUndecided(st)
	return st.decision, st.decision != before, nil
}

// countUndecided counts a request that leaves its connection undecided in
// a direction (Stats.Unresolved).
func (l *Learner[C]) countUndecided(st *conn) {
	if st.decision.Decided != [2]bool{true, true} && !l.unresolvedCounted {
		l.Stats.Unresolved++
		l.unresolvedCounted = true
	}
}

func (st *conn) set(d entity.Direction, t Target) {
	if d == entity.Produce {
		st.decision.Produce = t
	} else {
		st.decision.Fetch = t
	}
	st.decision.Decided[d] = true
}
