package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// When the hypervisor runs another guest, nothing in this VM runs: not the
// clients, not the qdiscs, not the broker. The kernel counts that time per
// CPU as steal (/proc/stat); checks read it beside their own measurements,
// as what the host took, which neither sluice nor a tenant controls.

// userHZ is the unit of /proc/stat's counters (USER_HZ, 100 on Linux).
const userHZ = 100

// StealClock is each CPU's stolen time, as /proc/stat reads at one instant.
type StealClock []time.Duration

// ReadSteal reads the steal column of every cpuN line of /proc/stat.
func ReadSteal() (StealClock, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, err
	}
	return ParseSteal(data)
}

// ParseSteal reads /proc/stat's text.
func ParseSteal(data []byte) (StealClock, error) {
	var out StealClock
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

// Since is the most any one CPU had stolen between before and s: a flow's
// data path, or a process, runs where it is scheduled, so the worst CPU
// bounds what the host took from it.
func (s StealClock) Since(before StealClock) time.Duration {
	var worst time.Duration
	for i := range s {
		if i < len(before) && s[i]-before[i] > worst {
			worst = s[i] - before[i]
		}
	}
	return worst
}

// Mean is the CPUs' stolen time between before and s, averaged over them:
// what the host took from the machine as a whole.
func (s StealClock) Mean(before StealClock) time.Duration {
	var sum time.Duration
	n := 0
	for i := range s {
		if i < len(before) {
			sum += s[i] - before[i]
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}
