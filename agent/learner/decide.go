package learner

import (
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/kafka"
)

// Deciding a connection's entity in a direction from one request: the
// strictest governing entity its request names, held once bound.

// decide applies docs/design.md §5 to the partitions a Produce or Fetch
// names (set: its fetch session's whole set, nil for the request's own
// partitions; r: the request sampled): a configured topic-partition wins
// over the entity of the user and client (Policy.Entity). Every partition
// counts, not the first: the strictest configured one holds the
// connection (a TCP stream cannot be split between classes). Partitions
// the sample could not reach (a Produce's record batches lie between them)
// count as the strictest configured partition of their topic, and unseen
// topics, topic IDs not yet known, or a fetch session grown past
// sessionCap as the strictest of any topic: a request too long to read
// whole is decided conservatively, never as the client. The connection
// then keeps the strictest partition it was seen to name (hold), so
// requests that name only ungoverned partitions between them never free
// it. Kafka's internal topics are never topic-partition entities; a
// client reading or writing them is governed as that client (as Kafka's
// own client quotas do: only replication is exempt, and that by its peer).
// A session's set is not walked: it keeps what decide needs as it changes
// (session.named), so a sample costs the same whatever the set's size.
func (l *Learner[C]) decide(st *conn, d entity.Direction, set *session, r *kafka.Request) Target {
	if !l.policy.HasTopicPartitions() {
		return l.clientEntity(st)
	}
	// strictest is what the request names or hides; unknownIDs, topic IDs
	// the metadata does not know yet, hold only this request (the agent
	// may have just started): a producer is not pinned by them.
	var strictest, unknown entity.Key
	stricter := func(cur *entity.Key, k entity.Key) {
		if *cur == (entity.Key{}) || l.policy.Stricter(d, k, *cur) {
			*cur = k
		}
	}
	unseen, unknownIDs := r.TopicsHidden, false
	switch {
	case set == nil:
		for i := range r.Topics {
			tp := &r.Topics[i]
			name, ok := l.topicName(tp)
			if !ok {
				unknownIDs = unknownIDs || len(tp.Partitions) > 0 || tp.Hidden
				continue
			}
			if kafka.IsInternalTopic(name) {
				continue
			}
			for _, p := range tp.Partitions {
				if k, ok := l.policy.TopicPartition(name, p); ok {
					stricter(&strictest, k)
				}
			}
		}
	case set.overflow:
		unseen = true // the set is no longer the broker's: it may hold any partition
	default:
		env := l.sessionEnv()
		strictest, unknownIDs = set.named(&env)
	}
	for i := range r.Topics {
		if tp := &r.Topics[i]; tp.Hidden {
			if name, ok := l.topicName(tp); ok && !kafka.IsInternalTopic(name) {
				if k, ok := l.policy.StrictestTopicPartition(d, name); ok {
					stricter(&strictest, k)
				}
			}
		}
	}
	if anyTP, ok := l.policy.StrictestTopicPartition(d, ""); ok {
		if unseen {
			stricter(&strictest, anyTP)
		}
		if unknownIDs {
			unknown = anyTP
		}
	}
	t := l.hold(st, d, strictest)
	if unknown != (entity.Key{}) && (t.Key.Kind != entity.KindTopicPartition || l.policy.Stricter(d, unknown, t.Key)) {
		t = Target{Key: unknown}
	}
	return t
}

// sessionEnv is what fetch sessions keep their counts against: the policy
// (which ranks its topic-partitions by strictness), its generation and
// the topic names.
func (l *Learner[C]) sessionEnv() sessionEnv {
	return sessionEnv{policy: l.policy, gen: l.policyGen, names: l.topics}
}

// hold returns the stricter of k (zero: the request named no configured
// partition) and what the connection holds already, and keeps it; with
// neither, the connection is its client's. A policy change starts over.
// Only produce connections hold: a Produce carries its own bytes, so a
// producer could otherwise put a small request for an ungoverned partition
// where it is sampled and its governed batches in the requests between.
// A fetch session's set is the broker's (the learner follows it, and a
// consumer leaving a governed partition at a rebalance leaves its limit).
func (l *Learner[C]) hold(st *conn, d entity.Direction, k entity.Key) Target {
	if d != entity.Produce {
		if k == (entity.Key{}) {
			return l.clientEntity(st)
		}
		return Target{Key: k}
	}
	if st.heldGen != l.policyGen {
		st.held, st.heldGen = [2]entity.Key{}, l.policyGen
	}
	if h := st.held[d]; h != (entity.Key{}) && (k == (entity.Key{}) || l.policy.Stricter(d, h, k)) {
		k = h
	}
	if k == (entity.Key{}) {
		return l.clientEntity(st)
	}
	st.held[d] = k
	return Target{Key: k}
}

// topicName is a topic's name, resolving a topic ID (Produce and Fetch
// v13+) through the broker's metadata; false while the ID is not known.
func (l *Learner[C]) topicName(tp *kafka.TopicPartitions) (string, bool) {
	return topicName(l.topics, tp.Name, tp.ID)
}

// topicName is the name of a topic named by name or by ID, through names
// (nil: no ID is known).
func topicName(names TopicNames, name string, id [16]byte) (string, bool) {
	if name != "" || id == ([16]byte{}) {
		return name, true
	}
	if names == nil {
		return "", false
	}
	return names.TopicName(id)
}

// clientEntity is the entity of the connection's user and client-id
// (Policy.Entity). A client-id the data path cut goes by its kept bytes
// and the hash of the rest (entity.LongClients) where no
// configured client-id or pattern can hang on the bytes cut; without the
// hash (the sample lost it) only a user level that no client-id changes
// can decide. Else the request is unresolved.
func (l *Learner[C]) clientEntity(st *conn) Target {
	if !st.clientIDCut {
		return Target{Key: l.policy.Entity(st.user, st.clientID)}
	}
	if st.clientIDHashed {
		if l.longOf != l.policy {
			l.long, l.longOf = l.policy.LongClients(), l.policy
		}
		if k, ok := l.long.Entity(st.user, st.clientID, st.clientIDHash); ok {
			return Target{Key: k}
		}
	} else if k, ok := l.policy.EntityOfCutClient(st.user, st.clientID); ok {
		return Target{Key: k}
	}
	return l.unresolved()
}

// unresolved is the entity of a request its sample cannot attribute.
func (l *Learner[C]) unresolved() Target {
	if !l.unresolvedCounted {
		l.Stats.Unresolved++
		l.unresolvedCounted = true
	}
	return Target{Key: entity.UnresolvedKey}
}

// principalFits reports whether a principal was read from the message
// format of the mechanism the handshake named.
func principalFits(mechanism string, f kafka.PrincipalFormat) bool {
	switch mechanism {
	case kafka.MechanismPlain:
		return f == kafka.PrincipalPlain
	case kafka.MechanismScramSHA256, kafka.MechanismScramSHA512:
		return f == kafka.PrincipalScram
	}
	return false
}
