package learner

import "github.com/sluice-dev/sluice/agent/kafka"

// session follows a connection's fetch session (KIP-227). The broker holds
// the session's partition set; a client sends it whole once (epoch 0) and
// then only changes (epoch > 0: partitions added or updated are listed,
// removed ones are in forgotten topics), so an incremental request often
// lists no partitions at all. The learner keeps the set, in the order
// partitions joined, so the first configured topic-partition in request
// order can still be found. Clients keep one session per broker connection.
type session struct {
	topics []kafka.TopicPartitions // the set, in join order
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

func (s *session) add(tp kafka.TopicPartitions, p int32) {
	for i := range s.topics {
		t := &s.topics[i]
		if !sameTopic(t, &tp) {
			continue
		}
		for _, q := range t.Partitions {
			if q == p {
				return
			}
		}
		t.Partitions = append(t.Partitions, p)
		return
	}
	s.topics = append(s.topics, kafka.TopicPartitions{Name: tp.Name, ID: tp.ID, Partitions: []int32{p}})
}

func (s *session) remove(tp kafka.TopicPartitions, p int32) {
	for i := range s.topics {
		t := &s.topics[i]
		if !sameTopic(t, &tp) {
			continue
		}
		for j, q := range t.Partitions {
			if q == p {
				t.Partitions = append(t.Partitions[:j], t.Partitions[j+1:]...)
				break
			}
		}
		if len(t.Partitions) == 0 {
			s.topics = append(s.topics[:i], s.topics[i+1:]...)
		}
		return
	}
}
