package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/maps"
	"github.com/sluice-dev/sluice/test/harness"
)

// The hierarchy case (the seed design's Phase 2 at the NIC): a reserved
// entity sends at its reservation; then 8 greedy entities the control loop
// has not seen yet start together, each at a standby ceiling that alone
// would not pass the capacity but together would four times over. No loop
// runs here, so what holds is the tree alone, as in the first second
// before the loop sees newcomers. Judged from the receiver's side in 100 ms
// windows (the broker sockets' tcp_info, both entities read at one
// instant): the reserved entity never falls below 95 % of its
// reservation (a window that does must be made up by the next), and the
// total never passes the capacity. Windows in which the host stole time
// from this guest are judged by the share of their time they kept
// (hierWindows.judge).
const (
	hierReservedPort = 9096
	hierNewcomerPort = 9097
	hierCapacity     = 40 * mb
	hierReservation  = 10 * mb
	hierHeadroom     = 4 * mb  // the unknown entity's guarantee and limit (H)
	hierNewcomerCeil = 20 * mb // each newcomer's standby ceiling
	hierNewcomers    = 8
	hierReservedID   = 21
	hierFirstNewID   = 31
	hierWindow       = 0.1 // seconds
	// The reserved entity runs alone for hierAlone seconds, then with the
	// newcomers for hierTogether seconds.
	hierAlone    = 3
	hierTogether = 6
)

// hierarchyMeasured runs the case until enough of its windows can be
// judged (at most three times): a run in which the host stole time from
// most windows measured the host, and is measured again rather than
// passed or failed on it. Every attempt is in the detail.
func (e *env) hierarchyMeasured(name string, dir maps.Direction) (Case, error) {
	var earlier []hierVerdict
	for attempt := 1; ; attempt++ {
		c, err := e.hierarchy(name, dir)
		if err != nil {
			return c, err
		}
		v := c.Detail["verdict"].(hierVerdict)
		if v.EnoughConclusive || attempt == 3 {
			c.Detail["earlier_attempts"] = earlier
			return c, nil
		}
		log.Printf("%s: the host took over half the time of %d of %d windows; measuring again", name, v.Windows-v.Conclusive, v.Windows)
		earlier = append(earlier, v)
	}
}

func (e *env) hierarchy(name string, dir maps.Direction) (Case, error) {
	if err := e.htb.SetCapacity(dir, hierCapacity); err != nil {
		return Case{}, err
	}
	defer e.htb.SetCapacity(dir, math.Inf(1))
	// As the agent sets them: the reserved entity guaranteed its
	// reservation under a ceiling of the whole capacity (the loop gave it
	// everything while it was alone), the unknown entity guaranteed H, the
	// newcomers standby (nothing guaranteed) at their ceilings.
	rates := []shaping.Rate{
		{Entity: hierReservedID, BytesPerSecond: hierCapacity, Guaranteed: hierReservation},
		{Entity: maps.EntityUnknown, BytesPerSecond: hierHeadroom, Guaranteed: hierHeadroom},
	}
	newcomer := map[uint16]uint32{}
	for i := range hierNewcomers + 1 { // +1: iperf3's control connection is a connection too
		rates = append(rates, shaping.Rate{Entity: uint32(hierFirstNewID + i), BytesPerSecond: hierNewcomerCeil})
	}
	if err := e.htb.SetRates(dir, rates); err != nil {
		return Case{}, err
	}
	defer func() {
		for _, r := range rates {
			e.htb.Remove(dir, r.Entity)
		}
	}()
	ctx, stop := context.WithCancel(context.Background())
	bound := make(chan struct{})
	go func() { e.bindHierarchy(ctx, newcomer); close(bound) }()
	defer func() { stop(); <-bound }()

	reverse := dir == maps.Fetch
	var reserved, crowd iperfResult
	var reservedErr, crowdErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		// -b paces the sender at the reservation in 8 KiB writes: an entity
		// using what it was promised, smoothly enough for 100 ms windows.
		reserved, reservedErr = e.iperf(ctx, hierReservedPort, 1, hierAlone+hierTogether+1, 0, reverse, 0,
			"-b", fmt.Sprint(int(hierReservation*8)), "-l", "8K")
	}()
	crowdStart := time.Now().Add(hierAlone * time.Second)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(crowdStart)): // the reserved entity's time alone: part of the scenario
		}
		crowd, crowdErr = e.iperf(ctx, hierNewcomerPort, hierNewcomers, hierTogether, 0, reverse, 0)
	}()
	// The receiver's view, both entities read at one instant every 100 ms:
	// the broker sockets' bytes received (ingress) or acknowledged by the
	// client (egress), from the kernel through sock_diag.
	type sample struct {
		at              time.Time
		reserved, crowd uint64
		steal           harness.StealClock
	}
	var samples []sample
	meter, sampleErr := harness.NewListenerMeter(e.pair.Broker)
	if sampleErr == nil {
		defer meter.Close()
		window := time.Duration(hierWindow * float64(time.Second))
		for next := time.Now(); next.Before(crowdStart.Add(hierTogether * time.Second)); next = next.Add(window) {
			time.Sleep(time.Until(next)) // the window's length
			totals, at, err := meter.Totals(hierReservedPort, hierNewcomerPort)
			if err != nil {
				sampleErr = err
				break
			}
			steal, err := harness.ReadSteal()
			if err != nil {
				sampleErr = err
				break
			}
			dirBytes := func(p uint16) uint64 { return totals[p].Of(int(dir)) }
			samples = append(samples, sample{at: at, reserved: dirBytes(hierReservedPort), crowd: dirBytes(hierNewcomerPort), steal: steal})
		}
	}
	wg.Wait()
	if reservedErr != nil {
		return Case{}, fmt.Errorf("%s: reserved entity: %w", name, reservedErr)
	}
	if crowdErr != nil {
		return Case{}, fmt.Errorf("%s: newcomers: %w", name, crowdErr)
	}
	if sampleErr != nil {
		return Case{}, fmt.Errorf("%s: %w", name, sampleErr)
	}
	// Windows from the crowd's start (plus one window, so every window
	// judged has the newcomers in it) to its end.
	var w hierWindows
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		if a.at.Before(crowdStart) {
			continue
		}
		secs := b.at.Sub(a.at).Seconds()
		res := float64(b.reserved-a.reserved) / secs
		w.reserved = append(w.reserved, res)
		w.total = append(w.total, res+float64(b.crowd-a.crowd)/secs)
		w.stolen = append(w.stolen, b.steal.Since(a.steal).Seconds())
	}
	v := w.judge(hierReservation, hierCapacity)
	c := Case{Name: name, RateBps: hierReservation, GoodputBps: median(w.reserved), RetransmitRatio: reserved.retransmitRatio(), Gated: true}
	c.Pass = len(w.total) >= int(0.8*hierTogether/hierWindow) && v.pass()
	c.Detail = map[string]any{
		"capacity_bps": hierCapacity, "reservation_bps": hierReservation, "newcomers": hierNewcomers, "newcomer_ceiling_bps": hierNewcomerCeil,
		"window_s": hierWindow, "windows": len(w.total), "verdict": v,
		"median_total_bps": median(w.total), "reserved_bps_per_window": w.reserved,
		"total_bps_per_window": w.total, "stolen_s_per_window": w.stolen, "crowd_goodput_bps": crowd.goodput(),
		"measured_at": "broker sockets' tcp_info, both entities read at one instant; stolen time from /proc/stat",
	}
	return c, nil
}

// bindHierarchy binds, until ctx ends, the connections to the reserved
// port to the reserved entity and each connection to the newcomers' port
// to an entity of its own (in the order they appear).
func (e *env) bindHierarchy(ctx context.Context, newcomer map[uint16]uint32) {
	e.bindWhile(ctx, func(b maps.Binding) uint32 {
		switch b.Conn.Local.Port() {
		case hierReservedPort:
			return hierReservedID
		case hierNewcomerPort:
			id, ok := newcomer[b.Conn.Peer.Port()]
			if !ok && !b.Closing && len(newcomer) <= hierNewcomers { // closing: an earlier case's
				id = uint32(hierFirstNewID + len(newcomer))
				newcomer[b.Conn.Peer.Port()] = id
			}
			return id
		}
		return 0
	})
}

// hierWindows is the hierarchy case's series, one entry per 100 ms window:
// the reserved entity's and everyone's rate at the receiver, and the time
// the host stole from the worst CPU in the window.
type hierWindows struct {
	reserved, total, stolen []float64
}

// hierVerdict is how the windows were judged.
type hierVerdict struct {
	Windows            int     `json:"windows"`
	HostTook           int     `json:"windows_the_host_took_time_from"`
	Conclusive         int     `json:"windows_with_at_least_half_their_time"`
	BelowFloor         int     `json:"windows_below_their_floor_made_up_by_the_next"`
	WorstReserved      float64 `json:"worst_reserved_bps"`
	WorstTwoWindowMean float64 `json:"worst_two_window_mean_over_floor"`
	WorstTotal         float64 `json:"worst_total_over_bound"`
	FloorBps           float64 `json:"floor_bps"`
	TotalBound         float64 `json:"total_bound_bps"`
	ReservationHeld    bool    `json:"reservation_held"`
	CapacityHeld       bool    `json:"capacity_held"`
	EnoughConclusive   bool    `json:"enough_conclusive_windows"`
}

func (v hierVerdict) pass() bool { return v.ReservationHeld && v.CapacityHeld && v.EnoughConclusive }

// judge applies the case's promises to the windows.
//
// The floor: the reserved entity gets at least 95 % of its reservation in
// every window. On a busy 2-core guest the receiver's softirq can run
// late, and one window then reads low with the next one high (7.3 then
// 12.7 MB/s once, while the compiler ran beside the check): the bytes
// came late, nobody took them. A window below its floor passes only when
// the window after it makes the deficit up (their mean is at the floor).
//
// The ceiling: no window passes the capacity by more than one parent
// burst (10 ms of capacity).
//
// The host: when the hypervisor runs another guest nothing here runs, the
// shaper included, so a window keeps only the share of its time the host
// left it. A window's floor is scaled by that share (the worst CPU's
// stolen time in it or in the window before, whose stall can starve the
// sender into this one), and a window's bound grows by what the window
// before lost (a receiver that resumes reads the stall's bytes at once).
// Steal never excuses more than it took. At least half the windows must
// have kept at least half their time, or the case proves nothing and
// fails.
func (w hierWindows) judge(reservation, capacity float64) hierVerdict {
	v := hierVerdict{Windows: len(w.reserved), FloorBps: 0.95 * reservation, TotalBound: capacity * (1 + 0.01/hierWindow),
		WorstReserved: math.MaxFloat64, WorstTwoWindowMean: math.MaxFloat64, ReservationHeld: true, CapacityHeld: true}
	stolenBefore := func(i int) float64 {
		if i == 0 {
			return 0
		}
		return w.stolen[i-1]
	}
	floor := func(i int) float64 {
		kept := 1 - math.Min(1, math.Max(w.stolen[i], stolenBefore(i))/hierWindow)
		return v.FloorBps * kept
	}
	for i := range w.reserved {
		if w.stolen[i] > 0 {
			v.HostTook++
		}
		if math.Max(w.stolen[i], stolenBefore(i)) <= hierWindow/2 {
			v.Conclusive++
		}
		v.WorstReserved = math.Min(v.WorstReserved, w.reserved[i])
		bound := v.TotalBound + capacity*math.Min(1, stolenBefore(i)/hierWindow)
		v.WorstTotal = math.Max(v.WorstTotal, w.total[i]/bound)
		if w.total[i] > bound {
			v.CapacityHeld = false
		}
		if w.reserved[i] >= floor(i) {
			continue
		}
		v.BelowFloor++
		pair, pairFloor := w.reserved[i], floor(i)
		if i+1 < len(w.reserved) {
			pair, pairFloor = (w.reserved[i]+w.reserved[i+1])/2, (floor(i)+floor(i+1))/2
		}
		v.WorstTwoWindowMean = math.Min(v.WorstTwoWindowMean, pair/pairFloor)
		if pair < pairFloor {
			v.ReservationHeld = false
		}
	}
	v.EnoughConclusive = v.Conclusive > 0 && 2*v.Conclusive >= len(w.reserved)
	if len(w.reserved) == 0 {
		v.WorstReserved = 0 // (JSON has no +Inf)
	}
	if v.BelowFloor == 0 {
		v.WorstTwoWindowMean = 0
	}
	return v
}
