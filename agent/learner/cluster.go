package learner

import (
	"net/netip"
	"time"
)

// What the agent learns of the cluster through its metadata client
// (agent/metadata): its brokers, and how the import of its client quotas
// went.

// Broker is one broker of the cluster as the metadata names it, with the
// addresses its host resolves to and whether one of them is this host's
// own (the local broker, not a replication peer).
type Broker struct {
	ID    int32
	Host  string
	Port  int32
	Addrs []netip.Addr
	Local bool
}

// QuotaImportStats counts the imports, for status and metrics.
type QuotaImportStats struct {
	// Generation counts successful imports (0: none yet).
	Generation uint64
	// Failures counts reads that failed (the last good set stayed).
	Failures uint64
	// Applied: entries in the last good set (client-id and its default).
	Applied int
	// Skipped: entries in the last read that sluice cannot apply: user
	// and <user, client-id> quotas (sluice has no user entities yet), ip
	// quotas, clients beyond the bound, and values that are not a positive
	// finite rate.
	Skipped int
	// LastImport is when the last good set was read.
	LastImport time.Time
}
