package entity

import (
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
)

// Objective is a latency objective an entity's configuration sets (#34):
// the p99 its produce requests (Direction Produce), or its fetches' time to
// first byte (Fetch), should stay under at the NIC.
type Objective struct {
	Key       Key
	Direction Direction
	P99       time.Duration
}

// Objectives lists the configured entities' latency objectives, in a
// stable order. Templates (<default>) set none: an objective defends one
// tenant, not every entity of a type.
func Objectives(e config.Entities) []Objective {
	var out []Objective
	add := func(k Key, q config.Quota) {
		if q.ProduceLatencyObjective != nil {
			out = append(out, Objective{Key: k, Direction: Produce, P99: *q.ProduceLatencyObjective})
		}
		if q.FetchLatencyObjective != nil {
			out = append(out, Objective{Key: k, Direction: Fetch, P99: *q.FetchLatencyObjective})
		}
	}
	for name, q := range e.Clients {
		switch {
		case name == config.DefaultKey:
		case config.IsClientPattern(name):
			add(Key{Kind: KindClientPattern, Name: name}, q)
		default:
			add(Key{Kind: KindClient, Name: SafeName(name)}, q)
		}
	}
	for name, q := range e.TopicPartitions {
		if name != config.DefaultKey {
			add(Key{Kind: KindTopicPartition, Name: name}, q)
		}
	}
	for name, u := range e.Users {
		if name != config.DefaultKey {
			add(Key{Kind: KindUser, Name: SafeName(name)}, u.Quota)
		}
	}
	for name, q := range e.Peers {
		if name != config.DefaultKey {
			add(Key{Kind: KindPeer, Name: name}, q)
		}
	}
	slices.SortFunc(out, func(a, b Objective) int {
		if c := strings.Compare(a.Key.String(), b.Key.String()); c != 0 {
			return c
		}
		return int(a.Direction) - int(b.Direction)
	})
	return out
}
