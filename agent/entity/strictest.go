package entity

import (
	"cmp"
	"slices"
	"strings"
)

// The strictest topic-partition: what holds a connection whose requests
// name several partitions, or name partitions its sample could not reach
// (docs/identity.md, "Requests that name several partitions"). A TCP
// stream cannot be split between classes, so one entity holds the whole
// connection, and no request shape may make it a laxer one.

// strictestTPs is, per direction, the configured topic-partitions ranked
// from the strictest (rank r is ranked[r]), and the strictest of each
// topic: computed once per policy, so that comparing two of them on the
// learner's path is a look-up, not two resolutions of their parameters.
type strictestTPs struct {
	ranked  [2][]Key
	rank    [2]map[Key]int32
	byTopic [2]map[string]Key
}

func (p *Policy) compileStrictest() {
	for _, d := range Directions {
		ranked := make([]Key, 0, len(p.topicParts))
		topicOf := make(map[Key]string, len(p.topicParts))
		for tp, c := range p.topicParts {
			k := Key{Kind: KindTopicPartition, Name: c.name}
			ranked = append(ranked, k)
			topicOf[k] = tp.topic
		}
		slices.SortFunc(ranked, func(a, b Key) int { return p.compareParams(d, a, b) })
		p.strictest.ranked[d] = ranked
		p.strictest.rank[d] = make(map[Key]int32, len(ranked))
		p.strictest.byTopic[d] = map[string]Key{}
		for i, k := range ranked {
			p.strictest.rank[d][k] = int32(i)
			if _, ok := p.strictest.byTopic[d][topicOf[k]]; !ok {
				p.strictest.byTopic[d][topicOf[k]] = k // the first met is its topic's strictest
			}
		}
	}
}

// RankedTopicPartitions is every configured topic-partition from the
// strictest in a direction; TopicPartitionRank is one's place in it.
func (p *Policy) RankedTopicPartitions(d Direction) []Key { return p.strictest.ranked[d] }

// TopicPartitionRank is a configured topic-partition's place in
// RankedTopicPartitions (false for any other key).
func (p *Policy) TopicPartitionRank(d Direction, k Key) (int32, bool) {
	r, ok := p.strictest.rank[d][k]
	return r, ok
}

// StrictestTopicPartition is the strictest configured topic-partition of
// topic in a direction (of every topic when topic is ""); false when none
// is configured there.
func (p *Policy) StrictestTopicPartition(d Direction, topic string) (Key, bool) {
	if topic == "" {
		if len(p.strictest.ranked[d]) == 0 {
			return Key{}, false
		}
		return p.strictest.ranked[d][0], true
	}
	k, ok := p.strictest.byTopic[d][topic]
	return k, ok
}

// Stricter reports whether a holds a connection more tightly than b in a
// direction: the lower limit, then the lower weight (the smaller share
// under contention), then the lower reservation; equal parameters are
// ordered by name, so the choice never depends on request order.
func (p *Policy) Stricter(d Direction, a, b Key) bool {
	ra, oka := p.strictest.rank[d][a]
	rb, okb := p.strictest.rank[d][b]
	if oka && okb {
		return ra < rb
	}
	return p.compareParams(d, a, b) < 0
}

func (p *Policy) compareParams(d Direction, a, b Key) int {
	pa, pb := p.Params(a, d), p.Params(b, d)
	return cmp.Or(cmp.Compare(pa.Limit, pb.Limit), cmp.Compare(pa.Weight, pb.Weight),
		cmp.Compare(pa.Reservation, pb.Reservation), strings.Compare(a.String(), b.String()))
}
