package learner

import (
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/kafka"
)

// session follows a connection's fetch session (KIP-227). The broker holds
// the session's partition set; a client sends it whole once (epoch 0) and
// then only changes (epoch > 0: partitions added or updated are listed,
// removed ones are in forgotten topics), so an incremental request often
// lists no partitions at all. Clients keep one session per broker
// connection.
//
// The learner keeps the set, bounded by sessionCap, with adds and removes
// in O(1), and beside it what decide needs of it, kept as the set changes
// so that a sample costs the same whatever the set's size: how many of its
// partitions are each configured topic-partition (counts, by the
// strictness rank of Learner.sessionEnv) and which topics still have an ID
// no name resolved (pending). The counts are rebuilt in full, O(set), only
// when the policy changes.
type session struct {
	// known: this learner saw the session open (a full request, epoch 0 or
	// -1), so the set is the broker's. A learner that starts in the middle
	// of a session (the agent restarted, or the connection's state was
	// freed) sees only changes: its set is not the broker's, and an
	// incremental request then says nothing about the connection's entity.
	known bool
	// overflow: the client added more than sessionCap partitions. The set
	// then no longer says what the broker's holds, so it is dropped and
	// the connection is held to the strictest configured topic-partition
	// of any topic (decide) until a full request (epoch 0 or -1) resets
	// the session: a client cannot make the learner's memory or work grow
	// without bound, nor leave its limit by growing its session.
	overflow bool

	parts  map[sessionPartition]int32 // the set: each partition's index in its topic's parts
	topics map[topicRef]*sessionTopic
	// pending are the topics named by an ID that no name resolved yet
	// (TopicNames may learn it later), each at its index pending.
	pending []*sessionTopic

	// The counts, valid for policy generation gen when indexed.
	indexed bool
	gen     uint64
	counts  map[int32]int32 // rank of a configured topic-partition → its partitions in the set
	best    int32           // the lowest rank in counts (-1: none), unless stale
	stale   bool            // the best rank left the set: recompute from counts

	// work counts the entries the session's bookkeeping visits (adds,
	// removes, partitions counted, name lookups, ranks compared): a
	// deterministic measure of its cost, for tests.
	work uint64
}

// sessionCap bounds a fetch session's partitions. Kafka sets no bound of
// its own on a session (the broker's FetchSessionCache bounds how many
// sessions it keeps, max.incremental.fetch.session.cache.slots, not their
// size): a session holds what its client lists. But a consumer's session
// with one broker names only partitions that broker hosts, and Kafka's
// sizing guidance is some 4,000 partitions per broker (Apache Kafka blog,
// "Apache Kafka Supports 200K Partitions Per Cluster", 2018), so 10,000 is
// well beyond what a real consumer fetches from one broker. A hostile
// client was seen growing a session to 126,001 partitions.
const sessionCap = 10_000

// topicRef is a topic as a request names it: by name (Fetch v0–12) or by
// ID (v13+).
type topicRef struct {
	name string
	id   [16]byte
}

type sessionPartition struct {
	topic     topicRef
	partition int32
}

type sessionTopic struct {
	ref topicRef
	// name is the topic's name once resolved (its ref's, or what
	// TopicNames said of its ID). A topic ID names one topic for its
	// whole life (a topic created again gets a new ID), so a name once
	// learned is kept.
	name     string
	resolved bool
	pending  int     // index in session.pending, or -1
	parts    []int32 // the topic's partitions in the set, in no order
}

// sessionEnv is what a session's counts are kept against.
type sessionEnv struct {
	policy *entity.Policy
	gen    uint64
	names  TopicNames
}

// Fetch session epochs (KIP-227).
const (
	epochInitial = 0  // full request opening a new session
	epochFinal   = -1 // full request without a session (or closing one)
)

// update applies a Fetch request to the session.
func (s *session) update(r *kafka.Request, env *sessionEnv) {
	if r.SessionEpoch == epochInitial || r.SessionEpoch == epochFinal {
		*s = session{known: true, work: s.work}
	}
	if r.SessionEpoch == epochFinal {
		return // sessionless: the request's own partitions are the set
	}
	if s.overflow {
		return
	}
	s.sync(env)
	for i := range r.Topics {
		tp := &r.Topics[i]
		for _, p := range tp.Partitions {
			s.add(env, topicRef{tp.Name, tp.ID}, p)
		}
	}
	for i := range r.Forgotten {
		tp := &r.Forgotten[i]
		for _, p := range tp.Partitions {
			s.remove(env, topicRef{tp.Name, tp.ID}, p)
		}
	}
}

// size is how many partitions the set holds.
func (s *session) size() int { return len(s.parts) }

func (s *session) add(env *sessionEnv, ref topicRef, p int32) {
	if s.overflow {
		return
	}
	s.work++
	k := sessionPartition{ref, p}
	if _, ok := s.parts[k]; ok {
		return
	}
	if len(s.parts) >= sessionCap {
		*s = session{known: s.known, overflow: true, work: s.work}
		return
	}
	if s.parts == nil {
		s.parts, s.topics = map[sessionPartition]int32{}, map[topicRef]*sessionTopic{}
	}
	t := s.topics[ref]
	if t == nil {
		t = &sessionTopic{ref: ref, pending: -1}
		if ref.name != "" || ref.id == ([16]byte{}) {
			t.name, t.resolved = ref.name, true
		} else {
			// Resolved when decide next needs it (named), not here: the
			// lookup may ask the metadata for a refresh, and a policy
			// without topic-partitions needs no names.
			t.pending = len(s.pending)
			s.pending = append(s.pending, t)
		}
		s.topics[ref] = t
	}
	s.parts[k] = int32(len(t.parts))
	t.parts = append(t.parts, p)
	if t.resolved {
		s.count(env, t.name, p, 1)
	}
}

func (s *session) remove(env *sessionEnv, ref topicRef, p int32) {
	s.work++
	k := sessionPartition{ref, p}
	i, ok := s.parts[k]
	if !ok {
		return
	}
	delete(s.parts, k)
	t := s.topics[ref]
	last := t.parts[len(t.parts)-1]
	t.parts[i] = last
	if last != p {
		s.parts[sessionPartition{ref, last}] = i
	}
	t.parts = t.parts[:len(t.parts)-1]
	if t.resolved {
		s.count(env, t.name, p, -1)
	}
	if len(t.parts) > 0 {
		return
	}
	delete(s.topics, ref)
	if j := t.pending; j >= 0 {
		end := len(s.pending) - 1
		s.pending[j] = s.pending[end]
		s.pending[j].pending = j
		s.pending[end] = nil
		s.pending = s.pending[:end]
	}
}

// count adds delta to the count of the configured topic-partition that
// topic's partition p is, if it is one. Kafka's internal topics are never
// topic-partition entities (decide).
func (s *session) count(env *sessionEnv, topic string, p int32, delta int32) {
	if kafka.IsInternalTopic(topic) {
		return
	}
	k, ok := env.policy.TopicPartition(topic, p)
	if !ok {
		return
	}
	// Every configured topic-partition is ranked; one that were not would
	// be held as the strictest, never laxer.
	r, _ := env.policy.TopicPartitionRank(entity.Fetch, k)
	if s.counts == nil {
		s.counts = map[int32]int32{}
	}
	n := s.counts[r] + delta
	switch {
	case n > 0:
		s.counts[r] = n
		if n == delta && !s.stale && (s.best < 0 || r < s.best) {
			s.best = r
		}
	default:
		delete(s.counts, r)
		if r == s.best {
			s.stale = true
		}
	}
}

// sync makes the counts those of env's policy, rebuilding them in full
// when the policy changed since they were kept (O(set), once per reload).
func (s *session) sync(env *sessionEnv) {
	if s.indexed && s.gen == env.gen {
		return
	}
	s.indexed, s.gen = true, env.gen
	s.counts, s.best, s.stale = nil, -1, false
	for _, t := range s.topics {
		if !t.resolved {
			continue
		}
		for _, p := range t.parts {
			s.work++
			s.count(env, t.name, p, 1)
		}
	}
}

// named is what the set names for decide: its strictest configured
// topic-partition (zero: none), and whether some topic's ID is not known
// yet. A topic whose ID a name now resolves is counted from then on;
// while any is unknown the connection is held to the strictest configured
// topic-partition of any topic whatever the others are, so one failed
// lookup a sample is all the retrying costs: each pending topic is
// resolved once, and its partitions counted once.
func (s *session) named(env *sessionEnv) (strictest entity.Key, unknownIDs bool) {
	s.sync(env)
	for len(s.pending) > 0 {
		end := len(s.pending) - 1
		t := s.pending[end]
		s.work++
		name, ok := topicName(env.names, t.ref.name, t.ref.id)
		if !ok {
			break
		}
		s.pending[end] = nil
		s.pending = s.pending[:end]
		t.name, t.resolved, t.pending = name, true, -1
		for _, p := range t.parts {
			s.work++
			s.count(env, name, p, 1)
		}
	}
	if s.stale {
		s.best, s.stale = -1, false
		for r := range s.counts {
			s.work++
			if s.best < 0 || r < s.best {
				s.best = r
			}
		}
	}
	if s.best >= 0 {
		strictest = env.policy.RankedTopicPartitions(entity.Fetch)[s.best]
	}
	return strictest, len(s.pending) > 0
}
