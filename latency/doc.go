// Package latency keeps request latencies (per entity and API, seen at the
// NIC) in fixed log-spaced buckets from 100 µs to 60 s, so that what a
// sample costs never grows with the request rate, answers quantiles over
// sliding windows (10 s and 1 min), and defends a latency objective with a
// breaker (breaker.go). Pure and deterministic, as the allocator is: time
// comes in as an argument, nothing here reads a clock.
//
// # The breaker's timing bounds
//
// Evaluated once a second (the agent's cycle) on the requests since
// Since(now), with DefaultObjective's values (Window W = 10 s, Trip 3,
// Step 0.8, Floor 0.05, Raise 0.05, CoolDown 10 s doubling to 80 s,
// MinSamples 20, Quiet 1, GiveUp 3, Rearm 10 min). d is the time a newly
// set level takes to be judged: the first evaluation whose window, which
// starts at the whole second after the change, holds MinSamples requests
// (1 s when the protected tenant sends enough in the part of a second
// before the cycle, at most 2 s when it sends MinSamples or more a
// second; never more than Quiet × W, after which the breaker releases).
// Each bound is tested in breaker_test.go, on simulated traffic of 100
// requests a second (d = 1 s).
//
//   - No trip from a burst: slow requests that all complete within
//     (Trip−2)×W + 1 s = 11 s (one stall, whatever its size) cannot open
//     it, because it counts only disjoint windows: overlapping evaluations
//     of one trailing window count once. Before, a 300 ms stall opened it
//     and held best-effort traffic at 0.8 for 83 s.
//   - Time to trip: a sustained violation (every window inside it over
//     the objective, with MinSamples requests) opens it (Trip−1)×W = 20 s
//     after the first window over the objective, and so at most
//     Trip×W − 1 s = 29 s after it began. A window or more with no
//     decision between two counted windows starts the count again.
//   - Descent: open, each bad window lowers the level by Step, one level
//     per d: from 0.8 to the floor in 13 cuts, 13×d.
//   - Ineffective: at the floor and still over the objective for GiveUp
//     disjoint windows, it releases (level 1, state Ineffective,
//     Verdict.Released = ReleasedIneffective): 13×d + d + (GiveUp−1)×W
//     after tripping, 34 s at d = 1 s (48 s at d = 2 s), so at most about
//     29 + 48 = 77 s after an unattainable violation begins. It does not
//     trip again until the objective holds Recover windows at full level
//     (3 s) or Rearm (10 min) passes; an objective missed for an hour for
//     reasons best-effort traffic does not cause costs best-effort traffic
//     34 s of trimming each 10.9 min (6 % of the hour) and says so 6 times.
//   - Quiet: open or half open, Quiet×W = 10 s without an evaluation with
//     MinSamples requests releases it (level 1, closed,
//     ReleasedQuiet); the last such evaluation is at most W after the
//     protected tenant's last requests, so it releases within
//     (Quiet+1)×W = 20 s of the tenant going quiet (or leaving). Closed,
//     nothing is held and nothing happens.
//   - Judging: each level is judged only on whole seconds after the second
//     it was set in (Since); an evaluation within that second judges
//     nothing.
//   - Release once the objective holds again: half open CoolDown after the
//     last bad window (10 s; doubled by each probe that misses, up to
//     80 s; back to 10 s once closed), then one raise of Raise per d, for
//     MaxCoolDown (80 s) after the level that last failed never within a
//     Step of it, and closed at the first good window at full level once
//     Recover were good. A trip records full level as failed (it took
//     Trip disjoint bad windows at full level), so after a trip the level
//     stays at most 0.8 until 80 s after it, and closes 84 s after the
//     trip when the violation ended there (4 raises from 0.8, then a good
//     window at 1). In general within MaxCoolDown + ⌈(1−Floor)/Raise⌉×d +
//     d of the last bad window: 100 s at d = 1 s.
package latency
