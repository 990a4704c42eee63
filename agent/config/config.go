// Package config is sluice's configuration as the running code sees it:
// one typed Config, its defaults and units, the rules that join keys
// (Validate) and the warnings. Reading the YAML file (keys, ranges,
// environment overrides) is agent/configfile's.
package config

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/allocator"
)

// Listener security protocols, as Kafka's listener.security.protocol.map
// names them.
const (
	ProtocolPlaintext     = "PLAINTEXT"
	ProtocolSSL           = "SSL"
	ProtocolSASLPlaintext = "SASL_PLAINTEXT"
	ProtocolSASLSSL       = "SASL_SSL"
)

// Protocols lists them in Kafka's order.
var Protocols = []string{ProtocolPlaintext, ProtocolSSL, ProtocolSASLPlaintext, ProtocolSASLSSL}

// Protocol returns a listener port's security protocol.
func (c Config) Protocol(port uint16) string {
	if p, ok := c.ListenerProtocols[port]; ok {
		return p
	}
	return ProtocolPlaintext
}

// IsTLS reports whether a listener protocol encrypts its connections
// (SSL, SASL_SSL): no request can be read there, so its connections are
// attributed by their peer (entities.peers, else the listener's entity).
func IsTLS(protocol string) bool { return protocol == ProtocolSSL || protocol == ProtocolSASLSSL }

// TLSListeners returns the listener ports whose protocol is TLS, in
// listeners' order.
func (c Config) TLSListeners() []uint16 {
	var out []uint16
	for _, p := range c.Listeners {
		if IsTLS(c.Protocol(p)) {
			out = append(out, p)
		}
	}
	return out
}

// Mode says whether the data path holds traffic back.
type Mode string

const (
	// ModeEnforce holds each entity to its dynamic limit.
	ModeEnforce Mode = "enforce"
	// ModeShadow computes and exports everything and holds nothing back.
	ModeShadow Mode = "shadow"
)

// Produce shapers (Config.ProduceShaper).
const (
	// ProduceShaperAuto: produce is held by the same backend as fetch.
	ProduceShaperAuto = "auto"
	// ProduceShaperPolice: produce is policed in place by the data path
	// (fetch stays with htb), so the ingress hooks after sluice's (clsact
	// filters, nftables netdev ingress) see every produce segment.
	ProduceShaperPolice = "police"
)

// Attach mechanisms (Config.Attach).
const (
	AttachAuto   = "auto"
	AttachTCX    = "tcx"
	AttachClsact = "clsact"
)

// Attach positions (Config.AttachPosition): where sluice's programs go
// among those already on each hook.
const (
	AttachLast  = "last"
	AttachFirst = "first"
)

// Config is the whole agent configuration. Rates are bytes per second of
// TCP payload (what Kafka's BytesIn/BytesOut count).
type Config struct {
	// Interfaces the data path attaches to.
	Interfaces []string
	// Listeners are the broker listener ports whose connections are governed.
	Listeners []uint16
	// ListenerProtocols holds each listener's security protocol, in
	// Kafka's names (Protocol…); a port not in it is PLAINTEXT.
	ListenerProtocols map[uint16]string
	// ExemptPeers are never governed (other brokers: replication).
	ExemptPeers []netip.Prefix
	// Mode: enforce or shadow.
	Mode Mode
	// Shaper backend: auto, htb, edt, police or shadow.
	Shaper string
	// ProduceShaper: auto (produce goes with Shaper) or police (with the
	// htb shaper: fetch through htb, produce policed where it arrives
	// instead of redirected to an IFB, which ends its way through the
	// host's later ingress hooks).
	ProduceShaper string
	// Attach chooses how the programs hook the interfaces: auto (TCX where
	// the kernel has it, else clsact filters), tcx, or clsact (legacy
	// cls_bpf filters, for hosts whose other tools order themselves by
	// filter priority).
	Attach string
	// AttachPosition is where the programs go among those already on each
	// hook: last (the default: after every TCX program and clsact filter
	// already there, so each of them sees every segment before sluice
	// counts, delays or redirects it; a program ahead that ends the chain,
	// such as a CNI passing with TC_ACT_OK, leaves sluice blind, which
	// status and sluice_blind_hooks report) or first (TCX BPF_F_BEFORE with
	// no anchor; under clsact a pref below every other filter's, refused
	// where another filter holds pref 1), for hosts that choose to have
	// sluice see traffic such a program would end. Needs a restart.
	AttachPosition string
	// ReplaceRootQdisc lets the htb and edt backends replace a root qdisc
	// sluice did not create (an operator's mq, fq, tbf…) instead of
	// refusing it; the kernel's default, not the operator's, comes back
	// when sluice's tree goes.
	ReplaceRootQdisc bool
	// RefreshInterval is the control-loop period.
	RefreshInterval time.Duration
	// UpdateThreshold: a rate is rewritten only when it moved by more than
	// this fraction, to spare the data path needless updates.
	UpdateThreshold float64
	// StaleAfter: when the agent's heartbeat is older, the data path holds
	// nothing back (fail open).
	StaleAfter time.Duration
	// RateWindow is how many refresh intervals the measured rate averages
	// over (Kafka's quota window is 11 × 1 s).
	RateWindow int
	// MaxQueueDelay bounds the queueing delay a shaper adds per entity;
	// beyond it packets drop and TCP backs off.
	MaxQueueDelay time.Duration
	// Produce and Fetch are the two directions' control-loop parameters.
	Produce, Fetch Direction
	// Bootstrap is the local broker, for topic ID → name metadata.
	Bootstrap []string
	SASL      SASL
	TLS       TLS
	// MetadataRefresh is how often topic IDs (and, with KafkaQuotas
	// import, the cluster's client quotas) are refreshed.
	MetadataRefresh time.Duration
	// KafkaQuotas: KafkaQuotasOff, or KafkaQuotasImport to read the
	// cluster's client quotas (kafka-configs.sh --entity-type clients) as
	// limits wherever this file sets none.
	KafkaQuotas string
	// MaxEntities bounds the entity registry; beyond it new entities share
	// one overflow entity per direction. Every entity id has an HTB class,
	// and a tree has 65,533 minors (two ids are unknown and overflow).
	MaxEntities int
	// MaxUnconfiguredEntities is the share of MaxEntities that entities
	// nobody configured (client-ids chosen by clients) may take; the rest
	// stays for configured entities, which are registered at start and on
	// reload and never reclaimed or overflowed.
	MaxUnconfiguredEntities int
	// NewEntitiesPerPeer caps how many new unconfigured entities one peer
	// address may create per second (burst: ten seconds' worth); beyond it
	// the connection shares the overflow entity until a later request.
	NewEntitiesPerPeer float64
	// EntityIdleTimeout: an entity idle this long is reclaimed.
	EntityIdleTimeout time.Duration
	// MaxConnections sizes the data path's connection table (LRU).
	MaxConnections int
	// SampleBytes is how many bytes of each sampled request reach the learner.
	SampleBytes int
	// SamplesPerSecond is each connection's sample budget after its first requests.
	SamplesPerSecond int
	// MetricsAddress is where /metrics listens.
	MetricsAddress string
	// Metrics bounds the per-entity series /metrics exports.
	Metrics Metrics
	// Socket is the unix socket `sluice status` and `explain` talk to.
	Socket string
	// PinPath is the bpffs directory for pinned maps.
	PinPath string
	// KeepAttachedOnExit leaves programs, trees and pinned state in place on
	// SIGTERM so that a restarted agent re-adopts them. The default (true)
	// was chosen by measuring restarts under load
	// (TestAgentIntegrationRestartUnderLoad): kept, a restart moved nothing
	// past a limit and re-learned no connection; detached, a 5 MB/s
	// producer ran unlimited until the new agent learned it again (~300 MB
	// past its limit with htb, ~190 MB with police). `sluice unload` removes
	// what a stopped agent left.
	KeepAttachedOnExit bool
	// LogLevel: debug, info, warn or error.
	LogLevel slog.Level
	// LogFormat: text (logfmt) or json, one record per line.
	LogFormat string
	// Entities holds the per-entity quotas.
	Entities Entities
	// Cluster holds the cluster-wide budgets (off unless the file has the
	// section).
	Cluster Cluster
}

// Direction is one direction's capacity pool and control-loop parameters:
// the allocator's own, with Capacity in bytes/s or Disabled (-1) to turn
// the direction off.
type Direction struct {
	allocator.Config
}

// Metrics chooses which entities get series of their own. Client-ids are
// the clients' choice, so exporting every entity lets clients choose the
// number of series a broker's Prometheus stores (up to max_entities × 2
// directions × each per-entity family).
type Metrics struct {
	// Entities: MetricsConfigured (series for configured entities, the
	// unknown and overflow entities, and one aggregate per direction for
	// every other entity) or MetricsAll (series for each entity, up to
	// MaxEntitySeries per direction; the rest go to the aggregate).
	Entities string
	// MaxEntitySeries caps the entities with series of their own per
	// direction in either mode.
	MaxEntitySeries int
	// WebConfigFile is a Prometheus exporter-toolkit web configuration
	// (TLS, basic auth, HTTP headers) for metrics_address; "" serves plain
	// HTTP.
	WebConfigFile string
}

// Metrics entity modes.
const (
	MetricsConfigured = "configured"
	MetricsAll        = "all"
)

// kafka_quotas values.
const (
	KafkaQuotasOff    = "off"
	KafkaQuotasImport = "import"
)

// Log formats.
const (
	LogText = "text"
	LogJSON = "json"
)

// IsClientPattern reports whether a clients key is a glob of client-ids
// (Go's path.Match syntax): every client-id it matches shares one entity.
// Java clients' default client-ids (consumer-<group>-<n>, producer-<n>)
// are one per instance; consumer-orders-* gives the group one bucket.
func IsClientPattern(name string) bool { return strings.ContainsAny(name, `*?[\`) }

// DefaultMetricsPort is /metrics' port unless metrics_address says
// otherwise. Prometheus' list of default exporter ports has no free number
// left in 9100–9999, and the numbers next to a broker are taken: 7000
// (ZooKeeper's metrics provider), 7071 (jmx_exporter as Kafka's agent),
// 8080–8083 and 8088 (Kafka UI, Schema Registry, REST Proxy, Connect,
// ksqlDB), 9090 (Prometheus, Cruise Control), 9092/9093 (Kafka), 9308
// (kafka_exporter), 9464 (the OpenTelemetry Java agent's exporter), 9999
// (JMX). 7359 is in none of those lists and below Linux's ephemeral range
// (32768–60999), where an outgoing connection could hold it at start.
const DefaultMetricsPort = "7359"

// Disabled is the capacity of a direction sluice does not govern.
const Disabled = -1

// Enabled reports whether the direction is governed.
func (d Direction) Enabled() bool { return d.Capacity != Disabled }

// SASL configures authentication to the local broker for metadata.
type SASL struct {
	// Mechanism: "" (none), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string
	Username  string
	Password  string
}

// TLS configures the metadata connection to the local broker.
type TLS struct {
	Enabled            bool
	CAFile             string
	CertFile           string
	KeyFile            string
	ServerName         string
	InsecureSkipVerify bool
}

// Quota is one entity's configuration in Kafka's vocabulary; nil means not
// set here (it then comes from the type's default template, then the
// global defaults).
type Quota struct {
	ProducerByteRate        *float64
	ConsumerByteRate        *float64
	ProducerByteReservation *float64
	ConsumerByteReservation *float64
	QuotaWeight             *float64
	// Latency objectives (#34): the p99 the entity's produce requests, and
	// its fetches' time to first byte, should stay under at the NIC; a
	// breaker takes bandwidth from best-effort traffic to defend them.
	// Only from the file (Kafka's quota store has no such thing).
	ProduceLatencyObjective *time.Duration
	FetchLatencyObjective   *time.Duration
}

// Entities is the per-entity configuration. Each map's "<default>" entry
// (DefaultKey) is the template for that type, not an entity.
type Entities struct {
	// Clients by client-id (for consumers, client-id = group).
	Clients map[string]Quota
	// TopicPartitions by "<topic>-<partition>".
	TopicPartitions map[string]Quota
	// Users by authenticated principal (read on SASL_PLAINTEXT listeners),
	// each with its own <user, client-id> quotas (KIP-55).
	Users map[string]UserQuota
	// Peers by CIDR (canonical: masked, as netip.Prefix prints it): on TLS
	// listeners a connection belongs to the longest prefix holding its
	// peer address, decided by the data path when it starts.
	Peers map[string]Quota
	// Listeners by port: the entity of a TLS listener's connections that
	// no peer prefix holds. The loader lists every TLS listener (with no
	// parameters unless configured); keys are TLS listener ports.
	Listeners map[string]Quota
}

// UserQuota is a user's quota and its per-client quotas; both maps'
// "<default>" entries are templates, as in kafka-configs.sh
// (--entity-type users --entity-default, --entity-type clients
// --entity-default under a user).
type UserQuota struct {
	Quota
	Clients map[string]Quota
}

// MaxEntityIDs is the most entities the registry may hold: one HTB class
// each (minors 2..0xfffe) with two ids taken by unknown and overflow.
const MaxEntityIDs = 0xfffe - 2 + 1 - 2

// ReservedConfigured is how many entity ids max_unconfigured_entities
// leaves for configured entities by default.
const ReservedConfigured = 4096

// Configured counts the configured entities (templates excluded).
func (e Entities) Configured() int {
	n := 0
	for _, m := range []map[string]Quota{e.Clients, e.TopicPartitions, e.Peers, e.Listeners} {
		n += len(m)
		if _, ok := m[DefaultKey]; ok {
			n--
		}
	}
	for name, u := range e.Users {
		if name != DefaultKey {
			n++ // the user
			for client := range u.Clients {
				if client != DefaultKey {
					n++ // <user, client-id>
				}
			}
		}
	}
	return n
}

// DefaultKey names a type's template in Entities maps, spelled as Kafka
// spells it (kafka-configs.sh --entity-default writes <default>), so that a
// client really named "default" can be configured like any other.
const DefaultKey = "<default>"

// The floors under every dynamic limit (min_limit) default to what lets
// Kafka's largest default request finish in half of the clients' default
// request.timeout.ms (30 s), so a client held at the floor never retries:
//   - fetch: a consumer's fetch.max.bytes (50 MiB) in 12.5 s → 4 MiB/s;
//   - produce: a producer's max.request.size (1 MiB) in 8 s → 128 KiB/s.
const (
	KafkaRequestTimeout    = 30 * time.Second
	KafkaFetchMaxBytes     = 50 << 20
	KafkaMaxRequestSize    = 1 << 20
	DefaultFetchMinLimit   = 4 << 20
	DefaultProduceMinLimit = 128 << 10
)

// Default returns the configuration with every default (docs/design.md §4).
func Default() Config {
	loop := allocator.DefaultConfig(0) // K and the confirmation cycles are the control loop's
	loop.Capacity, loop.SafetyRatio, loop.ActivityThreshold = Disabled, 0.9, 1024
	produce, fetch := Direction{Config: loop}, Direction{Config: loop}
	produce.MinLimit, fetch.MinLimit = DefaultProduceMinLimit, DefaultFetchMinLimit
	return Config{
		Mode:                    ModeEnforce,
		Shaper:                  "auto",
		ProduceShaper:           ProduceShaperAuto,
		Attach:                  AttachAuto,
		AttachPosition:          AttachLast,
		RefreshInterval:         time.Second,
		UpdateThreshold:         0.05,
		StaleAfter:              10 * time.Second,
		KeepAttachedOnExit:      true,
		LogFormat:               LogText,
		RateWindow:              11,
		MaxQueueDelay:           200 * time.Millisecond,
		Produce:                 produce,
		Fetch:                   fetch,
		Bootstrap:               []string{"127.0.0.1:9092"},
		MetadataRefresh:         30 * time.Second,
		KafkaQuotas:             KafkaQuotasOff,
		MaxEntities:             MaxEntityIDs,
		MaxUnconfiguredEntities: MaxEntityIDs - ReservedConfigured,
		NewEntitiesPerPeer:      50,
		EntityIdleTimeout:       time.Hour,
		MaxConnections:          262144,
		SampleBytes:             256,
		SamplesPerSecond:        200,
		MetricsAddress:          "127.0.0.1:" + DefaultMetricsPort,
		Metrics:                 Metrics{Entities: MetricsConfigured, MaxEntitySeries: 1000},
		Socket:                  "/run/sluice/sluice.sock",
		PinPath:                 "/sys/fs/bpf/sluice",
		LogLevel:                slog.LevelInfo,
		Entities: Entities{Clients: map[string]Quota{}, TopicPartitions: map[string]Quota{}, Users: map[string]UserQuota{},
			Peers: map[string]Quota{}, Listeners: map[string]Quota{}},
		Cluster: Cluster{Mode: ModeEnforce, Topic: "__sluice_cluster_budgets", ReplicationFactor: -1, Retention: 10 * time.Minute,
			Lease: 30 * time.Second, Fallback: FallbackEvenSplit, MaxDelivery: 5 * time.Second, StateFile: "/var/lib/sluice/cluster.state",
			Entities: ClusterEntities{Clients: map[string]ClusterQuota{}, Users: map[string]ClusterQuota{}}},
	}
}

// SplitTopicPartition splits "<topic>-<partition>" at the last dash.
func SplitTopicPartition(name string) (topic string, partition int32, err error) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 || i == len(name)-1 {
		return "", 0, fmt.Errorf("%q is not <topic>-<partition>", name)
	}
	p, perr := strconv.ParseInt(name[i+1:], 10, 32)
	if perr != nil || p < 0 {
		return "", 0, fmt.Errorf("%q is not <topic>-<partition>: %q is not a partition number", name, name[i+1:])
	}
	return name[:i], int32(p), nil
}
