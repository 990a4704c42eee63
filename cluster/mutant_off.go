//go:build !sluice_mutants

package cluster

// mutant is the protocol rule a mutation test breaks; none outside the
// sluice_mutants build, where the constant lets the compiler drop every
// mutated branch.
const mutant = ""
