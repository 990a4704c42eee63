package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// These checks run in a virtual machine on a shared host. When the
// hypervisor runs another guest, nothing in this one runs: not the
// senders, not the qdiscs, not the receivers. HTB's buckets hold at most a
// burst, so the time lost is never made up, and a window or a run reads
// short by what was taken, whatever sluice does. The kernel counts that
// time per CPU as steal (/proc/stat), and the checks read it beside their
// own measurements: a shortfall that the stolen time explains is the
// host's, not sluice's, and is reported as such. Steal never excuses an
// excess: a rate above its limit fails whatever the host did.

// userHZ is the unit of /proc/stat's counters (USER_HZ, 100 on Linux).
const userHZ = 100

// stealClock is each CPU's stolen time, as /proc/stat reads at one instant.
type stealClock []time.Duration

// readSteal reads the steal column of every cpuN line of /proc/stat.
func readSteal() (stealClock, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, err
	}
	return parseSteal(data)
}

func parseSteal(data []byte) (stealClock, error) {
	var out stealClock
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// cpuN user nice system idle iowait irq softirq steal ...
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		ticks, err := strconv.ParseUint(f[8], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/stat %s steal %q: %w", f[0], f[8], err)
		}
		out = append(out, time.Duration(ticks)*time.Second/userHZ)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("/proc/stat has no cpuN lines")
	}
	return out, sc.Err()
}

// since is the most any one CPU had stolen between before and s: the
// data path of one flow runs where its softirq runs, so the worst CPU
// bounds what the host took from it.
func (s stealClock) since(before stealClock) time.Duration {
	var worst time.Duration
	for i := range s {
		if i < len(before) && s[i]-before[i] > worst {
			worst = s[i] - before[i]
		}
	}
	return worst
}

// stealMeter reads the stolen time from a moment on: the start of a
// case's measured seconds, after iperf3's omitted ones.
type stealMeter struct {
	from stealClock
	err  error
	done chan struct{}
}

func stealFrom(at time.Time) *stealMeter {
	m := &stealMeter{done: make(chan struct{})}
	time.AfterFunc(time.Until(at), func() {
		m.from, m.err = readSteal()
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
	now, err := readSteal()
	if err != nil {
		return 0, err
	}
	return now.since(m.from), nil
}

// heldTo says whether a goodput measured over measured seconds is within
// tol of rate, where a shortfall may also be the share of those seconds
// the host stole. An excess is never excused.
func heldTo(goodput, rate, tol float64, stolen time.Duration, measured float64) bool {
	lost := stolen.Seconds() / measured
	return goodput <= rate*(1+tol) && goodput >= rate*(1-tol-lost)
}
