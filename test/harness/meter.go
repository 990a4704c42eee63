package harness

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/maps"
)

// The socket meter: what decides a scenario comes from the kernel, never
// from sluice. On the broker side, each client connection's tcp_info
// counts the payload bytes the broker received (produce) and the bytes the
// client acknowledged (fetch); `ss -tinH` prints them. A client process is
// mapped to its connections by its local ports, read with `ss -tnpH` in
// the client namespace.

// SocketCounts is one broker-side connection's tcp_info byte counters.
type SocketCounts struct {
	Received uint64 // bytes_received: what the client delivered (produce)
	Acked    uint64 // bytes_acked: what the client received (fetch)
	Sent     uint64 // bytes_sent: what the broker's TCP handed down, retransmissions included
}

// FetchSent is the counter Of reads for what the broker's TCP sent, as the
// egress hooks see it leave (before any qdisc): bytes_acked lags it by
// what sits in the qdisc and in flight, up to tcp_limit_output_bytes (4 MiB).
const FetchSent = 2

// Of returns the counter of a direction (0 produce, 1 fetch, FetchSent).
func (s SocketCounts) Of(dir int) uint64 {
	switch dir {
	case 0:
		return s.Received
	case FetchSent:
		return s.Sent
	}
	return s.Acked
}

var ssPID = regexp.MustCompile(`pid=(\d+)`)

// BrokerSockets reads every connection to the broker's port 9092 through
// sock_diag in the broker namespace, keyed by the client's port; at is the
// middle of the reading. In process, a reading takes well under a
// millisecond: timed after an `ss` process exited, a 5 s window on a
// loaded host could stretch by the exit's delay, and a greedy client read
// a few per cent under what it moved.
func (w *World) BrokerSockets() (map[uint16]SocketCounts, time.Time, error) {
	w.mu.Lock()
	if w.brokerMeter == nil {
		m, err := NewListenerMeter(w.Pair.Broker)
		if err != nil {
			w.mu.Unlock()
			return nil, time.Time{}, err
		}
		w.brokerMeter = m
	}
	m := w.brokerMeter
	w.mu.Unlock()
	return m.Peers(9092)
}

// ClientPorts maps each client process (pid) in the client namespace to
// the local ports of its connections to the broker.
func (w *World) ClientPorts() (map[int][]uint16, error) {
	out, err := exec.Command("ip", "netns", "exec", w.Pair.Client.Name, "ss", "-tnpH", "( dport = :9092 )").Output()
	if err != nil {
		return nil, fmt.Errorf("ss in the client namespace: %w", err)
	}
	ports := map[int][]uint16{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		m := ssPID.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		i := strings.LastIndexByte(f[3], ':')
		if i < 0 {
			continue
		}
		p, err := strconv.ParseUint(f[3][i+1:], 10, 16)
		if err != nil {
			continue
		}
		ports[pid] = append(ports[pid], uint16(p))
	}
	return ports, sc.Err()
}

// MeterReading is one look at the kernel: broker sockets and which client
// process owns each.
type MeterReading struct {
	at    time.Time
	socks map[uint16]SocketCounts
	owner map[uint16]int // client port -> pid
}

// ReadMeter takes a MeterReading; MeterRates turns two into rates.
func (w *World) ReadMeter() (MeterReading, error) {
	// Owners first: a connection opened between the two reads is then
	// simply not attributed in this reading (counted from the next).
	owners, err := w.ClientPorts()
	if err != nil {
		return MeterReading{}, err
	}
	socks, at, err := w.BrokerSockets()
	if err != nil {
		return MeterReading{}, err
	}
	r := MeterReading{at: at, socks: socks, owner: map[uint16]int{}}
	for pid, ports := range owners {
		for _, p := range ports {
			r.owner[p] = pid
		}
	}
	return r, nil
}

// SocketRates measures, from the kernel's per-socket counters on the broker
// side, the rate each process (by pid) moved in a direction over the given
// duration: bytes the broker received from it (dir 0, produce) or bytes it
// acknowledged (dir 1, fetch). The sockets are read every meterEvery, so a
// connection a client closes during the window keeps what it moved up to
// the last reading that saw it (a client that reconnects, as kafka-go does
// after a read deadline passes, loses at most that much); connections opened
// during the window count from zero. An underestimate, never an overestimate.
func (w *World) SocketRates(dir int, over time.Duration, pids ...int) ([]float64, error) {
	queries := make([]SocketQuery, len(pids))
	for i, pid := range pids {
		queries[i] = SocketQuery{Dir: dir, Pid: pid}
	}
	return w.SocketRatesOf(over, queries...)
}

// SocketQuery is one rate SocketRatesOf measures: a process's in a
// direction (0 produce, 1 fetch, FetchSent).
type SocketQuery struct {
	Dir, Pid int
}

// SocketRatesOf is SocketRates for rates of several directions over the
// same window, from the same readings: a producer's and a consumer's, or
// what the broker sent a consumer beside what it acknowledged.
func (w *World) SocketRatesOf(over time.Duration, queries ...SocketQuery) ([]float64, error) {
	tallies := map[int]*connTally{}
	for _, q := range queries {
		if tallies[q.Dir] == nil {
			tallies[q.Dir] = newConnTally(q.Dir)
		}
	}
	add := func(r MeterReading) {
		for _, t := range tallies {
			t.add(r)
		}
	}
	first, err := w.ReadMeter()
	if err != nil {
		return nil, err
	}
	add(first)
	last := first
	tick := time.NewTicker(meterEvery)
	defer tick.Stop()
	for end := first.at.Add(over); last.at.Before(end); {
		<-tick.C // the measurement window itself, read as it passes
		if last, err = w.ReadMeter(); err != nil {
			return nil, err
		}
		add(last)
	}
	secs := last.at.Sub(first.at).Seconds()
	rates := make([]float64, len(queries))
	for i, q := range queries {
		rates[i] = float64(tallies[q.Dir].bytes(q.Pid)) / secs
	}
	return rates, nil
}

// meterEvery is how often SocketRates reads the sockets.
const meterEvery = 250 * time.Millisecond

// connTally follows every client connection's counter in one direction
// across meter readings: what each process moved since the first reading,
// including connections that closed since (up to their last reading).
type connTally struct {
	dir        int
	started    bool
	base, last map[clientConn]uint64
	finished   map[int]uint64 // per pid: bytes of connections whose port a new connection took
}

// clientConn is one connection as the meter knows it: its owner and the
// client's port.
type clientConn struct {
	pid  int
	port uint16
}

func newConnTally(dir int) *connTally {
	return &connTally{dir: dir, base: map[clientConn]uint64{}, last: map[clientConn]uint64{}, finished: map[int]uint64{}}
}

func (t *connTally) add(r MeterReading) {
	for port, c := range r.socks {
		pid, ok := r.owner[port]
		if !ok {
			continue
		}
		k, v := clientConn{pid, port}, c.Of(t.dir)
		last, seen := t.last[k]
		switch {
		case !seen && !t.started:
			t.base[k] = v // there before the window: count from here
		case seen && v < last:
			// A new connection on a port an earlier one used.
			t.finished[pid] += last - t.base[k]
			t.base[k] = 0
		}
		t.last[k] = v
	}
	t.started = true
}

func (t *connTally) bytes(pid int) uint64 {
	total := t.finished[pid]
	for k, v := range t.last {
		if k.pid == pid {
			total += v - min(v, t.base[k])
		}
	}
	return total
}

// MeterRates is each process's rate in a direction between two readings
// (see SocketRates).
func MeterRates(dir int, first, last MeterReading, pids []int) []float64 {
	secs := last.at.Sub(first.at).Seconds()
	rates := make([]float64, len(pids))
	for i, pid := range pids {
		var bytes uint64
		for port, c := range last.socks {
			if last.owner[port] != pid {
				continue
			}
			now, before := c.Of(dir), uint64(0)
			if f, ok := first.socks[port]; ok && first.owner[port] == pid {
				before = f.Of(dir)
			}
			if now >= before {
				bytes += now - before
			}
		}
		if secs > 0 {
			rates[i] = float64(bytes) / secs
		}
	}
	return rates
}

// Pid is the client process's id, for the socket meter.
func (c *Client) Pid() int { return c.cmd.Process.Pid }

// MeterClients is SocketRates for loadgen clients.
func (w *World) MeterClients(dir int, over time.Duration, clients ...*Client) ([]float64, error) {
	pids := make([]int, len(clients))
	for i, c := range clients {
		pids[i] = c.Pid()
	}
	return w.SocketRates(dir, over, pids...)
}

// Retransmissions is the client namespace's TCP RetransSegs counter
// (/proc/net/snmp read from inside the namespace).
func (w *World) Retransmissions() (uint64, error) {
	out, err := exec.Command("ip", "netns", "exec", w.Pair.Client.Name, "cat", "/proc/net/snmp").Output()
	if err != nil {
		return 0, fmt.Errorf("read /proc/net/snmp in the client namespace: %w", err)
	}
	return tcpCounter(out, "RetransSegs")
}

// tcpCounter reads one field of the Tcp lines of /proc/net/snmp (a line
// of names, then a line of values).
func tcpCounter(snmp []byte, field string) (uint64, error) {
	var names []string
	for _, line := range strings.Split(string(snmp), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == field && i < len(f) {
				return strconv.ParseUint(f[i], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("/proc/net/snmp: no Tcp %s", field)
}

// Qdisc is one qdisc's statistics as tc reports them.
type Qdisc struct {
	Dev     string `json:"dev"`
	Kind    string `json:"kind"`
	Dropped uint64 `json:"drops"`
	Backlog uint64 `json:"backlog"`
}

// BrokerQdiscs lists every qdisc in the broker namespace with its drops
// and backlog, from the kernel (`tc -s -j qdisc show`).
func (w *World) BrokerQdiscs() ([]Qdisc, error) {
	out, err := exec.Command("ip", "netns", "exec", w.Pair.Broker.Name, "tc", "-s", "-j", "qdisc", "show").Output()
	if err != nil {
		return nil, fmt.Errorf("tc qdisc show in the broker namespace: %w", err)
	}
	var q []Qdisc
	if err := json.Unmarshal(out, &q); err != nil {
		return nil, fmt.Errorf("tc qdisc show: %w", err)
	}
	return q, nil
}

// RSS is the agent process's resident memory, from /proc (bytes).
func (a *Agent) RSS() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.Cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", a.Cmd.Process.Pid)
}

// ConnectionEntries counts the entries of the data path's connection
// tables, read from the kernel through their pins.
func (w *World) ConnectionEntries() (int, error) {
	b, err := maps.PinnedBindings(w.Pins)
	return len(b), err
}

// Bindings reads the data path's connection → entity bindings from the
// kernel through their pins, keyed by connection.
func (w *World) Bindings() (map[maps.ConnKey]maps.Binding, error) {
	all, err := maps.PinnedBindings(w.Pins)
	if err != nil {
		return nil, err
	}
	byConn := make(map[maps.ConnKey]maps.Binding, len(all))
	for _, b := range all {
		byConn[b.Conn] = b
	}
	return byConn, nil
}

// MeterPoint is a client's cumulative bytes in one direction, as the
// socket meter read them at an instant.
type MeterPoint struct {
	At    time.Time
	Bytes uint64
}

// MeterTrace reads one client process's broker-side counters every period
// in the background, for rates over any window afterwards (a restart's
// transient, say). Connections opened meanwhile count from zero.
type MeterTrace struct {
	stop   chan struct{}
	done   chan struct{}
	points []MeterPoint
	err    error
}

// TraceClient starts a MeterTrace of a client in a direction.
func (w *World) TraceClient(dir int, every time.Duration, c *Client) *MeterTrace {
	t := &MeterTrace{stop: make(chan struct{}), done: make(chan struct{})}
	pid := c.Pid()
	go func() {
		defer close(t.done)
		tally := newConnTally(dir)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			r, err := w.ReadMeter()
			if err != nil {
				t.err = err
				return
			}
			tally.add(r)
			t.points = append(t.points, MeterPoint{At: r.at, Bytes: tally.bytes(pid)})
			select {
			case <-t.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return t
}

// Stop ends the trace and returns its points.
func (t *MeterTrace) Stop() ([]MeterPoint, error) {
	close(t.stop)
	<-t.done
	return t.points, t.err
}

// TraceRate is the rate between the first point at or after from and the
// last at or before to (0 when the window holds fewer than two points).
func TraceRate(points []MeterPoint, from, to time.Time) float64 {
	var a, b *MeterPoint
	for i := range points {
		p := &points[i]
		if a == nil && !p.At.Before(from) {
			a = p
		}
		if !p.At.After(to) {
			b = p
		}
	}
	if a == nil || b == nil || !b.At.After(a.At) {
		return 0
	}
	return float64(b.Bytes-a.Bytes) / b.At.Sub(a.At).Seconds()
}

// PeakRate is the highest rate over any window of at least the given
// length that starts at a point in [from, to], and where it starts.
func PeakRate(points []MeterPoint, window time.Duration, from, to time.Time) (float64, time.Time) {
	var peak float64
	var at time.Time
	for i := range points {
		if points[i].At.Before(from) || points[i].At.After(to) {
			continue
		}
		for j := i + 1; j < len(points); j++ {
			if d := points[j].At.Sub(points[i].At); d >= window {
				if r := float64(points[j].Bytes-points[i].Bytes) / d.Seconds(); r > peak {
					peak, at = r, points[i].At
				}
				break
			}
		}
	}
	return peak, at
}

// CPU is the CPU time (user + system) the agent process has used so far,
// from /proc/<pid>/stat.
func (a *Agent) CPU() (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", a.Cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) start at ")".
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", a.Cmd.Process.Pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14 of proc(5)
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %v, stime %v", a.Cmd.Process.Pid, err1, err2)
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks, nil
}
