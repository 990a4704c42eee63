package learner

import (
	"slices"

	"github.com/sluice-dev/sluice/agent/kafka"
)

// session follows a connection's fetch session (KIP-227). The broker holds
// the session's partition set; a client sends it whole once (epoch 0) and
// then only changes (epoch > 0: partitions added or updated are listed,
// removed ones are in forgotten topics), so an incremental request often
// lists no partitions at all. The learner keeps the set, in the order
// partitions joined, so the first configured topic-partition in request
// order can still be found. Clients keep one session per broker connection.
type session struct {
	topics []kafka.TopicPartitions // the set, in join order
	// known: this learner saw the session open (a full request, epoch 0 or
	// -1), so topics is the broker's set. A learner that starts in the
	// middle of a session (the agent restarted, or the connection's state
	// was freed) sees only changes: its set is not the broker's, and an
	// incremental request then says nothing about the connection's entity.
	known bool
}

// Fetch session epochs (KIP-227).
const (
	epochInitial = 0  // full request opening a new session
	epochFinal   = -1 // full request without a session (or closing one)
)

// update applies a Fetch request to the session.
func (s *session) update(r *kafka.Request) {
	if r.SessionEpoch == epochInitial || r.SessionEpoch == epochFinal {
		s.topics = s.topics[:0]
		s.known = true
	}
	if r.SessionEpoch == epochFinal {
		return // sessionless: the request's own partitions are the set
	}
	for _, tp := range r.Topics {
		for _, p := range tp.Partitions {
			s.add(tp, p)
		}
	}
	for _, tp := range r.Forgotten {
		for _, p := range tp.Partitions {
			s.remove(tp, p)
		}
	}
}

// partitions returns the partitions a request covers: the session's set
// when in a session, else the request's own.
func (s *session) partitions(r *kafka.Request) []kafka.TopicPartitions {
	if r.SessionEpoch == epochFinal {
		return r.Topics
	}
	return s.topics
}

func sameTopic(a, b *kafka.TopicPartitions) bool {
	return a.Name == b.Name && a.ID == b.ID
}

// topic returns the index of tp in the session's set, or -1.
func (s *session) topic(tp kafka.TopicPartitions) int {
	return slices.IndexFunc(s.topics, func(t kafka.TopicPartitions) bool { return sameTopic(&t, &tp) })
}

func (s *session) add(tp kafka.TopicPartitions, p int32) {
	i := s.topic(tp)
	if i < 0 {
		s.topics = append(s.topics, kafka.TopicPartitions{Name: tp.Name, ID: tp.ID, Partitions: []int32{p}})
		return
	}
	if t := &s.topics[i]; !slices.Contains(t.Partitions, p) {
		t.Partitions = append(t.Partitions, p)
	}
}

func (s *session) remove(tp kafka.TopicPartitions, p int32) {
	i := s.topic(tp)
	if i < 0 {
		return
	}
	t := &s.topics[i]
	if j := slices.Index(t.Partitions, p); j >= 0 {
		t.Partitions = slices.Delete(t.Partitions, j, j+1)
	}
	if len(t.Partitions) == 0 {
		s.topics = slices.Delete(s.topics, i, i+1)
	}
}
