// Package status is the agent's status schema and its socket: the
// snapshot, reload verdict and connection views the agent publishes, and
// the client and server of the unix socket that `sluice status`,
// `sluice explain`, `sluice reload` and the tests talk through. It imports
// nothing of the agent, so they need not either.
package status

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// Bps is a rate in bytes per second; +Inf (unlimited) is null in JSON.
type Bps float64

// MarshalJSON writes unbounded rates as null.
func (b Bps) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(b), 0) || math.IsNaN(float64(b)) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, math.Round(float64(b)*100)/100, 'f', -1, 64), nil
}

// UnmarshalJSON reads null as unlimited.
func (b *Bps) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*b = Bps(math.Inf(1))
		return nil
	}
	var f float64
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	*b = Bps(f)
	return nil
}

// EntityView is one entity in one direction as of the last cycle: each
// step of docs/design.md §4, for `sluice explain`.
type EntityView struct {
	ID        uint32 `json:"id"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	State     string `json:"state"`
	Rate      Bps    `json:"rate"` // measured, over the rate window
	Bytes     uint64 `json:"bytes"`
	Throttled bool   `json:"throttled"`
	// Parameters as resolved from the configuration, and where each came
	// from (file, kafka, file <default>, kafka <default>, global default).
	Reservation Bps         `json:"reservation"`
	Weight      float64     `json:"weight"`
	Limit       Bps         `json:"limit"`
	Sources     SourcesView `json:"sources"`
	// Control-loop steps.
	EffectiveReservation Bps `json:"effective_reservation"`
	Demand               Bps `json:"demand"`
	Green                Bps `json:"green"`
	Extra                Bps `json:"extra"`
	Headroom             Bps `json:"headroom"`
	DynamicLimit         Bps `json:"dynamic_limit"`
	// What the shaper holds back.
	QueueDelayMillis float64 `json:"queue_delay_ms"`
	DroppedPackets   uint64  `json:"dropped_packets"`
	HeldRate         Bps     `json:"held_rate"` // demand the shaper kept out: max(0, dynamic limit exceeded)
	// ShapedBytes: what the shaper let through (shaping.Held.Sent), 0 if unknown.
	ShapedBytes uint64 `json:"shaped_bytes,omitempty"`
	// HeldBytes: bytes a BPF shaper (edt, police) held back since the
	// entity was created; DroppedPacketsTotal: packets the shaper dropped.
	HeldBytes           uint64 `json:"held_bytes"`
	DroppedPacketsTotal uint64 `json:"dropped_packets_total"`
	// Configured: named in the configuration (pinned, never reclaimed).
	Configured bool `json:"configured"`
	// OwnSeries: the entity has series of its own in /metrics; otherwise it
	// is summed into its direction's Others (metrics.entities).
	OwnSeries bool `json:"own_series"`
	// Latency: its requests' latency at the NIC, per API, when any were
	// measured in the last minute (entities with series of their own).
	Latency []LatencyView `json:"latency,omitempty"`
	// HeldBy: the latency objective that trimmed its limit this cycle.
	HeldBy string `json:"held_by,omitempty"`
}

// ObjectiveView is a latency objective and its breaker's state.
type ObjectiveView struct {
	Entity          string  `json:"entity"`
	Direction       string  `json:"direction"`
	ObjectiveMillis float64 `json:"objective_p99_ms"`
	P99Millis       float64 `json:"p99_ms"` // over the last 10 s
	Requests        int     `json:"requests"`
	State           string  `json:"state"` // closed, open, half_open, ineffective
	Level           float64 `json:"level"` // what best-effort traffic is held to (1: nothing)
	// Trims is the direction whose best-effort traffic the breaker holds:
	// the objective's own, or the other one when holding its own did not
	// bring the p99 under (docs/latency.md).
	Trims string `json:"trims"`
	Why   string `json:"why"`
	// Releases counts the times the breaker gave best-effort traffic its
	// full level back, by reason (recovered, quiet, ineffective).
	Releases map[string]uint64 `json:"releases,omitempty"`
}

// LatencyView is an entity's request latency for one API, measured at the
// NIC: from the request's last byte arriving to its response's first byte
// leaving. Fetch includes the broker's long-poll wait (fetch.max.wait.ms),
// so it is time to first byte; produce is the signal to watch.
type LatencyView struct {
	API             string  `json:"api"` // produce, fetch or other
	P50Millis       float64 `json:"p50_ms"`
	P99Millis       float64 `json:"p99_ms"`
	Requests        int     `json:"requests"` // measured over the last 10 s
	P50MinuteMillis float64 `json:"p50_1m_ms"`
	P99MinuteMillis float64 `json:"p99_1m_ms"`
	RequestsMinute  int     `json:"requests_1m"`
}

// SourcesView says where each parameter came from (entity.Source).
type SourcesView struct {
	Reservation string `json:"reservation"`
	Weight      string `json:"weight"`
	Limit       string `json:"limit"`
}

// KafkaQuotasView is kafka_quotas: import's state.
type KafkaQuotasView struct {
	// Imports and Failures count the cluster reads (failures keep the last good set).
	Imports  uint64 `json:"imports"`
	Failures uint64 `json:"failures"`
	// Clients and Users: imported client and user quotas in use (a user
	// with its <user, client-id>s counts once); ClientDefault: Kafka's
	// client-id <default> is set.
	Clients       int  `json:"clients"`
	Users         int  `json:"users"`
	ClientDefault bool `json:"client_default"`
	// Skipped: entries sluice cannot apply (ip quotas, invalid values,
	// beyond the import bound); LeftOut: entities beyond the room
	// max_entities less max_unconfigured_entities leaves.
	Skipped    int       `json:"skipped"`
	LeftOut    int       `json:"left_out"`
	LastImport time.Time `json:"last_import"`
}

// OthersView sums a direction's entities without metric series of their
// own. Its byte and packet counts only grow: they add each cycle's deltas.
type OthersView struct {
	Entities       int    `json:"entities"`
	Rate           Bps    `json:"rate"`
	Bytes          uint64 `json:"bytes"`
	HeldBytes      uint64 `json:"held_bytes"`
	DroppedPackets uint64 `json:"dropped_packets"`
	// Latency: the aggregate's requests' latency at the NIC, per API.
	Latency []LatencyView `json:"latency,omitempty"`
}

// DirectionView is one direction's pool and entities.
type DirectionView struct {
	Direction     string       `json:"direction"`
	Enabled       bool         `json:"enabled"`
	Capacity      Bps          `json:"capacity"`
	C             Bps          `json:"C"`
	H             Bps          `json:"H"`
	Scale         float64      `json:"scale"`
	MinLimit      Bps          `json:"min_limit"`
	FloorScale    float64      `json:"floor_scale"`
	PromisedRatio float64      `json:"promised_ratio"`
	GreenRatio    float64      `json:"green_ratio"`
	Overcommit    bool         `json:"overcommit"`
	Active        int          `json:"active"`
	Standby       int          `json:"standby"`
	Entities      []EntityView `json:"entities"`
	Others        OthersView   `json:"others"`
}

// Snapshot is everything the agent decided in its last cycle.
type Snapshot struct {
	Time  time.Time `json:"time"`
	Cycle uint64    `json:"cycle"`
	// AgentVersion is the running agent's version and revision, as `sluice
	// version` prints them after "sluice " (empty from agents before it).
	AgentVersion string `json:"agent_version,omitempty"`
	// Mode is what the data path does, read from its settings: shadow
	// (counts only) or enforce (shapes), whatever the file says.
	Mode         string           `json:"mode"`
	Shaper       string           `json:"shaper"`
	ShaperReason string           `json:"shaper_reason"`
	Directions   [2]DirectionView `json:"directions"`
	Entities     int              `json:"entities"`
	MaxEntities  int              `json:"max_entities"`
	Overflowed   uint64           `json:"overflowed"`
	// Unconfigured: live entities nobody configured (bounded by max_unconfigured_entities).
	Unconfigured int `json:"unconfigured"`
	// UnconfiguredMax: the live unconfigured entities at which new ones go
	// to overflow (max_unconfigured_entities, within max_entities).
	UnconfiguredMax int `json:"unconfigured_max"`
	// PeerRateRefused: new entities refused because their peer created them
	// faster than new_entities_per_peer (their connections share overflow).
	PeerRateRefused uint64      `json:"peer_rate_refused"`
	Learner         LearnerView `json:"learner"`
	// KafkaQuotas is nil unless kafka_quotas is import.
	KafkaQuotas  *KafkaQuotasView `json:"kafka_quotas,omitempty"`
	Connections  ConnectionsView  `json:"connections"`
	CycleSeconds float64          `json:"cycle_seconds"`
	// LastReload is the verdict on the last configuration reload (nil:
	// none since the agent started).
	LastReload *ReloadResult `json:"last_reload,omitempty"`
	// UnexemptBrokers are the cluster's other brokers that exempt_peers
	// does not cover: their replication from this broker is governed.
	UnexemptBrokers []string `json:"unexempt_brokers,omitempty"`
	// Objectives: the configured latency objectives, and what defends them;
	// ObjectiveTransitions counts their breakers' state changes.
	Objectives           []ObjectiveView `json:"objectives,omitempty"`
	ObjectiveTransitions uint64          `json:"objective_transitions"`
	// Cluster is nil unless the configuration has a cluster section.
	Cluster *ClusterView `json:"cluster,omitempty"`
	// Hooks is what runs ahead of sluice's programs on each hook it is
	// attached to, read at start and every cycle (nil: not read, e.g. an
	// agent without attachments in tests).
	Hooks *HooksView `json:"hooks,omitempty"`
}

// HooksView is sluice's place among the other packet users on its hooks:
// a hook is blind when a program or filter of another tool runs ahead of
// sluice's and its verdict can end the chain (TC_ACT_OK, a redirect, a
// drop: a CNI passing traffic with TC_ACT_OK, as Cilium does), so what it
// ends sluice never counts, learns or shapes; or when sluice's own program
// is no longer on the hook.
type HooksView struct {
	// Position is attach_position: last or first.
	Position string `json:"position"`
	// Blind counts the blind hooks (sluice_blind_hooks sums to it).
	Blind int        `json:"blind"`
	Hooks []HookView `json:"hooks"`
	// CheckFailures counts readings that failed (sluice_blind_hook_check_failures_total);
	// LastError is the last one's error ("" once one succeeds).
	CheckFailures uint64 `json:"check_failures"`
	LastError     string `json:"last_error,omitempty"`
}

// HookView is one hook (an interface's ingress or egress) and what runs
// ahead of sluice's program there, in the order it runs.
type HookView struct {
	Interface string      `json:"interface"`
	Hook      string      `json:"hook"`
	Blind     bool        `json:"blind"`
	Ahead     []AheadView `json:"ahead,omitempty"`
}

// AheadView is a program or filter that runs before sluice's.
type AheadView struct {
	// Kind: tcx (a TCX program; all of them run before clsact filters),
	// filter (a tc filter under clsact at a lower pref), or detached
	// (sluice's own program is gone from the hook).
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	ProgramID uint32 `json:"program_id,omitempty"`
	Pref      uint16 `json:"pref,omitempty"`
	// EndsChain: its verdict can end the chain before sluice (or its
	// instructions could not be read, which counts the same).
	EndsChain bool   `json:"ends_chain"`
	Verdict   string `json:"verdict"`
}

// ClusterView is this host's side of the cluster budgets: its standing
// (lease), the round it acts on, the topic, and each budget's share.
type ClusterView struct {
	Name   string `json:"name"`
	Broker int32  `json:"broker"`
	// Mode is the cluster section's: enforce, or shadow (shares computed
	// and reported, none applied).
	Mode string `json:"mode"`
	// Lease: normal, fallback (no report of this host landed for the
	// lease) or fenced (another agent reports this broker id).
	Lease      string `json:"lease"`
	Rebuilding bool   `json:"rebuilding"`
	Epoch      uint64 `json:"epoch"`
	// Round is the latest round the log has closed; Processed the latest
	// this host has lowered to.
	Round     uint64 `json:"round"`
	Processed uint64 `json:"processed"`
	// Published: reports sent; Withheld: reports not sent because the
	// cycle did not write its rates or the state file failed.
	Published         uint64              `json:"published"`
	Withheld          uint64              `json:"withheld"`
	StateFileFailures uint64              `json:"state_file_failures"`
	Reports           map[string]uint64   `json:"reports"`
	Topic             ClusterTopicView    `json:"topic"`
	Budgets           []ClusterBudgetView `json:"budgets"`
}

// ClusterTopicView is the coordination topic as the transport sees it.
type ClusterTopicView struct {
	Name          string `json:"name"`
	Published     uint64 `json:"published"`
	PublishFailed uint64 `json:"publish_failed"`
	Delivered     uint64 `json:"delivered"`
	Undecodable   uint64 `json:"undecodable"`
	TopicErrors   uint64 `json:"topic_errors"`
	LateAcks      uint64 `json:"late_acks"`
	Lag           int64  `json:"lag"`
	CaughtUp      bool   `json:"caught_up"`
	LastError     string `json:"last_error,omitempty"`
}

// ClusterBudgetView is one cluster budget: its cluster-wide numbers, this
// host's share and why, and what each broker last reported.
type ClusterBudgetView struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Direction string `json:"direction"`
	// Limit and Reservation are the budget the last round split: the
	// smallest its live brokers reported.
	Limit       Bps `json:"limit"`
	Reservation Bps `json:"reservation"`
	// HostLimit is the limit as this host knows it; LimitFrom says where
	// it comes from: "config", or "kafka quota store" (a rate of "kafka").
	HostLimit Bps    `json:"host_limit"`
	LimitFrom string `json:"limit_from"`
	// SumUsage: Σ of every broker's last reported usage.
	SumUsage float64 `json:"sum_usage"`
	// Share is what this host applies (or would, in shadow mode); Target
	// and Reserved are its round's.
	Share    Bps     `json:"share"`
	Target   Bps     `json:"target"`
	Reserved Bps     `json:"reserved"`
	Usage    float64 `json:"usage"`
	HeldBack bool    `json:"held_back"`
	Led      uint32  `json:"led"`
	Why      string  `json:"why"`
	// RaiseHeldBy: the brokers holding this host's raise up (live in the
	// round, not yet reporting it lowered: not processing the round, or
	// still above their target), each with how long it has without a
	// break, the longest first; empty when no raise waits on another
	// broker.
	RaiseHeldBy []ClusterRaiseHolder `json:"raise_held_by,omitempty"`
	Brokers     []ClusterBrokerView  `json:"brokers"`
}

// ClusterRaiseHolder is a broker holding a raise up, and for how long.
type ClusterRaiseHolder struct {
	Broker  int32   `json:"broker"`
	Seconds float64 `json:"seconds"`
}

// ClusterBrokerView is one broker's last accepted report for a budget.
type ClusterBrokerView struct {
	Broker    int32   `json:"broker"`
	Live      bool    `json:"live"`
	Reported  bool    `json:"reported"`
	Usage     float64 `json:"usage"`
	HeldBack  bool    `json:"held_back"`
	Applied   Bps     `json:"applied"`
	Limit     Bps     `json:"limit"` // the budget's limit as the broker reported it
	Led       uint32  `json:"led"`
	Processed uint64  `json:"processed"`
}

// ReloadResult is the verdict on one configuration reload: applied whole,
// or refused with the running configuration unchanged.
type ReloadResult struct {
	At      time.Time `json:"at"`
	Why     string    `json:"why,omitempty"` // SIGHUP, file changed, sluice reload
	Applied bool      `json:"applied"`
	// PartlyApplied: refused, and an undo failed, so the running state
	// differs from before (Error says what).
	PartlyApplied bool   `json:"partly_applied,omitempty"`
	Error         string `json:"error,omitempty"`
}

// LearnerView counts the learner's work.
type LearnerView struct {
	Parsed      uint64 `json:"samples_parsed"`
	Truncated   uint64 `json:"samples_truncated"`
	Failed      uint64 `json:"samples_failed"`
	Connections int    `json:"connections"`
	// ReplicationClaims: requests from governed peers that claimed to be
	// replication (ignored: only exempt_peers exempt).
	ReplicationClaims uint64 `json:"replication_claims"`
	// Unresolved: requests whose sample could not tell their entity (a
	// client-id too long to sample whole where it decides, topics hidden
	// behind client-chosen fields): charged to the unresolved entity.
	Unresolved uint64 `json:"unresolved"`
	// NewConnections: reused 4-tuples whose old state was dropped.
	NewConnections uint64 `json:"new_connections"`
}

// ConnectionsView is the connection table's lifecycle.
type ConnectionsView struct {
	Tracked int    `json:"tracked"` // entries at the last scan
	Reaped  uint64 `json:"reaped"`  // closed connections removed
	Rebound uint64 `json:"rebound"` // entries that had lost their binding, bound again
	// Rebinds: bound connections moved to another entity, by reason
	// (RebindReasons).
	Rebinds map[string]uint64 `json:"rebinds"`
	// IdentityErrors: identities not saved, read or dropped (pinned state).
	IdentityErrors uint64 `json:"identity_errors"`
	// IdentitiesReclaimed: saved identities dropped because their
	// connection had no entry for 15 minutes (its end was missed).
	IdentitiesReclaimed uint64 `json:"identities_reclaimed"`
}

// Find returns the views of an entity by name (or kind:name) in both directions.
func (s *Snapshot) Find(name string) []EntityView {
	var out []EntityView
	for _, d := range s.Directions {
		for _, e := range d.Entities {
			if e.Name == name || e.Kind+":"+e.Name == name {
				out = append(out, e)
			}
		}
	}
	return out
}

// ConnectionView is one connection as `sluice explain ADDRESS` shows it:
// the entity that holds each direction, the rule that put it there, and
// the request and moment that bound it. Read from the data path's table.
type ConnectionView struct {
	Peer     string `json:"peer"`
	Local    string `json:"local"`
	Listener string `json:"listener"` // the listener's security protocol
	// Produce and Fetch are kind:name of each direction's entity.
	Produce string `json:"produce"`
	Fetch   string `json:"fetch"`
	// Rule says why the entity holds it (per direction when they differ).
	Rule string `json:"rule"`
	// BoundBy is the request that decided the binding ("" when none did:
	// a peer address, or an agent that adopted it after a restart).
	BoundBy string `json:"bound_by,omitempty"`
	// Reason is why it was last bound (first, request, login,
	// rule_change, binding_lost, adopted, peer, unsampled); Since is when.
	Reason  string     `json:"reason,omitempty"`
	Since   *time.Time `json:"since,omitempty"`
	Closing bool       `json:"closing,omitempty"`
}
