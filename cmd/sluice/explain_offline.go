package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/status"
)

// offlineQuery is what `sluice explain --config FILE` resolves: a client
// as Kafka would describe it (kafka-configs --describe --client-id X
// --user U), and optionally a topic-partition its requests name.
type offlineQuery struct {
	config, clientID, user, topicPartition string
}

func (q offlineQuery) given() bool { return q.clientID != "" || q.user != "" || q.topicPartition != "" }

// offlineExplanation is the answer, text or JSON.
type offlineExplanation struct {
	Entity     string                   `json:"entity"`
	Rule       string                   `json:"rule"`
	Directions []offlineDirectionParams `json:"directions"`
	Note       string                   `json:"note,omitempty"`
}

type offlineDirectionParams struct {
	Direction         string  `json:"direction"`
	Reservation       float64 `json:"reservation_bytes_per_second"`
	ReservationSource string  `json:"reservation_source"`
	Weight            float64 `json:"weight"`
	WeightSource      string  `json:"weight_source"`
	Limit             float64 `json:"limit_bytes_per_second"` // -1: unlimited
	LimitSource       string  `json:"limit_source"`
}

// explainOffline resolves, from the configuration file alone (no agent),
// the entity a client's bytes belong to and each of its parameters with
// where it comes from, as the agent would (entity.Policy).
func explainOffline(stdout io.Writer, q offlineQuery, asJSON bool) error {
	if !q.given() {
		return usageError{errors.New("explain --config: give --client-id, --user or --topic-partition (or an entity name without --config, to ask the running agent)")}
	}
	cfg, err := configfile.Load(q.config)
	if err != nil {
		return err
	}
	p := entity.NewPolicy(cfg.Entities)
	key, rule, err := resolveOffline(p, q)
	if err != nil {
		return err
	}
	out := offlineExplanation{Entity: key.String(), Rule: rule}
	if cfg.KafkaQuotas == "import" {
		out.Note = "kafka_quotas: import is on: the cluster's client quotas can lower these limits (not read offline; sluice explain ENTITY asks the agent)"
	}
	for _, d := range entity.Directions {
		params, src := p.Explain(key, d)
		limit := params.Limit
		if math.IsInf(limit, 1) {
			limit = -1
		}
		out.Directions = append(out.Directions, offlineDirectionParams{Direction: d.String(),
			Reservation: params.Reservation, ReservationSource: src.Reservation.String(),
			Weight: params.Weight, WeightSource: src.Weight.String(),
			Limit: limit, LimitSource: src.Limit.String()})
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(out)
	}
	fmt.Fprintf(stdout, "%s\n  rule  %s\n", out.Entity, out.Rule)
	for _, d := range out.Directions {
		limit := "unlimited"
		if d.Limit >= 0 {
			limit = rate(status.Bps(d.Limit))
		}
		fmt.Fprintf(stdout, "  %-7s reservation %s (%s), weight %g (%s), limit %s (%s)\n", d.Direction,
			rate(status.Bps(d.Reservation)), d.ReservationSource, d.Weight, d.WeightSource, limit, d.LimitSource)
	}
	if out.Note != "" {
		fmt.Fprintf(stdout, "  note  %s\n", out.Note)
	}
	return nil
}

// resolveOffline picks the entity as the agent's learner does: a configured
// topic-partition first, then KIP-55's user levels, then the client levels.
func resolveOffline(p *entity.Policy, q offlineQuery) (entity.Key, string, error) {
	if q.topicPartition != "" {
		i := strings.LastIndexByte(q.topicPartition, '-')
		n, err := strconv.ParseInt(q.topicPartition[i+1:], 10, 32)
		if i <= 0 || err != nil || n < 0 {
			return entity.Key{}, "", usageError{fmt.Errorf("--topic-partition %q: want TOPIC-PARTITION, such as orders-0", q.topicPartition)}
		}
		if k, ok := p.TopicPartition(q.topicPartition[:i], int32(n)); ok {
			return k, fmt.Sprintf("entities.topic-partitions.%s: requests naming a configured topic-partition go to it before any user or client rule", q.topicPartition), nil
		}
	}
	k := p.Entity(q.user, q.clientID)
	configured := slices.Contains(p.ConfiguredKeys(), k)
	var rule string
	switch k.Kind {
	case entity.KindUserClient:
		rule = fmt.Sprintf("user %q's level names client-ids (entities.users.%s.clients, or users.<default>): each <user, client-id> is its own entity", q.user, q.user)
	case entity.KindUser:
		rule = fmt.Sprintf("user %q has a level of its own (entities.users.%s, or users.<default>): all its clients share it", q.user, q.user)
	case entity.KindClientPattern:
		rule = fmt.Sprintf("client-id %q matches the pattern entities.clients.'%s': every client-id it matches shares it", q.clientID, k.Name)
	case entity.KindClient:
		if configured {
			rule = fmt.Sprintf("entities.clients.%s", k.Name)
		} else {
			rule = "no entry names it: a learned client-id entity, with the clients <default> template or the global defaults"
		}
	default:
		rule = "decided by the data path"
	}
	if q.user != "" && k.Kind != entity.KindUser && k.Kind != entity.KindUserClient {
		rule += fmt.Sprintf(" (no users level names %q)", q.user)
	}
	if q.topicPartition != "" && k.Kind != entity.KindTopicPartition {
		rule += fmt.Sprintf(" (topic-partition %s is not configured)", q.topicPartition)
	}
	return k, rule, nil
}
