//go:build sluice_mutants

package sim

import (
	"fmt"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/cluster"
)

// TestMutantsCaught breaks each rule of the protocol in turn and runs the
// seeds TestSeeds runs: each mutant must fail at least 1 % of them, or the
// simulation could not tell the rule from its absence. Run by
// cluster/sim/mutants/run.sh:
//
//	go test -tags sluice_mutants ./cluster/sim -run TestMutantsCaught -v [-seeds N]
func TestMutantsCaught(t *testing.T) {
	defer cluster.SetMutant("")
	seeds := uint64(*seedsFlag)
	table := "| mutant | seeds caught / run | first caught |\n|---|---|---|\n"
	for _, m := range cluster.Mutants {
		cluster.SetMutant(m)
		var mu sync.Mutex
		first, why := uint64(0), ""
		s := runSeeds(1, seeds, func(seed uint64, r Result) {
			mu.Lock()
			defer mu.Unlock()
			if first == 0 || seed < first {
				first, why = seed, r.First
			}
		})
		table += fmt.Sprintf("| %s | %d / %d | %d: %.80s |\n", m, s.failed, s.seeds, first, why)
		if s.failed*100 < s.seeds {
			t.Errorf("mutant %s: caught by %d of %d seeds, want at least 1 %%", m, s.failed, s.seeds)
		}
	}
	t.Log("\n" + table)
}
