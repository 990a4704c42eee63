// Command demo is sluice's main job for a newcomer with no Kafka cluster:
// it builds everything, starts a broker namespace with a Kafka protocol
// peer (kfake) and the sluice agent, and plays a one-minute story with real
// Kafka clients (franz-go, sarama, kafka-go) in a client namespace:
//
//	 0-10 s  idle: a core producer with a 16 MB/s reservation sends 8 MB/s
//	10-22 s  hot spot: an unconfigured producer takes the idle bandwidth
//	22-36 s  contention: core and a backfill producer (weight 0.1) go greedy;
//	         borrowed bandwidth is taken back by weight, core keeps its floor
//	36-52 s  overcommit: a topic-partition reserving 24 MB/s joins core:
//	         reservations exceed C, both are scaled, the alert is raised
//	52-60 s  recovery: the partition's producer stops, the alert clears
//
// Every second it shows `sluice status` live, and at the end writes
// demo.png: each entity's rate as the kernel measured it (the broker
// sockets' tcp_info of the client process producing it) against its
// dynamic limit and reservation, with sluice's own counter as a faint line.
// Run as root: go run ./test/demo (make demo).
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/test/harness"
)

// phase is one part of the story.
type phase struct {
	at    time.Duration
	title string
	run   func(d *demo) error
}

type demo struct {
	w       *harness.World
	clients map[string]*harness.Client
}

const capacity = "40MB" // C = 36 MB/s, H = 4 MB/s

// The story's entities, as the plot names them, and the client whose
// sockets carry each one's bytes.
var series = []struct{ kind, name, label, client string }{
	{"client", "core-producer", "core-producer (reserved 16 MB/s)", "core-producer"},
	{"client", "hot-producer", "hot-producer (unconfigured)", "hot-producer"},
	{"client", "backfill-producer", "backfill-producer (weight 0.1)", "backfill-producer"},
	{"topic-partition", "orders-1", "orders-1 (reserved 24 MB/s)", "orders-1-producer"},
}

func main() {
	out := flag.String("out", "demo.png", "where to write the plot")
	flag.Parse()
	if err := run(*out); err != nil {
		log.Fatal(err)
	}
}

func run(out string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the demo builds network namespaces and attaches BPF programs: run it as root")
	}
	dir, err := os.MkdirTemp("", "sluice-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root, _ := os.Getwd()
	fmt.Println("building sluice and the demo's Kafka clients...")
	sluice, loadgen, err := harness.Build(root, dir)
	if err != nil {
		return err
	}
	w, err := harness.New(dir, sluice, loadgen, harness.Options{Topics: []string{"orders"}, Partitions: 2})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("cleaning up: stopping clients and agent, removing namespaces")
		if err := w.Close(); err != nil {
			log.Printf("cleanup: %v", err)
		}
	}()
	cfg := w.WriteConfig("demo", harness.Config{ProduceCapacity: capacity, FetchCapacity: capacity, MemoryCycles: 3, Extra: `entities:
  clients:
    core-producer: {producer_byte_reservation: 16MB}
    backfill-producer: {quota_weight: 0.1}
    <default>: {quota_weight: 1}
  topic-partitions:
    orders-1: {producer_byte_reservation: 24MB}
`})
	a, err := w.StartAgent(cfg)
	if err != nil {
		return err
	}
	defer a.Stop()
	d := &demo{w: w, clients: map[string]*harness.Client{}}
	story := []phase{
		{0, "idle: core-producer sends 8 MB/s, well inside its 16 MB/s reservation", func(d *demo) error {
			return d.start("core-producer", "franz", 0, 8e6)
		}},
		{10 * time.Second, "hot spot: an unconfigured producer takes the idle bandwidth", func(d *demo) error {
			return d.start("hot-producer", "franz", 0, 0)
		}},
		{22 * time.Second, "contention: core and backfill go greedy; borrowed bandwidth is taken back by weight", func(d *demo) error {
			d.stop("core-producer")
			if err := d.start("core-producer", "franz", 0, 0); err != nil {
				return err
			}
			return d.start("backfill-producer", "kafkago", 0, 0)
		}},
		{36 * time.Second, "overcommit: orders-1 (24 MB/s reserved) joins core (16 MB/s): 40 > C = 36", func(d *demo) error {
			d.stop("hot-producer")
			d.stop("backfill-producer")
			return d.start("orders-1-producer", "sarama", 1, 0)
		}},
		{52 * time.Second, "recovery: orders-1's producer stops; the overcommit alert clears", func(d *demo) error {
			d.stop("orders-1-producer")
			return nil
		}},
	}
	const length = 60 * time.Second
	var samples []sample
	begin := time.Now()
	next := 0
	current := ""
	last, err := w.ReadMeter()
	if err != nil {
		return err
	}
	for elapsed := time.Duration(0); elapsed < length; elapsed = time.Since(begin) {
		for next < len(story) && elapsed >= story[next].at {
			current = story[next].title
			if err := story[next].run(d); err != nil {
				return err
			}
			next++
		}
		time.Sleep(time.Until(begin.Add((elapsed/time.Second + 1) * time.Second)))
		reading, err := w.ReadMeter()
		if err != nil {
			return err
		}
		s, err := w.Status()
		if err != nil {
			return err
		}
		samples = append(samples, d.sample(time.Since(begin), last, reading, s))
		last = reading
		screen, _ := exec.Command(w.Sluice, "status", "--socket", w.Socket).CombinedOutput()
		fmt.Print("\033[H\033[2J")
		fmt.Printf("sluice demo  t=%2.0fs / 60s   %s\n\n%s", time.Since(begin).Seconds(), current, screen)
	}
	for name, c := range d.clients {
		if c.Errors() > 0 {
			log.Printf("%s saw %d errors", name, c.Errors())
		}
	}
	path, _ := filepath.Abs(out)
	if err := drawStory(path, samples, story); err != nil {
		return err
	}
	fmt.Printf("\nwrote %s: each entity's rate measured by the kernel (solid) against its dynamic limit (dotted) and reservation (dashed); sluice's own counter faint\n", path)
	return nil
}

func (d *demo) start(name, lib string, partition int, rate float64) error {
	c, err := d.w.StartClient(harness.ClientSpec{Name: name, Lib: lib, Mode: "produce", ClientID: name, Topic: "orders", Partition: partition, Rate: rate})
	if err != nil {
		return err
	}
	d.clients[name] = c
	return nil
}

func (d *demo) stop(name string) {
	if c := d.clients[name]; c != nil {
		c.Stop()
		delete(d.clients, name)
	}
}

// sample is one second of the story, per series: the rate the kernel
// measured (the producing client's broker sockets), sluice's own measured
// rate, the dynamic limit and the effective reservation.
type sample struct {
	t                   time.Duration
	rate, own, lim, res []float64
	overcommit          bool
}

func (d *demo) sample(t time.Duration, from, to harness.MeterReading, s *status.Snapshot) sample {
	n := len(series)
	out := sample{t: t, rate: make([]float64, n), own: make([]float64, n), lim: make([]float64, n), res: make([]float64, n),
		overcommit: s.Directions[0].Overcommit}
	for i, sr := range series {
		if c := d.clients[sr.client]; c != nil {
			out.rate[i] = harness.MeterRates(0, from, to, []int{c.Pid()})[0]
		}
		for _, e := range s.Directions[0].Entities {
			if e.Kind == sr.kind && e.Name == sr.name && e.State == "active" {
				out.own[i], out.lim[i], out.res[i] = float64(e.Rate), float64(e.DynamicLimit), float64(e.EffectiveReservation)
			}
		}
	}
	return out
}
