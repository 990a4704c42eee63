package main

import (
	"time"

	"github.com/sluice-dev/sluice/test/harness"
)

// These checks run in a virtual machine on a shared host. When the
// hypervisor runs another guest, nothing in this one runs: not the
// senders, not the qdiscs, not the receivers. HTB's buckets hold at most a
// burst, so the time lost is never made up, and a window or a run reads
// short by what was taken, whatever sluice does. The kernel counts that
// time per CPU as steal (/proc/stat, harness.ReadSteal), and the checks
// read it beside their own measurements: a shortfall that the stolen time
// explains is the host's, not sluice's, and is reported as such. Steal never excuses an
// excess: a rate above its limit fails whatever the host did.

// stealMeter reads the stolen time from a moment on: the start of a
// case's measured seconds, after iperf3's omitted ones.
type stealMeter struct {
	from harness.StealClock
	err  error
	done chan struct{}
}

func stealFrom(at time.Time) *stealMeter {
	m := &stealMeter{done: make(chan struct{})}
	time.AfterFunc(time.Until(at), func() {
		m.from, m.err = harness.ReadSteal()
		close(m.done)
	})
	return m
}

// stolen is the worst CPU's stolen time since the meter's moment.
func (m *stealMeter) stolen() (time.Duration, error) {
	<-m.done
	if m.err != nil {
		return 0, m.err
	}
	now, err := harness.ReadSteal()
	if err != nil {
		return 0, err
	}
	return now.Since(m.from), nil
}

// heldTo says whether a goodput measured over measured seconds is within
// tol of rate, where a shortfall may also be the share of those seconds
// the host stole. An excess is never excused.
func heldTo(goodput, rate, tol float64, stolen time.Duration, measured float64) bool {
	lost := stolen.Seconds() / measured
	return goodput <= rate*(1+tol) && goodput >= rate*(1-tol-lost)
}
