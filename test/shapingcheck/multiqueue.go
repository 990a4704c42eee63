package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluice-dev/sluice/agent/shaper"
	"github.com/sluice-dev/sluice/internal/netns"
)

// What sluice's tree costs traffic it does not govern on a multi-queue
// device. A NIC with a queue per CPU gets the mq root: one child qdisc,
// and one lock, per TX queue, so CPUs sending at once never meet. htb
// replaces that root with a single qdisc whose one lock every CPU takes
// for every packet, governed or not (ungoverned packets go to HTB's direct
// queue, but through the same lock).
//
// Two multi-queue lanes (veth pairs with a TX and an RX queue per CPU,
// XPS mapping CPU n to TX queue n, an mq root as a NIC has) run side by
// side; on one of them, alternating, the mq root is replaced by sluice's
// htb tree (shaper.NewHTB). Each lane carries one greedy flow per CPU from
// the broker (iperf3 -R), sender and receiver pinned to that CPU, so every
// TX queue is in use at once. The ratio is the geometric mean of the runs'
// tree-lane / mq-lane goodput (the paired method of throughput.go: both
// lanes share the machine's mood, and alternating cancels a lane's own
// speed). Recorded, not gated: it is a figure for the design notes.
const (
	mqQueues      = 2 // one per CPU of these machines
	mqRuns        = 8
	mqSeconds     = 4
	mqFirstPort   = 9201 // lane a: 9201, 9202; lane b: 9203, 9204
	mqLaneAPrefix = "198.18.2."
	mqLaneBPrefix = "198.18.3."
)

type mqLane struct {
	dev, clientDev string
	brokerIP       netip.Addr
	ifindex        int
	ports          [mqQueues]int
}

// multiQueue records the case; a failure to measure is recorded in its
// detail, never fatal (the case is not gated).
func (e *env) multiQueue(name string) Case {
	c := Case{Name: name, Gated: false}
	detail, err := e.measureMultiQueue()
	if err != nil {
		c.Detail = map[string]any{"error": err.Error()}
		return c
	}
	c.Detail = detail
	c.GoodputBps = detail["median_tree_lane_bps"].(float64)
	c.Pass = true
	return c
}

func (e *env) measureMultiQueue() (map[string]any, error) {
	suffix := netns.Suffix()
	lanes := [2]*mqLane{
		{dev: "sqa" + suffix, clientDev: "cqa" + suffix, brokerIP: netip.MustParseAddr(mqLaneAPrefix + "1")},
		{dev: "sqb" + suffix, clientDev: "cqb" + suffix, brokerIP: netip.MustParseAddr(mqLaneBPrefix + "1")},
	}
	var servers []*exec.Cmd
	defer func() {
		for _, s := range servers {
			syscall.Kill(-s.Process.Pid, syscall.SIGKILL)
			s.Wait()
		}
		for _, l := range lanes {
			if l.ifindex != 0 { // deleting one end removes the pair
				e.pair.Broker.Do(func() error {
					link, err := netlink.LinkByName(l.dev)
					if err == nil {
						err = netlink.LinkDel(link)
					}
					return err
				})
			}
		}
	}()
	for i, l := range lanes {
		clientIP := netip.MustParseAddr([]string{mqLaneAPrefix, mqLaneBPrefix}[i] + "2")
		if err := netns.VethQueues(e.pair.Broker, l.dev, netip.PrefixFrom(l.brokerIP, 24), e.pair.Client, l.clientDev,
			netip.PrefixFrom(clientIP, 24), mqQueues); err != nil {
			return nil, err
		}
		var err error
		if l.ifindex, err = e.pair.Broker.Index(l.dev); err != nil {
			return nil, err
		}
		for q := range mqQueues {
			// XPS: CPU q sends on TX queue q (on both ends: the client's
			// ACKs too).
			for _, at := range []struct{ ns, dev string }{{e.pair.Broker.Name, l.dev}, {e.pair.Client.Name, l.clientDev}} {
				xps := fmt.Sprintf("echo %x > /sys/class/net/%s/queues/tx-%d/xps_cpus", 1<<q, at.dev, q)
				if out, err := exec.Command("ip", "netns", "exec", at.ns, "sh", "-c", xps).CombinedOutput(); err != nil {
					return nil, fmt.Errorf("xps on %s: %v: %s", at.dev, err, out)
				}
			}
			l.ports[q] = mqFirstPort + i*mqQueues + q
			s := exec.Command("ip", "netns", "exec", e.pair.Broker.Name, "taskset", "-c", fmt.Sprint(q), "iperf3", "-s", "-p", fmt.Sprint(l.ports[q]))
			s.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			if err := s.Start(); err != nil {
				return nil, err
			}
			servers = append(servers, s)
			if err := waitListening(e.pair, l.ports[q]); err != nil {
				return nil, err
			}
		}
		if err := mqRoot(e.pair.Broker, l.dev); err != nil {
			return nil, err
		}
	}
	var ratios, tree, mq []float64
	for run := range mqRuns {
		treeLane := []int{0, 1, 1, 0}[run%4]
		goodput, err := e.mqRun(lanes, treeLane)
		if err != nil {
			return nil, fmt.Errorf("run %d: %w", run, err)
		}
		ratios = append(ratios, goodput[treeLane]/goodput[1-treeLane])
		tree = append(tree, goodput[treeLane])
		mq = append(mq, goodput[1-treeLane])
	}
	return map[string]any{
		"queues_per_device": mqQueues, "flows_per_lane": mqQueues, "runs": mqRuns, "seconds": mqSeconds,
		"ratio_tree_over_mq": geometricMean(ratios), "run_ratios": ratios,
		"median_tree_lane_bps": median(tree), "median_mq_lane_bps": median(mq),
		"measured_at": "iperf3 receivers (the client's -R reports), one flow per CPU per lane, pinned with taskset",
	}, nil
}

// mqRoot puts an mq root on a device, as a multi-queue NIC has (veth
// defaults to noqueue; mq's children are the host's default qdisc).
func mqRoot(ns *netns.NS, dev string) error {
	out, err := exec.Command("ip", "netns", "exec", ns.Name, "tc", "qdisc", "replace", "dev", dev, "root", "handle", "9:", "mq").CombinedOutput()
	if err != nil {
		return fmt.Errorf("mq root on %s: %v: %s", dev, err, out)
	}
	return nil
}

// mqRun gives treeLane sluice's tree instead of mq for one paired run and
// returns each lane's goodput (the sum of its flows).
func (e *env) mqRun(lanes [2]*mqLane, treeLane int) ([2]float64, error) {
	var goodput [2]float64
	l := lanes[treeLane]
	// The kernel's default root first: sluice adopts only that (or its own).
	if out, err := exec.Command("ip", "netns", "exec", e.pair.Broker.Name, "tc", "qdisc", "del", "dev", l.dev, "root").CombinedOutput(); err != nil {
		return goodput, fmt.Errorf("remove mq from %s: %v: %s", l.dev, err, out)
	}
	h, err := shaper.NewHTB(l.ifindex, e.d, 200*time.Millisecond, e.pair.Broker.Do)
	if err != nil {
		return goodput, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i, lane := range lanes {
		for q := range mqQueues {
			wg.Add(1)
			go func() {
				defer wg.Done()
				bps, err := e.pinnedIperf(lane.brokerIP, lane.ports[q], q)
				mu.Lock()
				defer mu.Unlock()
				goodput[i] += bps
				errs = append(errs, err)
			}()
		}
	}
	wg.Wait()
	errs = append(errs, h.Close(), mqRoot(e.pair.Broker, l.dev))
	return goodput, errors.Join(errs...)
}

// pinnedIperf runs one greedy flow from the broker (-R) with the client
// pinned to cpu, and returns the receiver's goodput.
func (e *env) pinnedIperf(server netip.Addr, port, cpu int) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), (mqSeconds+20)*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", e.pair.Client.Name, "taskset", "-c", fmt.Sprint(cpu),
		"iperf3", "-J", "-R", "-c", server.String(), "-p", fmt.Sprint(port), "-t", fmt.Sprint(mqSeconds), "-O", "1").Output()
	var r iperfResult
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		return 0, fmt.Errorf("iperf3: %v (%v): %s", jerr, err, out)
	}
	if r.Error != "" {
		return 0, fmt.Errorf("iperf3: %s", r.Error)
	}
	return r.goodput(), err
}
