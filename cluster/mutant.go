package cluster

// The rules a mutation test breaks (build tag sluice_mutants, SetMutant).
const (
	// MutantNoFencing: an older epoch or another instance of the counted
	// epoch is accepted, and an agent never fences itself.
	MutantNoFencing = "no-fencing"
	// MutantDoubleLease: an agent keeps its share for twice the lease the
	// others' reclaim assumes.
	MutantDoubleLease = "double-lease"
	// MutantNoDowntimeInK: K leaves out MaxDowntime.
	MutantNoDowntimeInK = "no-downtime-in-k"
	// MutantEvenSplitFullLimit: the even-split fallback takes the whole
	// limit.
	MutantEvenSplitFullLimit = "even-split-full-limit"
	// MutantNeverRaise: an agent never raises a share.
	MutantNeverRaise = "never-raise"
)
