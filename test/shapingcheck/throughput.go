package main

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/maps"
	"github.com/sluice-dev/sluice/test/netns"
)

// A second veth pair between the same namespaces, for the throughput pairs.
var (
	lane2BrokerIP = netip.MustParseAddr("198.18.1.1")
	lane2ClientIP = netip.MustParseAddr("198.18.1.2")
)

const (
	// pairedSeconds is how long each paired run counts (after 1 s warm-up):
	// with no programs anywhere, the lanes' 10 s totals agreed within 1 %.
	pairedSeconds = 4
	// pairedRuns alternate which lane carries the programs (ABBA…), so a
	// difference between the lanes themselves cancels out. In the full
	// suite single runs ranged 0.83-1.25 (the ungoverned case, where the
	// programs do next to nothing, averaged 0.974 over 8), so 16 runs.
	pairedRuns = 16
)

// paired measures what attaching the data path's programs (counting,
// holding nothing back, no qdisc) costs greedy TCP at line rate.
//
// Line rate on a shared 2-core VM wanders by ±15 % from one second to the
// next, more than the 5 % to detect, so runs one after the other cannot
// tell. Two flows run at the same time instead, over two veth pairs
// between the same namespaces, with the programs attached to one lane
// only: both flows share the machine's mood and compete for its CPUs, so
// whatever the programs cost shows as their lane's share. Measured with
// no programs on either lane, the two lanes' totals agreed within 1 %.
// The verdict is the geometric mean of the runs' attached/detached ratios:
// with as many runs on each lane, a lane's own speed cancels out of it.
func (e *env) paired(name string, ports [2]int) (Case, error) {
	if err := e.detach(); err != nil {
		return Case{}, err
	}
	defer func() {
		if e.att == nil {
			e.attach()
		}
	}()
	// Count only: the segments are attributed, tracked and counted, and
	// nothing is held back.
	if err := e.d.SetSettings(maps.Settings{Shaper: maps.ShaperNone, StaleAfter: time.Hour, SamplesPerSecond: 200}); err != nil {
		return Case{}, err
	}
	lane2, err := e.pair.Broker.Index(e.lane2Dev)
	if err != nil {
		return Case{}, err
	}
	lanes := [2]struct {
		ifindex int
		ip      netip.Addr
	}{{e.ifidx, e.pair.BrokerIP}, {lane2, lane2BrokerIP}}
	var ratios, with, without []float64
	for run := 0; run < pairedRuns; run++ {
		attachedLane := []int{0, 1, 1, 0}[run%4]
		var att *attach.Attachment
		err := e.pair.Broker.Do(func() (err error) {
			att, err = attach.Attach(lanes[attachedLane].ifindex, e.d.IngressProgram(), e.d.EgressProgram(), attach.Auto)
			return err
		})
		if err != nil {
			return Case{}, err
		}
		var goodput [2]float64
		var errs [2]error
		var wg sync.WaitGroup
		for i := range lanes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := e.iperfTo(context.Background(), lanes[i].ip, ports[i], 1, pairedSeconds, 1, false, 0)
				goodput[i], errs[i] = r.goodput(), err
			}()
		}
		wg.Wait()
		if err := e.pair.Broker.Do(att.Detach); err != nil {
			return Case{}, err
		}
		for _, err := range errs {
			if err != nil {
				return Case{}, fmt.Errorf("%s: %w", name, err)
			}
		}
		ratios = append(ratios, goodput[attachedLane]/goodput[1-attachedLane])
		with = append(with, goodput[attachedLane])
		without = append(without, goodput[1-attachedLane])
	}
	ratio := geometricMean(ratios)
	c := Case{Name: name, GoodputBps: median(with), Gated: true}
	c.Pass = ratio >= 0.95
	c.Detail = map[string]any{"ratio": ratio, "median_ratio": median(ratios), "run_ratios": ratios,
		"attached_bps": with, "detached_bps": without, "runs": pairedRuns, "seconds_per_run": pairedSeconds}
	return c, nil
}

func geometricMean(v []float64) float64 {
	sum := 0.0
	for _, x := range v {
		sum += math.Log(x)
	}
	return math.Exp(sum / float64(len(v)))
}

// addLane2 adds the second veth pair of the throughput pairs.
func (e *env) addLane2() error {
	e.lane2Dev = "s2b" + netns.Suffix()
	return netns.Veth(e.pair.Broker, e.lane2Dev, netip.PrefixFrom(lane2BrokerIP, 24),
		e.pair.Client, "s2c"+netns.Suffix(), netip.PrefixFrom(lane2ClientIP, 24))
}
