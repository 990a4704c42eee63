//go:build sluice_mutants

package cluster

// mutant is the protocol rule the mutation test (cluster/sim/mutants)
// breaks: one of Mutants, or "" for none.
var mutant string

// Mutants are the rules a mutation test can break, each of which the
// simulation must catch (docs/cluster-budgets.md §6).
var Mutants = []string{MutantNoFencing, MutantDoubleLease, MutantNoDowntimeInK, MutantEvenSplitFullLimit, MutantNeverRaise}

// SetMutant breaks one rule for every Agent and View of the process until
// it is called with "". Only in the sluice_mutants build.
func SetMutant(name string) { mutant = name }
