package sim

import (
	"math/rand/v2"
	"slices"

	"github.com/sluice-dev/sluice/cluster"
)

// flight is a report on its way to the log.
type flight struct {
	landAt int
	order  int // send order: ties land in it, so a seed replays exactly
	report *cluster.Report
}

// network carries reports from agents to the log: each may be lost, late
// (up to the delivery bound), and delivered twice; late ones overtake, so
// the log's order is not the send order.
type network struct {
	rng      *rand.Rand
	sc       *scenario
	inFlight []flight
	sent     int
}

func (nw *network) send(now int, r *cluster.Report) {
	if nw.rng.Float64() < nw.sc.loss {
		return
	}
	copies := 1
	if nw.rng.Float64() < nw.sc.dup {
		copies = 2 // a producer retry whose first attempt did land
	}
	maxDelay := int(nw.sc.cfg.MaxDelivery / tick)
	for range copies {
		delay := nw.rng.IntN(2)
		if nw.rng.Float64() < nw.sc.slowFrac {
			delay = nw.rng.IntN(maxDelay + 1)
		}
		nw.sent++
		nw.inFlight = append(nw.inFlight, flight{landAt: now + delay, order: nw.sent, report: r})
	}
}

// landing removes the reports that land at or before now and appends them
// to out in landing order.
func (nw *network) landing(now int, out []*cluster.Report) []*cluster.Report {
	keep := nw.inFlight[:0]
	var due []flight
	for _, f := range nw.inFlight {
		if f.landAt <= now {
			due = append(due, f)
		} else {
			keep = append(keep, f)
		}
	}
	nw.inFlight = keep
	slices.SortFunc(due, func(a, b flight) int {
		if a.landAt != b.landAt {
			return a.landAt - b.landAt
		}
		return a.order - b.order
	})
	for _, f := range due {
		out = append(out, f.report)
	}
	return out
}
