package sim

import (
	"fmt"
	"slices"
)

// stats aggregates many seeds' results.
type stats struct {
	seeds, failed                        int
	violations, doubleCounts, divergence int
	reports, fallbacks, reclaims         int
	budgetChanges                        int // seeds that altered a budget and converged on it
	ignored                              uint64
	maxOvershoot, maxAllowanceUse        float64
	convergence                          []int // rounds, seeds that converged
	convergenceMild                      []int // the same, seeds losing ≤ 5 % of reports
	unconverged                          int
	liveTicks                            []int // convergence ticks of the seeds the liveness gate applies to
	liveFailed                           int
}

func (s *stats) add(r Result) {
	s.seeds++
	if r.First != "" {
		s.failed++
	}
	s.violations += r.Violations
	s.doubleCounts += r.DoubleCounts
	s.divergence += r.Divergences
	s.reports += r.Reports
	s.fallbacks += r.Fallbacks
	s.reclaims += r.Reclaims
	if r.BudgetChanged {
		s.budgetChanges++
	}
	s.ignored += r.Ignored.Ignored()
	s.maxOvershoot = max(s.maxOvershoot, r.MaxOvershoot)
	s.maxAllowanceUse = max(s.maxAllowanceUse, r.MaxAllowanceUse)
	if r.Converged {
		s.convergence = append(s.convergence, r.ConvergenceRounds)
		if !r.Hostile {
			s.convergenceMild = append(s.convergenceMild, r.ConvergenceRounds)
		}
	} else {
		s.unconverged++
	}
	if r.Liveness {
		if r.Converged {
			s.liveTicks = append(s.liveTicks, r.ConvergenceTicks)
		}
		s.liveFailed += r.LivenessFailures
	}
}

func (s *stats) merge(o *stats) {
	s.seeds += o.seeds
	s.failed += o.failed
	s.violations += o.violations
	s.doubleCounts += o.doubleCounts
	s.divergence += o.divergence
	s.reports += o.reports
	s.fallbacks += o.fallbacks
	s.reclaims += o.reclaims
	s.budgetChanges += o.budgetChanges
	s.ignored += o.ignored
	s.maxOvershoot = max(s.maxOvershoot, o.maxOvershoot)
	s.maxAllowanceUse = max(s.maxAllowanceUse, o.maxAllowanceUse)
	s.convergence = append(s.convergence, o.convergence...)
	s.convergenceMild = append(s.convergenceMild, o.convergenceMild...)
	s.unconverged += o.unconverged
	s.liveTicks = append(s.liveTicks, o.liveTicks...)
	s.liveFailed += o.liveFailed
}

// percentile returns the p-th percentile (0..1) of rounds, -1 if empty.
func percentile(rounds []int, p float64) int {
	if len(rounds) == 0 {
		return -1
	}
	slices.Sort(rounds)
	return rounds[int(p*float64(len(rounds)-1))]
}

func (s *stats) String() string {
	return fmt.Sprintf("liveness gate: %d seeds converged, in seconds p50 %.1f p90 %.1f p99 %.1f max %.1f, %d not within the bound | ",
		len(s.liveTicks), secs(percentile(s.liveTicks, 0.5)), secs(percentile(s.liveTicks, 0.9)), secs(percentile(s.liveTicks, 0.99)), secs(percentile(s.liveTicks, 1)), s.liveFailed) +
		fmt.Sprintf("seeds %d failed %d violations %d double-counts %d divergences %d | reports %d ignored %d fallbacks %d reclaim-rounds %d budget-changes %d | max overshoot %.3f×limit, max overshoot/allowance %.3f | convergence rounds p50 %d p90 %d p99 %d max %d (converged %d, not %d; loss ≤ 5 %%: p50 %d p90 %d p99 %d of %d)",
			s.seeds, s.failed, s.violations, s.doubleCounts, s.divergence, s.reports, s.ignored, s.fallbacks, s.reclaims, s.budgetChanges,
			s.maxOvershoot, s.maxAllowanceUse,
			percentile(s.convergence, 0.5), percentile(s.convergence, 0.9), percentile(s.convergence, 0.99), percentile(s.convergence, 1), len(s.convergence), s.unconverged,
			percentile(s.convergenceMild, 0.5), percentile(s.convergenceMild, 0.9), percentile(s.convergenceMild, 0.99), len(s.convergenceMild))
}

// secs converts ticks to seconds.
func secs(ticks int) float64 { return float64(ticks) * tick.Seconds() }
