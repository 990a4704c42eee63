package metadata

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/learner"
)

// ClusterQuotas reads the cluster's client quotas (kafka_quotas: import)
// at start and every interval. A failed read keeps the last good set.
type ClusterQuotas struct {
	adm      *kadm.Client
	interval time.Duration
	max      int
	log      *slog.Logger

	mu     sync.Mutex
	latest entity.KafkaQuotas
	stats  learner.QuotaImportStats
}

// NewClusterQuotas reads quotas through client (which it does not close),
// keeping at most max client entries (the room the registry has for
// configured entities).
func NewClusterQuotas(client *kgo.Client, interval time.Duration, max int, log *slog.Logger) *ClusterQuotas {
	return &ClusterQuotas{adm: kadm.NewClient(client), interval: interval, max: max, log: log}
}

// Latest returns the last good set and the import counters.
func (c *ClusterQuotas) Latest() (entity.KafkaQuotas, learner.QuotaImportStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest, c.stats
}

// Refresh reads every client quota once.
func (c *ClusterQuotas) Refresh(ctx context.Context) error {
	described, err := c.adm.DescribeClientQuotas(ctx, false, nil) // no filter: every entity
	if err != nil {
		c.mu.Lock()
		c.stats.Failures++
		c.mu.Unlock()
		return fmt.Errorf("describe client quotas: %w", err)
	}
	quotas, skipped := ClientQuotasOf(described, c.max)
	c.mu.Lock()
	c.latest = quotas
	c.stats.Generation++
	c.stats.Applied, c.stats.Skipped, c.stats.LastImport = quotas.Len(), skipped, time.Now()
	c.mu.Unlock()
	return nil
}

// Run refreshes at once and every interval until ctx ends.
func (c *ClusterQuotas) Run(ctx context.Context) {
	ticker := time.NewTicker(c.interval)
	defer ticker.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.Refresh(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.log.Warn("kafka quota import failed; the last imported quotas stay", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// ClientQuotasOf keeps the described quotas sluice applies: the
// producer_byte_rate and consumer_byte_rate of client-id, user and
// <user, client-id> entities and their <default>s, at most max entries
// (the first by name; defaults included). It returns how many entries it
// skipped (ip quotas, values that are not a positive rate, beyond max).
func ClientQuotasOf(described kadm.DescribedClientQuotas, max int) (entity.KafkaQuotas, int) {
	out := entity.KafkaQuotas{Clients: map[string]config.Quota{}, Users: map[string]config.UserQuota{}}
	skipped, kept := 0, 0
	// Names in order, so that the bound keeps the same entries every time.
	described = slices.Clone(described)
	slices.SortStableFunc(described, func(a, b kadm.DescribedClientQuota) int {
		return strings.Compare(a.Entity.String(), b.Entity.String())
	})
	for _, d := range described {
		user, client, ok := quotaEntity(d.Entity)
		q, valid := rates(d.Values)
		switch {
		case !ok || !valid || q == (config.Quota{}) || kept >= max:
			skipped++
			continue
		case user == nil && *client == config.DefaultKey:
			out.ClientDefault = q
		case user == nil:
			out.Clients[*client] = q
		default:
			u := out.Users[*user]
			if client == nil {
				u.Quota = q
			} else {
				if u.Clients == nil {
					u.Clients = map[string]config.Quota{}
				}
				u.Clients[*client] = q
			}
			out.Users[*user] = u
		}
		kept++
	}
	return out, skipped
}

// quotaEntity reads a described entity as a user and a client-id (nil:
// that component is absent; config.DefaultKey: Kafka's <default>). ok is
// false for what sluice has no entity for (ip quotas, unknown types).
func quotaEntity(components kadm.ClientQuotaEntity) (user, client *string, ok bool) {
	name := func(c kadm.ClientQuotaEntityComponent) *string {
		if c.Name == nil {
			d := config.DefaultKey
			return &d
		}
		return c.Name
	}
	for _, c := range components {
		switch {
		case c.Name != nil && *c.Name == config.DefaultKey:
			return nil, nil, false // a name spelled like the default: not told apart from it
		case c.Type == "user" && user == nil:
			user = name(c)
		case c.Type == "client-id" && client == nil:
			client = name(c)
		default:
			return nil, nil, false
		}
	}
	return user, client, client != nil || user != nil
}

// rates reads producer_byte_rate and consumer_byte_rate as limits; valid
// is false when one is not a positive finite rate.
func rates(values []kadm.ClientQuotaValue) (q config.Quota, valid bool) {
	valid = true
	for _, v := range values {
		if v.Key != "producer_byte_rate" && v.Key != "consumer_byte_rate" {
			continue // request_percentage, controller_mutation_rate: not bandwidth
		}
		if math.IsNaN(v.Value) || math.IsInf(v.Value, 0) || v.Value <= 0 {
			valid = false
			continue
		}
		// Kafka writes Long.MAX_VALUE for "no quota": anything beyond
		// the largest rate sluice takes is that largest rate.
		rate := min(v.Value, config.MaxRate)
		if v.Key == "producer_byte_rate" {
			q.ProducerByteRate = &rate
		} else {
			q.ConsumerByteRate = &rate
		}
	}
	return q, valid
}
