// Package kafkaquotas is `kafka_quotas: import`, a source of limits for the
// resolve stage: it takes the metadata client's newest import of the
// cluster's client quotas, keeps the entries that fit the room configured
// entities have left, compiles them with the file's entities into the
// policy, and keeps the counters status shows. It knows nothing of the
// agent: the agent pulls, installs what Compile returns, and reports
// Installed.
package kafkaquotas

import (
	"maps"
	"reflect"
	"slices"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/entity"
	"github.com/sluice-dev/sluice/agent/learner"
	"github.com/sluice-dev/sluice/agent/status"
)

// Source is the cluster's client quotas as last read
// (metadata.ClusterQuotas): the last good set, and the import counters.
type Source interface {
	Latest() (entity.KafkaQuotas, learner.QuotaImportStats)
}

// Import is the agent's side of one source (and of those a reload
// replaced, whose counters it keeps so totals never go back).
type Import struct {
	source Source
	// applied is the source's import generation last taken.
	applied uint64
	// quotas is the last good set, as read (Compile trims it to the room).
	quotas entity.KafkaQuotas
	// stats are the source's counters at the last Pull; earlier* add the
	// counters of sources a reload replaced.
	stats           learner.QuotaImportStats
	earlierImports  uint64
	earlierFailures uint64
	held            Held
}

// Held is what the installed policy holds of the imported set: the
// entries in use and how many were left out for lack of room.
type Held struct {
	InUse   entity.KafkaQuotas
	Trimmed int
}

// New is an import from source (nil: import is off).
func New(source Source) *Import { return &Import{source: source} }

// Pull takes the source's newest import. It returns the set to compile
// and true when the import is new and differs from the last good set.
func (k *Import) Pull() (entity.KafkaQuotas, learner.QuotaImportStats, bool) {
	if k.source == nil {
		return k.quotas, k.stats, false
	}
	quotas, stats := k.source.Latest()
	k.stats = stats
	if stats.Generation == k.applied {
		return k.quotas, stats, false
	}
	k.applied = stats.Generation
	if reflect.DeepEqual(quotas, k.quotas) {
		return k.quotas, stats, false
	}
	k.quotas = quotas
	return quotas, stats, true
}

// Quotas is the last good set (empty while import is off).
func (k *Import) Quotas() entity.KafkaQuotas { return k.quotas }

// ReplaceSource swaps in a reload's metadata client. The last good set
// stays until the new client imports, unless import was turned off.
func (k *Import) ReplaceSource(next Source) {
	k.earlierImports += k.stats.Generation
	k.earlierFailures += k.stats.Failures
	k.source, k.applied, k.stats = next, 0, learner.QuotaImportStats{LastImport: k.stats.LastImport}
	if next == nil {
		k.quotas = entity.KafkaQuotas{}
	}
}

// Held is what the installed policy holds (for a reload's undo).
func (k *Import) Held() Held { return k.held }

// Installed records what the policy now in force holds; it says whether
// more entries were left out than before (worth a warning).
func (k *Import) Installed(h Held) (newlyTrimmed bool) {
	newlyTrimmed = h.Trimmed > 0 && h.Trimmed != k.held.Trimmed
	k.held = h
	return newlyTrimmed
}

// Restore puts back what an undone reload's policy replaced.
func (k *Import) Restore(h Held) { k.held = h }

// View is status' and metrics' picture (nil when import is off).
func (k *Import) View() *status.KafkaQuotasView {
	if k.source == nil {
		return nil
	}
	return &status.KafkaQuotasView{
		Imports: k.earlierImports + k.stats.Generation, Failures: k.earlierFailures + k.stats.Failures,
		Clients: len(k.held.InUse.Clients), Users: len(k.held.InUse.Users), ClientDefault: k.quotas.ClientDefault != (config.Quota{}),
		Skipped: k.stats.Skipped, LeftOut: k.held.Trimmed, LastImport: k.stats.LastImport,
	}
}

// Compiled is a configuration's entities compiled with the imported quotas
// that fit beside them.
type Compiled struct {
	Policy *entity.Policy
	Held   Held
	// Room is how many entities imported quotas could take.
	Room int
}

// Compile compiles cfg's entities with quotas; it changes nothing.
func Compile(cfg config.Config, quotas entity.KafkaQuotas) Compiled {
	room := cfg.MaxEntities - cfg.MaxUnconfiguredEntities - cfg.Entities.Configured()
	inUse, trimmed := Fit(quotas, cfg.Entities, room)
	return Compiled{Policy: entity.NewPolicyWithKafka(cfg.Entities, inUse), Held: Held{InUse: inUse, Trimmed: trimmed}, Room: room}
}

// Fit keeps the imported entries that fit the room configured entities
// have left (entities the file names take none; <default>s none), clients
// first, then users, each by name, and returns how many entities it left
// out. Every configured entity is pinned, so the registry must keep them
// and the unconfigured budget within max_entities.
func Fit(q entity.KafkaQuotas, file config.Entities, room int) (entity.KafkaQuotas, int) {
	out := entity.KafkaQuotas{Clients: make(map[string]config.Quota, len(q.Clients)), ClientDefault: q.ClientDefault,
		Users: make(map[string]config.UserQuota, len(q.Users))}
	left := 0
	take := func(n int) bool {
		if n > room {
			left += n
			return false
		}
		room -= n
		return true
	}
	for _, name := range slices.Sorted(maps.Keys(q.Clients)) {
		if _, inFile := file.Clients[name]; inFile || take(1) {
			out.Clients[name] = q.Clients[name]
		}
	}
	for _, name := range slices.Sorted(maps.Keys(q.Users)) {
		u := q.Users[name]
		if name == config.DefaultKey {
			out.Users[name] = u // templates are no entities
			continue
		}
		inFile, fileHas := file.Users[name]
		need := 0
		if u.Quota != (config.Quota{}) && !fileHas {
			need++ // the user's own entity
		}
		for client := range u.Clients {
			if _, both := inFile.Clients[client]; client != config.DefaultKey && !both {
				need++
			}
		}
		if take(need) {
			out.Users[name] = u
		}
	}
	return out, left
}
