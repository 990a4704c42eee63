package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/agent"
	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/metadata"
	"github.com/sluice-dev/sluice/cluster"
	"github.com/sluice-dev/sluice/cluster/kafkalog"
	"github.com/sluice-dev/sluice/maps"
)

// leadershipRefresh is how often the cluster budgets' topics' partition
// leaders are read: a leader move changes where the reservation is spread.
const leadershipRefresh = 2 * time.Second

// newClusterLink connects the cluster budgets to their coordination topic
// and to the leadership of their topics, through the same bootstrap, SASL
// and TLS as the metadata client. Nothing here waits on Kafka: the topic is
// found or created, and read, in the background.
func newClusterLink(ctx context.Context, log *slog.Logger) func(cfg config.Config) (agent.ClusterLink, error) {
	return func(cfg config.Config) (agent.ClusterLink, error) {
		opts, err := metadata.ClientOptions(cfg)
		if err != nil {
			return agent.ClusterLink{}, err
		}
		l, err := kafkalog.Open(kafkalog.Options{
			Topic: cfg.Cluster.Topic, ReplicationFactor: int16(cfg.Cluster.ReplicationFactor), Retention: cfg.Cluster.Retention,
			MaxDelivery: cfg.Cluster.MaxDelivery, Client: opts, Now: maps.MonotonicNow, Log: log.With("component", "cluster-topic"),
		})
		if err != nil {
			return agent.ClusterLink{}, fmt.Errorf("cluster.topic: %w", err)
		}
		var topics []string
		for _, b := range cfg.Cluster.Budgets() {
			topics = append(topics, b.Topics...)
		}
		client, err := kgo.NewClient(opts...)
		if err != nil {
			l.Close()
			return agent.ClusterLink{}, fmt.Errorf("bootstrap: %w", err)
		}
		leaders := metadata.NewLeaders(client, topics, leadershipRefresh, log)
		runCtx, stop := context.WithCancel(ctx)
		go leaders.Run(runCtx)
		return agent.ClusterLink{Log: clusterLog{l}, Leaders: leaders, Stop: func() { stop(); client.Close(); l.Close() }}, nil
	}
}

// clusterLog adapts kafkalog.Log to the agent's ClusterLog.
type clusterLog struct{ *kafkalog.Log }

func (c clusterLog) Drain(fn func(r *cluster.Report)) (time.Duration, bool) {
	return c.Log.Drain(func(r *cluster.Report, _ int64) { fn(r) })
}

func (c clusterLog) Stats() agent.ClusterLogStats {
	s := c.Log.Stats()
	return agent.ClusterLogStats{Published: s.Published, PublishFailed: s.PublishFailed, Delivered: s.Delivered, Undecodable: s.Undecodable,
		TopicErrors: s.TopicErrors, LateAcks: s.LateAcks, Lag: s.Lag, CaughtUp: s.CaughtUp, LastError: s.LastError}
}
