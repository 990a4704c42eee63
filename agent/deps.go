// Package agent is the sluice daemon's core: it learns entities from
// sampled requests, runs the control loop of docs/design.md §4 for each
// direction every refresh interval, writes rates to the shaper and the
// data path, and publishes what it decided for metrics, `sluice status` and
// `sluice explain`. Everything with side effects sits behind the small
// interfaces in this file, so the agent's logic is tested with fakes and no
// root.
package agent

import (
	"net/netip"
	"time"

	"github.com/sluice-dev/sluice/agent/objectives"
	"github.com/sluice-dev/sluice/maps"
)

// DataPath is what the agent needs of the BPF data path.
type DataPath interface {
	// ReadCounters fills dst[dir][entity] with totals since load, for the
	// entities below ids; entries at or past it are left as they were.
	ReadCounters(dst *[2][]maps.Counters, ids int) error
	BindConns(bindings []maps.Binding) error
	EachBinding(fn func(maps.Binding)) error
	// ForgetConns removes connections from the table (missing ones are fine).
	ForgetConns(conns []maps.ConnKey) error
	ResetCounters(entities []uint32) error
	Heartbeat(now time.Duration) error
	SetSettings(s maps.Settings) error
	// ReadSettings reads back what the data path does (status reports it,
	// a refused reload restores it).
	ReadSettings() (maps.Settings, error)
	SetListeners(ports []uint16) error
	SetExempt(prefixes []netip.Prefix) error
	// SetExemptTable is SetExempt without forgetting the connections the
	// change concerns (a reload forgets them once it cannot be refused); it
	// returns the prefixes it added and removed.
	SetExemptTable(prefixes []netip.Prefix) (added, removed []netip.Prefix, err error)
	// SetPeerEntities makes exactly these the TLS listeners' peer table.
	SetPeerEntities(entries []maps.PeerEntity) error
	Stats() (maps.Stats, error)
}

// EntityStore persists the registry next to the data path's pinned maps,
// so a restarted agent keeps the ids connections are bound to. Optional:
// a DataPath that implements it is used.
type EntityStore interface {
	SaveEntity(id uint32, kind uint8, name string) (bool, error)
	DeleteEntity(id uint32) error
	EachEntity(fn func(id uint32, kind uint8, name string)) error
}

var _ EntityStore = (*maps.Datapath)(nil)

// IdentityStore persists what a connection proved (its SASL principal)
// beside its binding in pinned state, so that a restarted agent, or a
// learner that freed the connection's state, still knows it. The data path
// drops a connection's identity when the broker accepts a new connection
// on its 4-tuple (SYN-ACK); the agent drops it when the connection closes.
// Optional: a DataPath that implements it is used.
type IdentityStore interface {
	SaveIdentity(c maps.ConnKey, id maps.Identity) error
	// Identity returns the connection's identity, if one was saved.
	Identity(c maps.ConnKey) (maps.Identity, bool, error)
	ForgetIdentities(conns []maps.ConnKey) error
	// EachIdentity lists the connections with a saved identity.
	EachIdentity(fn func(maps.ConnKey)) error
}

var _ IdentityStore = (*maps.Datapath)(nil)

// LeadStore keeps, across restarts, which direction each latency
// objective leads with (objectives.Lead): the daemon's file in its state
// directory. Optional.
type LeadStore interface {
	LoadLeads() ([]objectives.Lead, error)
	SaveLeads([]objectives.Lead) error
}

// Samples delivers request samples from the data path.
type Samples interface {
	Read() (maps.Sample, error)
	Close() error
}

// LatencyEvents delivers the data path's request latency measurements
// (maps.LatencyReader); Read returns maps.ErrClosed once closed.
type LatencyEvents interface {
	Read() (maps.LatencyEvent, error)
	Close() error
}

// Clock is the agent's time source; tests drive it by hand.
type Clock interface {
	Now() time.Time
	// Monotonic is CLOCK_MONOTONIC, the data path's clock for heartbeats.
	Monotonic() time.Duration
}

type systemClock struct{}

func (systemClock) Now() time.Time           { return time.Now() }
func (systemClock) Monotonic() time.Duration { return maps.MonotonicNow() }

// SystemClock is the real clock.
var SystemClock Clock = systemClock{}

// LoadedDataPath adapts a loaded maps.Datapath to DataPath.
type LoadedDataPath struct {
	*maps.Datapath
	reader *maps.CounterReader
}

// NewLoadedDataPath wraps d.
func NewLoadedDataPath(d *maps.Datapath) (*LoadedDataPath, error) {
	r, err := d.NewCounterReader()
	if err != nil {
		return nil, err
	}
	return &LoadedDataPath{Datapath: d, reader: r}, nil
}

// ReadCounters implements DataPath.
func (l *LoadedDataPath) ReadCounters(dst *[2][]maps.Counters, ids int) error {
	return l.reader.Read(dst, ids)
}

var (
	_ DataPath      = (*LoadedDataPath)(nil)
	_ Samples       = (*maps.SampleReader)(nil)
	_ LatencyEvents = (*maps.LatencyReader)(nil)
)
