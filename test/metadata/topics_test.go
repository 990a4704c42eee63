package metadata_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/metadata"
)

// TestLearnTopicIDsFromBrokerMetadata: IDs resolve from the broker's
// metadata, and an ID that appears later (a new topic) resolves after the
// miss triggers a refresh, without waiting for the periodic one.
func TestLearnTopicIDsFromBrokerMetadata(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders", "__consumer_offsets"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	client := metadataClient(t, cluster)
	adm := kadm.NewClient(client)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	details, err := adm.ListTopicsWithInternal(ctx)
	if err != nil {
		t.Fatal(err)
	}

	topics := metadata.NewTopics(client, time.Hour, 20*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := topics.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"orders", "__consumer_offsets"} {
		if got, ok := topics.TopicName(details[name].ID); !ok || got != name {
			t.Errorf("%s: got %q %v", name, got, ok)
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { topics.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()

	t0 := time.Now()
	created, err := adm.CreateTopic(ctx, 1, 1, nil, "payments")
	if err != nil || created.Err != nil {
		t.Fatalf("create topic: %v %v", err, created.Err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if name, ok := topics.TopicName(created.ID); ok {
			if name != "payments" {
				t.Fatalf("new topic resolved to %q", name)
			}
			t.Logf("resolved after %v", time.Since(t0))
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a new topic's ID never resolved after misses")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

func TestLearnClientOptionsRejectBadTLSFiles(t *testing.T) {
	cfg := config.Default()
	cfg.TLS.Enabled = true
	cfg.TLS.CAFile = t.TempDir() + "/missing.pem"
	if _, err := metadata.ClientOptions(cfg); err == nil {
		t.Error("a missing CA file was accepted")
	}
	cfg.TLS.CAFile = ""
	cfg.SASL = config.SASL{Mechanism: "SCRAM-SHA-512", Username: "u", Password: "p"}
	if opts, err := metadata.ClientOptions(cfg); err != nil || len(opts) < 3 {
		t.Errorf("SCRAM + TLS: %d options, %v", len(opts), err)
	}
}

// metadataClient is the agent's metadata client (ClientOptions) for a
// kfake cluster, closed when the test ends.
func metadataClient(t *testing.T, cluster *kfake.Cluster, more ...kgo.Opt) *kgo.Client {
	t.Helper()
	cfg := config.Default()
	cfg.Bootstrap = cluster.ListenAddrs()
	opts, err := metadata.ClientOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kgo.NewClient(append(opts, more...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return client
}

// The refresh also reads the cluster's brokers, with the addresses their
// hosts resolve to; kfake's brokers listen on this host (127.0.0.1), so
// each is local.
func TestRefreshReadsTheClustersBrokers(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := metadata.NewTopics(metadataClient(t, cluster), time.Hour, 20*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := topics.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	brokers := topics.Brokers()
	if len(brokers) != 3 {
		t.Fatalf("brokers %+v, want 3", brokers)
	}
	for _, b := range brokers {
		if len(b.Addrs) != 1 || !b.Addrs[0].IsLoopback() || !b.Local || b.Port == 0 {
			t.Errorf("broker %+v: want one loopback address, local", b)
		}
	}
}

// TestLeadersOfSharedTopics: two budgets naming one topic (and another of
// their own) get each topic's leaders counted; a request naming a topic
// twice would fail and leave every count unknown.
func TestLeadersOfSharedTopics(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(6, "history", "events"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	client := metadataClient(t, cluster)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leaders := metadata.NewLeaders(client, []string{"history", "events", "history"}, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := leaders.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	var total uint32
	for broker := range int32(3) {
		n, ok := leaders.Led(broker, []string{"history", "events"})
		if !ok {
			t.Fatalf("broker %d: leadership unknown after a refresh", broker)
		}
		total += n
	}
	if total != 12 {
		t.Fatalf("the brokers lead %d partitions of history and events together, want 12", total)
	}
}
