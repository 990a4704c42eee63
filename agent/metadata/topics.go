// Package metadata is the agent's Kafka client: it reads the local
// broker's metadata (topic IDs to names, the cluster's brokers) and, with
// kafka_quotas: import, the cluster's client quotas, each refreshed on its
// own interval. The agent sees them through learner.TopicNames and the
// agent's BrokerSource and QuotaSource.
package metadata

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/learner"
)

// Topics maps topic IDs to names from the local broker's metadata,
// refreshed every interval and, at most once per minGap, soon after a
// lookup misses (a topic created since the last refresh).
type Topics struct {
	adm      *kadm.Client
	interval time.Duration
	minGap   time.Duration
	log      *slog.Logger

	mu      sync.RWMutex
	names   map[[16]byte]string
	brokers []learner.Broker
	// Refreshes and Failures count metadata reads, for metrics.
	Refreshes, Failures uint64

	kick chan struct{}
}

// DefaultMinRefreshGap rate-limits refreshes triggered by unknown IDs: a
// client sending a deleted topic's ID must not hammer the broker.
const DefaultMinRefreshGap = 5 * time.Second

// NewTopics reads metadata through client (which it does not close).
func NewTopics(client *kgo.Client, interval, minGap time.Duration, log *slog.Logger) *Topics {
	return &Topics{
		adm:      kadm.NewClient(client),
		interval: interval,
		minGap:   minGap,
		log:      log,
		names:    map[[16]byte]string{},
		kick:     make(chan struct{}, 1),
	}
}

// TopicName implements TopicNames. A miss asks for a refresh without waiting.
func (m *Topics) TopicName(id [16]byte) (string, bool) {
	m.mu.RLock()
	name, ok := m.names[id]
	m.mu.RUnlock()
	if !ok {
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
	return name, ok
}

// Refresh reads every topic's ID, internal topics included, and replaces
// the table. On failure the old table stays.
func (m *Topics) Refresh(ctx context.Context) error {
	details, err := m.adm.ListTopicsWithInternal(ctx)
	if err != nil {
		m.mu.Lock()
		m.Failures++
		m.mu.Unlock()
		return fmt.Errorf("read topic metadata: %w", err)
	}
	names := make(map[[16]byte]string, len(details))
	for name, d := range details {
		if d.Err == nil && d.ID != (kadm.TopicID{}) {
			names[d.ID] = name
		}
	}
	m.mu.Lock()
	m.names = names
	m.Refreshes++
	m.mu.Unlock()
	// The cluster's brokers, for the replication check (an error here
	// keeps the last list: topics are what this refresh is for).
	if md, err := m.adm.BrokerMetadata(ctx); err == nil {
		brokers := resolveBrokers(ctx, md.Brokers)
		m.mu.Lock()
		m.brokers = brokers
		m.mu.Unlock()
	}
	return nil
}

// Brokers is the cluster's brokers as of the last refresh.
func (m *Topics) Brokers() []learner.Broker {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.brokers
}

func resolveBrokers(ctx context.Context, details kadm.BrokerDetails) []learner.Broker {
	local := map[netip.Addr]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				local[p.Addr().Unmap()] = true
			}
		}
	}
	out := make([]learner.Broker, 0, len(details))
	for _, d := range details {
		b := learner.Broker{ID: d.NodeID, Host: d.Host, Port: d.Port}
		if a, err := netip.ParseAddr(d.Host); err == nil {
			b.Addrs = []netip.Addr{a.Unmap()}
		} else if addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", d.Host); err == nil {
			for _, a := range addrs {
				b.Addrs = append(b.Addrs, a.Unmap())
			}
		}
		for _, a := range b.Addrs {
			b.Local = b.Local || local[a]
		}
		out = append(out, b)
	}
	return out
}

// Run refreshes until ctx ends: at once, every interval, and after misses
// (at most once per minGap).
func (m *Topics) Run(ctx context.Context) {
	ticker := time.NewTicker(m.interval)
	defer ticker.Stop()
	var last time.Time
	refresh := func() {
		last = time.Now()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := m.Refresh(rctx); err != nil && ctx.Err() == nil {
			m.log.Warn("topic metadata refresh failed; topic-ID requests fall back to their client entity", "err", err)
		}
	}
	refresh()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			refresh()
		case <-m.kick:
			if wait := m.minGap - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			refresh()
		}
	}
}

// ClientID is the client-id the agent's Kafka clients send. With a
// cluster section each agent has its own, sluice-agent-<name>-<broker id>:
// Kafka's quotas hold a client-id to one bucket per broker, so a default
// client quota shared by every agent's coordination traffic would throttle
// them as one (and one agent's burst would hold the others' reports back).
func ClientID(cfg config.Config) string {
	if !cfg.Cluster.Enabled {
		return "sluice-agent"
	}
	return fmt.Sprintf("sluice-agent-%s-%d", cfg.Cluster.Name, cfg.Cluster.BrokerID)
}

// ClientOptions builds the metadata client's options from the bootstrap,
// SASL and TLS settings.
func ClientOptions(cfg config.Config) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Bootstrap...),
		kgo.ClientID(ClientID(cfg)),
		// kgo answers Metadata requests from a cache kept for MetadataMinAge
		// (default 5 s), which would hide a new topic's ID that long after a
		// miss; Topics rate-limits its refreshes itself.
		kgo.MetadataMinAge(250 * time.Millisecond),
	}
	switch cfg.SASL.Mechanism {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: cfg.SASL.Username, Pass: cfg.SASL.Password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: cfg.SASL.Username, Pass: cfg.SASL.Password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: cfg.SASL.Username, Pass: cfg.SASL.Password}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("sasl.mechanism: %q is not supported", cfg.SASL.Mechanism)
	}
	if cfg.TLS.Enabled {
		tc := &tls.Config{ServerName: cfg.TLS.ServerName, InsecureSkipVerify: cfg.TLS.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
		if cfg.TLS.CAFile != "" {
			pem, err := os.ReadFile(cfg.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("tls.ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, errors.New("tls.ca_file: no certificates found")
			}
			tc.RootCAs = pool
		}
		if cfg.TLS.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(cfg.TLS.CertFile, cfg.TLS.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("tls.cert_file: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	return opts, nil
}
