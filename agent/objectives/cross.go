package objectives

// Cross-direction contention (#51): a produce p99 hurt by catch-up
// fetches (the log's disk pushed by page-cache misses, a transmit queue
// the produce responses share) is not brought under by holding
// best-effort produce traffic. The evidence that the other direction
// contends is the defence itself: an objective whose own direction's hold
// proved ineffective (at the floor, still over the objective for GiveUp
// disjoint windows) holds the other direction's best-effort traffic next,
// with a breaker of its own tripped at once, and judges the windows after
// it as any breaker does. If that brings the p99 back, the other
// direction leads the objective's next episodes; if it does not either,
// the objective is ineffective as before (released, alerted) and starts
// from its lead direction when it re-arms. Without that evidence nothing
// on the other side is held: an objective never throttles every consumer
// on the host for any produce slowness.

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/latency"
)

// afterRelease moves an objective's hold after its breaker released at
// now: to the other direction when its first hold of the episode proved
// ineffective and the other direction carries best-effort traffic; back
// to its lead when the episode ends.
func (t *Tracker) afterRelease(o *objective, now time.Time) {
	other := o.trims.Other()
	switch {
	case o.verdict.Released == latency.ReleasedIneffective && !o.crossed && t.dirs[other].bestEffort-o.countedUsage[other] > 0:
		from := o.trims
		o.crossed, o.trims = true, other
		o.breakers[other] = latency.NewBreaker(latency.DefaultObjective(o.P99))
		o.verdict = o.breakers[other].Trip(now, fmt.Sprintf("holding %s's best-effort traffic did not bring the p99 under: holding %s's", from, other))
		t.noteVerdict(o)
	case o.crossed:
		// The episode ends where it moved. Recovered there: that
		// direction leads the next episodes, and the one that proved
		// ineffective is armed again. Ineffective there too, or quiet:
		// back to the lead, whose breaker keeps its own state (an
		// ineffective one re-arms by its rules).
		if o.verdict.Released == latency.ReleasedRecovered {
			o.breakers[o.lead] = latency.NewBreaker(latency.DefaultObjective(o.P99))
			o.lead = o.trims
		} else {
			o.breakers[o.trims] = latency.NewBreaker(latency.DefaultObjective(o.P99))
		}
		o.crossed, o.trims = false, o.lead
	}
}
