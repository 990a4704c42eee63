#!/bin/sh
# Mutation test of the cluster-budget simulation: breaks each protocol rule
# in cluster/mutant.go in turn (build tag sluice_mutants) and runs the seeds
# `make test` runs; every mutant must be caught by at least 1 % of them.
# Prints the table of docs/cluster-budgets.md §6.
#   cluster/sim/mutants/run.sh [seeds]   (default 3000, as make test)
set -eu
cd "$(dirname "$0")/../../.."
exec go test -count=1 -tags sluice_mutants ./cluster/sim -run '^TestMutantsCaught$' -v -seeds "${1:-3000}"
