package harness

import (
	"fmt"
	"time"
)

// Steadiness is what WaitSteady saw: how long the clients took to move
// and then to hold a rate, and the last windows' rates.
type Steadiness struct {
	MovingAfter time.Duration `json:"moving_after_s"`
	SteadyAfter time.Duration `json:"steady_after_s"`
	Steady      bool          `json:"steady"`
	LastBps     [][]float64   `json:"last_windows_bps"`
}

// steadyWindow is one reading of the clients' rates; steadyBand is how
// far a client's rate may move between two windows and still be steady.
const (
	steadyWindow = time.Second
	steadyBand   = 0.10
	// steadyMinWindows counts windows from the first in which every client
	// moved: the client's first requests bind its identity and the agent's
	// next cycles (one a second) set its rate, so the first window may mix
	// before and after.
	steadyMinWindows = 3
	// steadyMaxWindows bounds the wait once every client moves: a client
	// whose rate wanders (a random load, a breaker probing) is measured
	// anyway, and the measurement judges it.
	steadyMaxWindows = 12
	// movingFloor is the least rate, in bytes a second, that counts as a
	// client moving its load: a Java consumer group's join, heartbeats and
	// metadata move 1-3 kB/s before its first fetch, and two such windows
	// within 10 % of each other once passed for steady, measuring a group
	// whose fetching began 1.5 s into the window (1.01 of 1.5 MB/s).
	movingFloor = 10e3
)

// WaitSteady waits, from the broker's sockets, until every client moves
// bytes in a direction at a rate that holds: at least steadyMinWindows
// one-second windows since the first in which all of them moved, the last
// two within steadyBand of each other for each client. A JVM still
// starting or a pipeline still filling is not measured yet. It is an error
// when a client has moved nothing within the timeout; clients that move
// but do not settle within steadyMaxWindows are left to the measurement to
// judge (Steady is false).
func (w *World) WaitSteady(dir int, timeout time.Duration, clients ...*Client) (Steadiness, error) {
	return w.WaitSteadyWithin(dir, timeout, 0, clients...)
}

// WaitSteadyWithin is WaitSteady with the band a test judges at: a test
// that holds a client to ±3 % of a rate must not measure one still
// climbing 5-10 % a second (a JVM producer on a loaded host climbed
// 12.7 → 13.1 of 13.9 MB/s and was measured 5.7 % short, with the 10 %
// band).
func (w *World) WaitSteadyWithin(dir int, timeout time.Duration, band float64, clients ...*Client) (Steadiness, error) {
	if band <= 0 {
		band = steadyBand
	}
	return w.waitRates(dir, timeout, band, nil, clients)
}

// WaitMoving waits, from the broker's sockets, for the first one-second
// window in which every client moved bytes in a direction: for a client
// whose rate is not meant to hold still (Kafka's own throttling pays a
// burst back over its window), where the test's schedule starts from.
func (w *World) WaitMoving(dir int, timeout time.Duration, clients ...*Client) (Steadiness, error) {
	return w.waitRates(dir, timeout, 0, nil, clients)
}

// WaitNear waits, from the broker's sockets, until every client's rate
// holds within band of the rate the test expects of it (want, in bytes a
// second, one per client) over two one-second windows in a row: for a
// client held by two limiters at once (Kafka's quota window pays an early
// burst back over seconds after a slow, steady-looking climb: 2.83, 2.96,
// 2.99 of 3 MB/s over three 5 s windows), or to see a changed limit take
// hold instead of sleeping for it. Clients that move but do not come near
// within the timeout are left to the measurement to judge (Steady false);
// it is an error when one has moved nothing.
func (w *World) WaitNear(dir int, timeout time.Duration, band float64, want []float64, clients ...*Client) (Steadiness, error) {
	if len(want) != len(clients) {
		return Steadiness{}, fmt.Errorf("WaitNear: %d rates for %d clients", len(want), len(clients))
	}
	if band <= 0 {
		band = steadyBand
	}
	return w.waitRates(dir, timeout, band, want, clients)
}

// waitRates waits for every client to move, then, with a band > 0, for
// two windows within it of each other or, with want, of want.
func (w *World) waitRates(dir int, timeout time.Duration, band float64, want []float64, clients []*Client) (Steadiness, error) {
	pids := make([]int, len(clients))
	for i, c := range clients {
		pids[i] = c.Pid()
	}
	began := time.Now()
	var s Steadiness
	var since int // windows since every client first moved; 0 while one has not
	// Waiting for steadiness ends steadyMaxWindows after every client
	// moved; waiting to come near want, and waiting to move, at the timeout.
	for want != nil || since < steadyMaxWindows {
		if (since == 0 || want != nil) && time.Since(began) >= timeout {
			break
		}
		rates, err := w.SocketRates(dir, steadyWindow, pids...)
		if err != nil {
			return s, err
		}
		s.LastBps = append(s.LastBps, rates)
		if len(s.LastBps) > 2 {
			s.LastBps = s.LastBps[1:]
		}
		if since == 0 {
			if !allMoved(rates) {
				continue
			}
			s.MovingAfter = time.Since(began)
			if band <= 0 {
				return s, nil
			}
		}
		since++
		settled := withinBand(s.LastBps[0], rates, band)
		if want != nil {
			settled = withinBand(want, s.LastBps[0], band) && withinBand(want, rates, band)
		}
		if since >= steadyMinWindows && len(s.LastBps) == 2 && allMoved(s.LastBps[0]) && allMoved(rates) && settled {
			s.SteadyAfter, s.Steady = time.Since(began), true
			return s, nil
		}
	}
	if since == 0 {
		return s, fmt.Errorf("a client moved nothing in %v (last window %v B/s, pids %v)", timeout, s.LastBps, pids)
	}
	return s, nil
}

func allMoved(rates []float64) bool {
	for _, r := range rates {
		if r < movingFloor {
			return false
		}
	}
	return true
}

func withinBand(a, b []float64, band float64) bool {
	for i := range a {
		if d := b[i] - a[i]; d > band*a[i] || -d > band*a[i] {
			return false
		}
	}
	return true
}
