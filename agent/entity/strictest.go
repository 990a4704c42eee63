package entity

import (
	"cmp"
	"strings"
)

// The strictest topic-partition: what holds a connection whose requests
// name several partitions, or name partitions its sample could not reach
// (docs/identity.md, "Requests that name several partitions"). A TCP
// stream cannot be split between classes, so one entity holds the whole
// connection, and no request shape may make it a laxer one.

// strictestTPs is, per direction, the strictest configured topic-partition
// of each topic and of all topics, computed once per policy.
type strictestTPs struct {
	byTopic [2]map[string]Key
	any     [2]Key
}

func (p *Policy) compileStrictest() {
	for _, d := range Directions {
		p.strictest.byTopic[d] = map[string]Key{}
	}
	for tp, c := range p.topicParts {
		k := Key{Kind: KindTopicPartition, Name: c.name}
		for _, d := range Directions {
			if cur, ok := p.strictest.byTopic[d][tp.topic]; !ok || p.Stricter(d, k, cur) {
				p.strictest.byTopic[d][tp.topic] = k
			}
			if cur := p.strictest.any[d]; cur == (Key{}) || p.Stricter(d, k, cur) {
				p.strictest.any[d] = k
			}
		}
	}
}

// StrictestTopicPartition is the strictest configured topic-partition of
// topic in a direction (of every topic when topic is ""); false when none
// is configured there.
func (p *Policy) StrictestTopicPartition(d Direction, topic string) (Key, bool) {
	if topic == "" {
		k := p.strictest.any[d]
		return k, k != (Key{})
	}
	k, ok := p.strictest.byTopic[d][topic]
	return k, ok
}

// Stricter reports whether a holds a connection more tightly than b in a
// direction: the lower limit, then the lower weight (the smaller share
// under contention), then the lower reservation; equal parameters are
// ordered by name, so the choice never depends on request order.
func (p *Policy) Stricter(d Direction, a, b Key) bool {
	pa, pb := p.Params(a, d), p.Params(b, d)
	if c := cmp.Or(cmp.Compare(pa.Limit, pb.Limit), cmp.Compare(pa.Weight, pb.Weight),
		cmp.Compare(pa.Reservation, pb.Reservation)); c != 0 {
		return c < 0
	}
	return strings.Compare(a.String(), b.String()) < 0
}
