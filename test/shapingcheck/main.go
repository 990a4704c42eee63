// Command shapingcheck measures how well sluice's shapers hold real TCP
// flows to a rate, in network namespaces joined by a veth pair
// (198.18.0.0/24), with iperf3 as the load. It writes shaping-results.json
// and exits non-zero if a gated case fails.
//
// Cases: htb egress (fetch) and ingress (produce), 1 and 8 greedy flows, at
// 5, 20 and 80 MB/s; two entities at 10 and 30 MB/s at once; a step
// 40 → 10 → 40 MB/s; a reservation that holds in 100 ms windows against 8
// newcomers under the capacity (hierarchy.go); the programs' cost on line
// rate, attached versus not in paired windows, ungoverned and governed,
// both ways, 1 and 8 flows, and with offloads off, beside bpf_stats'
// per-packet run time (throughput.go); what htb's single root costs
// ungoverned traffic on a multi-queue device against the mq root
// (multiqueue.go). Recorded, not gated, and run only with -recorded (make
// shaping-report; make test runs the gated cases): police, the cost with
// offloads off, and the multi-queue figure.
//
// Run as root: go run ./test/shapingcheck -out shaping-results.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf/rlimit"

	"github.com/sluice-dev/sluice/agent/attach"
	"github.com/sluice-dev/sluice/agent/shaper"
	"github.com/sluice-dev/sluice/agent/shaping"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

// Case is one measured case in shaping-results.json.
type Case struct {
	Name            string         `json:"name"`
	RateBps         float64        `json:"rate_bps"`
	GoodputBps      float64        `json:"goodput_bps"`
	RetransmitRatio float64        `json:"retransmit_ratio"`
	Pass            bool           `json:"pass"`
	Gated           bool           `json:"gated"`
	Detail          map[string]any `json:"detail,omitempty"`
}

// Results is shaping-results.json.
type Results struct {
	Cases []Case `json:"cases"`
}

const (
	mb          = 1_000_000
	governed    = 9092
	governed2   = 9094
	ungoverned  = 9093
	ungoverned2 = 9095
	caseSeconds = 6
	// iperf3 -O: the first seconds are not counted. Slow start lasts a few
	// round trips, and a round trip grows to the delay bound (200 ms) while
	// the queue fills: eight greedy flows starting together on 5 MB/s were
	// measured to retransmit 706, 1503, 186, 49, 0, 0… segments in their
	// first seconds, so steady state is measured from the fifth second on.
	omitSeconds = 5
)

func main() {
	out := flag.String("out", "shaping-results.json", "results file")
	only := flag.String("only", "", "run only cases whose name contains this")
	recorded := flag.Bool("recorded", false, "also run the cases recorded but not gated (police, offloads off, multi-queue): about 5 minutes more")
	flag.Parse()
	if err := run(*out, *only, *recorded); err != nil {
		log.Fatal(err)
	}
}

type env struct {
	pair  *netns.Pair
	d     *maps.Datapath
	att   *attach.Attachment
	htb   *shaper.HTB
	ifidx int
	// lane2Dev and lane2ClientDev are the second veth pair (throughput.go).
	lane2Dev, lane2ClientDev string
	server                   []*exec.Cmd
}

func run(outFile, only string, recorded bool) error {
	if os.Geteuid() != 0 {
		return errors.New("shapingcheck needs root: it builds namespaces, qdiscs and BPF programs")
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		return errors.New("iperf3 is not installed (make deps installs it)")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	e, err := setup()
	if err != nil {
		return err
	}
	defer e.teardown()

	var res Results
	record := func(c Case) {
		verdict := "PASS"
		if !c.Pass {
			verdict = "FAIL"
		}
		if !c.Gated {
			verdict += " (recorded, not gated)"
		}
		if _, skipped := c.Detail["skipped"]; skipped {
			verdict = "SKIPPED: " + c.Detail["skipped"].(string)
		}
		log.Printf("%-32s rate %6.1f MB/s goodput %7.2f MB/s retrans %.5f %s", c.Name, c.RateBps/mb, c.GoodputBps/mb, c.RetransmitRatio, verdict)
		res.Cases = append(res.Cases, c)
	}
	want := func(name string) bool { return only == "" || strings.Contains(name, only) }

	for _, dir := range []maps.Direction{maps.Fetch, maps.Produce} {
		for _, flows := range []int{1, 8} {
			for _, rate := range []float64{5 * mb, 20 * mb, 80 * mb} {
				name := fmt.Sprintf("htb-%s-%dMB-%dflow", hook(dir), int(rate/mb), flows)
				if want(name) {
					c, err := e.steady(name, dir, flows, rate)
					if err != nil {
						return err
					}
					record(c)
				}
			}
		}
		if name := fmt.Sprintf("htb-%s-two-entities-10-30MB", hook(dir)); want(name) {
			cs, err := e.twoEntities(name, dir, 10*mb, 30*mb)
			if err != nil {
				return err
			}
			for _, c := range cs {
				record(c)
			}
		}
		if name := fmt.Sprintf("htb-%s-reservation-holds-against-8-newcomers", hook(dir)); want(name) {
			c, err := e.hierarchyMeasured(name, dir)
			if err != nil {
				return err
			}
			record(c)
		}
		if name := fmt.Sprintf("htb-%s-step-40-10-40MB", hook(dir)); want(name) {
			c, err := e.step(name, dir, []float64{40 * mb, 10 * mb, 40 * mb})
			if err != nil {
				return err
			}
			record(c)
		}
	}
	for _, rate := range []float64{5 * mb, 20 * mb, 80 * mb} {
		name := fmt.Sprintf("police-ingress-%dMB-1flow", int(rate/mb))
		if recorded && want(name) {
			c, err := e.police(name, rate)
			if err != nil {
				return err
			}
			record(c)
		}
	}
	// The cost of the programs, paired runs (throughput.go): ungoverned
	// traffic (the programs look and let go), and governed traffic counted
	// but not held, both ways, 1 and 8 flows, and with offloads off.
	// Offloads off puts ~20x more packets through the programs at a lower
	// line rate: recorded beside the gated cases, not gated.
	for _, c := range []struct {
		name  string
		ports [2]int
		load  pairedLoad
	}{
		// Gated at 0.90, which fails a regression of a tenth of line
		// rate: single runs' ratios spread with a standard deviation of
		// 0.08-0.19 and the means sat at 0.93-1.03, so a case near the
		// gate runs more blocks before it is judged (sequentialVerdict).
		{"throughput-ungoverned-attached-vs-not", [2]int{ungoverned, ungoverned2}, pairedLoad{flows: 1, gatedAtRatio: 0.90}},
		{"throughput-governed-unshaped-attached-vs-not", [2]int{governed, governed2}, pairedLoad{flows: 1, gatedAtRatio: 0.90}},
		{"throughput-governed-egress-attached-vs-not", [2]int{governed, governed2}, pairedLoad{flows: 1, egress: true, gatedAtRatio: 0.90}},
		{"throughput-governed-8flows-attached-vs-not", [2]int{governed, governed2}, pairedLoad{flows: 8, gatedAtRatio: 0.90}},
		{"throughput-governed-egress-8flows-attached-vs-not", [2]int{governed, governed2}, pairedLoad{flows: 8, egress: true, gatedAtRatio: 0.90}},
		{"throughput-governed-offloads-off-attached-vs-not", [2]int{governed, governed2}, pairedLoad{flows: 1, offloadsOff: true}},
		{"throughput-governed-egress-offloads-off-attached-vs-not", [2]int{governed, governed2}, pairedLoad{flows: 1, egress: true, offloadsOff: true}},
	} {
		if want(c.name) && (recorded || c.load.gatedAtRatio > 0) {
			r, err := e.paired(c.name, c.ports, c.load)
			if err != nil {
				return err
			}
			record(r)
		}
	}
	// What htb's single root costs traffic it does not govern on a
	// multi-queue device, against the mq root (multiqueue.go).
	if name := "multiqueue-ungoverned-htb-tree-vs-mq-root"; recorded && want(name) {
		record(e.multiQueue(name))
	}

	data, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(outFile, append(data, '\n'), 0o644); err != nil {
		return err
	}
	failed := 0
	for _, c := range res.Cases {
		if c.Gated && !c.Pass {
			failed++
		}
	}
	log.Printf("wrote %s: %d cases, %d gated failures", outFile, len(res.Cases), failed)
	passed := 0
	for _, c := range res.Cases {
		if c.Gated && c.Pass {
			passed++
		}
	}
	fmt.Printf("shaping: %d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return fmt.Errorf("%d gated shaping cases failed", failed)
	}
	return nil
}

func hook(dir maps.Direction) string {
	if dir == maps.Fetch {
		return "egress"
	}
	return "ingress"
}

func setup() (*env, error) {
	pair, err := netns.CreatePair()
	if err != nil {
		return nil, err
	}
	e := &env{pair: pair}
	opts := maps.DefaultOptions()
	opts.MaxEntities = 1024
	opts.MaxConnections = 16384
	if e.d, err = maps.Load(opts); err != nil {
		e.teardown()
		return nil, err
	}
	if err := e.d.SetListeners([]uint16{governed, governed2, hierReservedPort, hierNewcomerPort}); err != nil {
		e.teardown()
		return nil, err
	}
	if e.ifidx, err = pair.Broker.Index(pair.BrokerDev); err != nil {
		e.teardown()
		return nil, err
	}
	if err := e.attach(); err != nil {
		e.teardown()
		return nil, err
	}
	if err := e.addLane2(); err != nil {
		e.teardown()
		return nil, err
	}
	for _, port := range []int{governed, governed2, ungoverned, ungoverned2, hierReservedPort, hierNewcomerPort} {
		cmd := exec.Command("ip", "netns", "exec", pair.Broker.Name, "iperf3", "-s", "-p", fmt.Sprint(port))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			e.teardown()
			return nil, err
		}
		e.server = append(e.server, cmd)
	}
	// Ready when each server accepts a connection.
	for _, port := range []int{governed, governed2, ungoverned, ungoverned2, hierReservedPort, hierNewcomerPort} {
		if err := waitListening(pair, port); err != nil {
			e.teardown()
			return nil, err
		}
	}
	return e, nil
}

// attachPrograms puts only the data path's programs on the broker's device.
func (e *env) attachPrograms() error {
	return e.pair.Broker.Do(func() (err error) {
		e.att, err = attach.Attach(e.ifidx, e.d.IngressProgram(), e.d.EgressProgram(), attach.Auto)
		return err
	})
}

// attach puts the programs and the HTB shaper in place.
func (e *env) attach() error {
	if err := e.attachPrograms(); err != nil {
		return err
	}
	var err error
	if e.htb, err = shaper.NewHTB(e.ifidx, e.d, 200*time.Millisecond, e.pair.Broker.Do); err != nil {
		return err
	}
	if err := e.d.Heartbeat(maps.MonotonicNow()); err != nil {
		return err
	}
	return e.d.SetSettings(maps.Settings{Shaper: maps.ShaperHTB, IFBIndex: e.htb.IFBIndex(), StaleAfter: time.Hour, SamplesPerSecond: 200})
}

func (e *env) detach() error {
	var errs []error
	if e.htb != nil {
		errs = append(errs, e.htb.Close())
		e.htb = nil
	}
	if e.att != nil {
		errs = append(errs, e.pair.Broker.Do(e.att.Detach))
		e.att = nil
	}
	return errors.Join(errs...)
}

func (e *env) teardown() {
	for _, s := range e.server {
		syscall.Kill(-s.Process.Pid, syscall.SIGKILL)
		s.Wait()
	}
	if err := e.detach(); err != nil {
		log.Printf("detach: %v", err)
	}
	if e.d != nil {
		e.d.Close()
	}
	if err := e.pair.Delete(); err != nil {
		log.Printf("delete namespaces: %v", err)
	}
}

func waitListening(pair *netns.Pair, port int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := pair.Client.Dial(fmt.Sprintf("%s:%d", pair.BrokerIP, port))
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("iperf3 server on port %d never listened: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// iperfResult is what the checks read of iperf3's JSON.
type iperfResult struct {
	Intervals []struct {
		Sum struct {
			Bytes       float64  `json:"bytes"`
			Seconds     float64  `json:"seconds"`
			Omitted     bool     `json:"omitted"`
			Retransmits *float64 `json:"retransmits"` // only on the sender's side
		} `json:"sum"`
	} `json:"intervals"`
	End struct {
		SumSent struct {
			Bytes       float64 `json:"bytes"`
			Seconds     float64 `json:"seconds"`
			Retransmits float64 `json:"retransmits"`
		} `json:"sum_sent"`
		SumReceived struct {
			Bytes   float64 `json:"bytes"`
			Seconds float64 `json:"seconds"`
		} `json:"sum_received"`
	} `json:"end"`
	Error string `json:"error"`
	// ServerOutput is the server's own report (--get-server-output): the
	// receiver's per-second view when the client sends (ingress).
	ServerOutput *struct {
		Intervals []struct {
			Sum struct {
				Bytes   float64 `json:"bytes"`
				Seconds float64 `json:"seconds"`
			} `json:"sum"`
		} `json:"intervals"`
	} `json:"server_output_json"`
}

// perSecond is the receiver's goodput per interval: the client's intervals
// when the broker sends (-R), the server's when the client sends.
func (r iperfResult) perSecond(reverse bool) []float64 {
	var out []float64
	if !reverse && r.ServerOutput != nil {
		for _, iv := range r.ServerOutput.Intervals {
			if iv.Sum.Seconds > 0 {
				out = append(out, iv.Sum.Bytes/iv.Sum.Seconds)
			}
		}
		return out
	}
	for _, iv := range r.Intervals {
		if iv.Sum.Seconds > 0 {
			out = append(out, iv.Sum.Bytes/iv.Sum.Seconds)
		}
	}
	return out
}

func (r iperfResult) goodput() float64 {
	if r.End.SumReceived.Seconds == 0 {
		return 0
	}
	return r.End.SumReceived.Bytes / r.End.SumReceived.Seconds
}

// retransmitRatio is retransmitted segments over segments sent (full-size
// segments of 1448 payload bytes), over the same window as the goodput:
// after the omitted slow-start seconds. When the client is the sender
// (ingress) iperf3 reports retransmits per interval; when the broker sends
// (egress, -R) only the sender's whole-run total is known, which is used
// as it is (stricter: it includes slow start).
func (r iperfResult) retransmitRatio() float64 {
	var retrans, bytes float64
	perInterval := false
	for _, iv := range r.Intervals {
		if iv.Sum.Omitted {
			continue
		}
		if iv.Sum.Retransmits != nil {
			retrans += *iv.Sum.Retransmits
			perInterval = true
		}
		bytes += iv.Sum.Bytes
	}
	if !perInterval {
		retrans, bytes = r.End.SumSent.Retransmits, r.End.SumSent.Bytes
	}
	if bytes == 0 {
		return 0
	}
	return retrans / (bytes / 1448)
}

// iperf runs one client in the client namespace; reverse makes the broker
// send (egress, fetch).
func (e *env) iperf(ctx context.Context, port, flows, seconds, omit int, reverse bool, cport int, extra ...string) (iperfResult, error) {
	return e.iperfTo(ctx, e.pair.BrokerIP, port, flows, seconds, omit, reverse, cport, extra...)
}

// iperfTo runs iperf3 from the client namespace against server:port.
func (e *env) iperfTo(ctx context.Context, server netip.Addr, port, flows, seconds, omit int, reverse bool, cport int, extra ...string) (iperfResult, error) {
	args := []string{"netns", "exec", e.pair.Client.Name, "iperf3", "-J", "-c", server.String(), "-p", fmt.Sprint(port),
		"-t", fmt.Sprint(seconds), "-O", fmt.Sprint(omit), "-P", fmt.Sprint(flows), "-i", "1"}
	if reverse {
		args = append(args, "-R")
	}
	if cport != 0 {
		args = append(args, "--cport", fmt.Sprint(cport))
	}
	args = append(args, extra...)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds+omit+20)*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).Output()
	var r iperfResult
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		return r, fmt.Errorf("iperf3: %v (%v): %s", jerr, err, out)
	}
	if r.Error != "" {
		return r, fmt.Errorf("iperf3: %s", r.Error)
	}
	return r, err
}

func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }

// steady shapes the unknown entity (the iperf3 connections are not bound)
// at rate and measures goodput after slow start.
func (e *env) steady(name string, dir maps.Direction, flows int, rate float64) (Case, error) {
	if err := e.htb.SetRates(dir, []shaping.Rate{{Entity: maps.EntityUnknown, BytesPerSecond: rate}}); err != nil {
		return Case{}, err
	}
	defer e.htb.Remove(dir, maps.EntityUnknown)
	steal := stealFrom(time.Now().Add(omitSeconds * time.Second))
	r, err := e.iperf(context.Background(), governed, flows, caseSeconds, omitSeconds, dir == maps.Fetch, 0)
	if err != nil {
		return Case{}, fmt.Errorf("%s: %w", name, err)
	}
	stolen, err := steal.stolen()
	if err != nil {
		return Case{}, err
	}
	held, err := e.htb.Held(dir)
	if err != nil {
		return Case{}, err
	}
	c := Case{Name: name, RateBps: rate, GoodputBps: r.goodput(), RetransmitRatio: r.retransmitRatio(), Gated: true}
	c.Pass = heldTo(c.GoodputBps, rate, 0.03, stolen, caseSeconds) && c.RetransmitRatio <= 0.001
	c.Detail = map[string]any{"flows": flows, "seconds": caseSeconds, "omitted_seconds": omitSeconds, "sender_retransmits_whole_run": r.End.SumSent.Retransmits,
		"stolen_s": stolen.Seconds()}
	for _, h := range held {
		c.Detail["shaper_dropped_packets"] = h.Dropped
	}
	var perInterval []float64
	for _, iv := range r.Intervals {
		if iv.Sum.Retransmits != nil {
			perInterval = append(perInterval, *iv.Sum.Retransmits)
		}
	}
	c.Detail["retransmits_per_second"] = perInterval
	return c, nil
}

// twoEntities runs two clients at once, each bound to its own entity by
// client port as soon as its connections appear.
func (e *env) twoEntities(name string, dir maps.Direction, rateA, rateB float64) ([]Case, error) {
	const entityA, entityB = 11, 12
	const cportA, cportB = 51000, 52000
	if err := e.htb.SetRates(dir, []shaping.Rate{{Entity: entityA, BytesPerSecond: rateA}, {Entity: entityB, BytesPerSecond: rateB}}); err != nil {
		return nil, err
	}
	defer e.htb.Remove(dir, entityA)
	defer e.htb.Remove(dir, entityB)
	ctx, stop := context.WithCancel(context.Background())
	bound := make(chan struct{})
	go func() { e.bindByPort(ctx, map[uint16]uint32{cportA: entityA, cportB: entityB}); close(bound) }()
	var wg sync.WaitGroup
	results := make([]iperfResult, 2)
	errs := make([]error, 2)
	steal := stealFrom(time.Now().Add((omitSeconds + 1) * time.Second))
	for i, p := range []struct{ port, cport int }{{governed, cportA}, {governed2, cportB}} {
		wg.Add(1)
		go func(i, port, cport int) {
			defer wg.Done()
			results[i], errs[i] = e.iperf(ctx, port, 1, caseSeconds, omitSeconds+1, dir == maps.Fetch, cport)
		}(i, p.port, p.cport)
	}
	wg.Wait()
	stop()
	<-bound
	stolen, err := steal.stolen()
	if err != nil {
		return nil, err
	}
	var out []Case
	for i, rate := range []float64{rateA, rateB} {
		if errs[i] != nil {
			return nil, fmt.Errorf("%s: %w", name, errs[i])
		}
		c := Case{Name: fmt.Sprintf("%s-entity%d", name, i+1), RateBps: rate, GoodputBps: results[i].goodput(), RetransmitRatio: results[i].retransmitRatio(), Gated: true}
		c.Pass = heldTo(c.GoodputBps, rate, 0.03, stolen, caseSeconds) && c.RetransmitRatio <= 0.001
		c.Detail = map[string]any{"stolen_s": stolen.Seconds()}
		out = append(out, c)
	}
	return out, nil
}

// bindByPort keeps the data path's connections whose client port is one
// of ports bound to that port's entity, until ctx ends.
func (e *env) bindByPort(ctx context.Context, ports map[uint16]uint32) {
	e.bindWhile(ctx, func(b maps.Binding) uint32 { return ports[b.Conn.Peer.Port()] })
}

// bindWhile keeps every connection bound to the entity entityOf gives it
// (0: leave it), until ctx ends. It reconciles on every pass: a new
// connection's SYN clears whatever an earlier connection on the same
// 4-tuple left.
func (e *env) bindWhile(ctx context.Context, entityOf func(maps.Binding) uint32) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var binds []maps.Binding
		e.d.EachBinding(func(b maps.Binding) {
			if ent := entityOf(b); ent != 0 && (b.Produce != ent || b.Fetch != ent) {
				binds = append(binds, maps.Binding{Conn: b.Conn, Produce: ent, Fetch: ent})
			}
		})
		if err := e.d.BindConns(binds); err != nil {
			log.Printf("bind: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// step changes the rate every phase and checks that the goodput from 2 s
// after each change on is within 5 % of the new rate.
func (e *env) step(name string, dir maps.Direction, rates []float64) (Case, error) {
	const phase = 6
	if err := e.htb.SetRates(dir, []shaping.Rate{{Entity: maps.EntityUnknown, BytesPerSecond: rates[0]}}); err != nil {
		return Case{}, err
	}
	defer e.htb.Remove(dir, maps.EntityUnknown)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	start := make(chan time.Time, 1)
	var changeErr error
	go func() {
		t0 := <-start
		for i, r := range rates[1:] {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(t0.Add(time.Duration((i+1)*phase) * time.Second))):
			}
			if err := e.htb.SetRates(dir, []shaping.Rate{{Entity: maps.EntityUnknown, BytesPerSecond: r}}); err != nil {
				changeErr = err
			}
		}
	}()
	t0 := time.Now()
	start <- t0
	// The host's stolen time at each second of the run, to judge each
	// phase's settled seconds by what the host left of them.
	steals := make([]*stealMeter, phase*len(rates)+1)
	for i := range steals {
		steals[i] = stealFrom(t0.Add(time.Duration(i) * time.Second))
	}
	r, err := e.iperf(ctx, governed, 1, phase*len(rates), 0, dir == maps.Fetch, 0, "--get-server-output")
	if err != nil {
		return Case{}, fmt.Errorf("%s: %w", name, err)
	}
	if changeErr != nil {
		return Case{}, changeErr
	}
	per := r.perSecond(dir == maps.Fetch)
	c := Case{Name: name, RateBps: rates[len(rates)-1], GoodputBps: r.goodput(), RetransmitRatio: r.retransmitRatio(), Gated: true, Pass: true}
	var checks []map[string]any
	for i := 1; i < len(rates); i++ {
		// Settled: the goodput from 2 s after the change to the end of the
		// phase. Its mean, because the receiver's one-second bins swap a
		// few percent of bytes with their neighbours (ingress through the
		// IFB read 10.49, 9.77, 10.10, 10.03, 9.45, 10.17 MB/s at 10).
		from, to := i*phase+2, (i+1)*phase
		if to > len(per) {
			c.Pass = false
			continue
		}
		settled := 0.0
		for _, bps := range per[from:to] {
			settled += bps / float64(to-from)
		}
		<-steals[from].done
		<-steals[to].done
		stolen := steals[to].from.Since(steals[from].from)
		ok := heldTo(settled, rates[i], 0.05, stolen, float64(to-from))
		c.Pass = c.Pass && ok
		checks = append(checks, map[string]any{"from_s_after_change": 2, "rate_bps": rates[i], "goodput_bps": settled, "per_second_bps": per[from:to],
			"stolen_s": stolen.Seconds(), "pass": ok})
	}
	c.Pass = c.Pass && c.RetransmitRatio <= 0.001
	c.Detail = map[string]any{"rates_bps": rates, "phase_seconds": phase, "per_second_bps": per, "steps": checks}
	return c, nil
}

// police measures the drop-based token bucket on ingress (recorded, not
// gated: it is the last resort the design warns about).
func (e *env) police(name string, rate float64) (Case, error) {
	if err := e.d.SetSettings(maps.Settings{Shaper: maps.ShaperPolice, StaleAfter: time.Hour, SamplesPerSecond: 200, PoliceBurst: shaping.DefaultPoliceBurst}); err != nil {
		return Case{}, err
	}
	defer e.d.SetSettings(maps.Settings{Shaper: maps.ShaperHTB, IFBIndex: e.htb.IFBIndex(), StaleAfter: time.Hour, SamplesPerSecond: 200})
	p := shaper.NewPolice(e.d)
	if err := p.SetRates(maps.Produce, []shaping.Rate{{Entity: maps.EntityUnknown, BytesPerSecond: rate}}); err != nil {
		return Case{}, err
	}
	defer p.Close()
	r, err := e.iperf(context.Background(), governed, 1, caseSeconds, omitSeconds, false, 0)
	if err != nil {
		return Case{}, fmt.Errorf("%s: %w", name, err)
	}
	c := Case{Name: name, RateBps: rate, GoodputBps: r.goodput(), RetransmitRatio: r.retransmitRatio(), Gated: false}
	c.Pass = within(c.GoodputBps, rate, 0.03) && c.RetransmitRatio <= 0.001
	c.Detail = map[string]any{"burst_bytes": shaping.DefaultPoliceBurst, "sender_retransmits_whole_run": r.End.SumSent.Retransmits}
	return c, nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
