// Package harness runs sluice for real in front of a Kafka protocol peer:
// a broker namespace with kfake and the agent, a client namespace with
// Kafka clients (test/loadgen: franz-go, sarama, kafka-go), joined by a
// veth pair on 198.18.0.0/24. The end-to-end tests, the agent integration
// tests and the demo use it. Everything it creates is removed by Close,
// also after a failure.
package harness

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf/rlimit"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

// World is one topology.
type World struct {
	Pair    *netns.Pair
	Dir     string // scratch directory (configs, logs, socket, bpffs)
	Pins    string
	Socket  string
	Sluice  string // built sluice binary
	Loadgen string // built loadgen binary
	Kafka   *kfake.Cluster
	// Broker is the real Apache Kafka broker of a world made with
	// Options.RealKafka (Kafka is then nil).
	Broker *Broker
	CAFile string // with Options.TLS: the certificate clients trust
	bpffs  string
	mu     sync.Mutex
	procs  []*exec.Cmd // clients
	agents []*Agent
	// brokerMeter reads the broker's sockets (BrokerSockets), opened on
	// first use.
	brokerMeter *ListenerMeter
}

// Options shape the world.
type Options struct {
	// Partitions per topic; topics are seeded at start.
	Topics     []string
	Partitions int32
	// Log keeps what producers send, so that a scenario can check every
	// record was consumed exactly once; otherwise produce is discarded and
	// fetches answer with synthetic batches, which keeps memory flat.
	Log bool
	// SASL, when set, makes kfake's listener SASL_PLAINTEXT: every
	// connection logs in as one of these users (all superusers).
	SASL []SASLUser
	// TLS makes kfake's listener SSL, with a self-signed certificate for
	// the broker's address in World.CAFile.
	TLS bool
	// Queues gives the veth pair this many TX and RX queues (default 1).
	Queues int
	// ProduceDelay, when set, holds each Produce request this long before
	// kfake handles it (kfake yields meanwhile, as a broker waiting on its
	// replicas would): a broker whose latency a test can tell from noise.
	// Called from kfake's goroutines.
	ProduceDelay func() time.Duration
	// DiskBytesPerSecond, when set, gives the broker a disk: every Produce
	// request's record bytes are written by one writer at this rate, in
	// the order the requests came, before the request is handled (and
	// before ProduceDelay, the wait for replicas). One tenant's backlog
	// then delays every other's produce, inside the broker, where the NIC
	// sees it: the latency testbed's bottleneck.
	DiskBytesPerSecond float64
	// FetchReadsDisk, with a disk, makes every Fetch read its response's
	// records from it first, in the same queue as the writes: a consumer
	// catching up on history whose reads miss the page cache, and whose
	// reads delay every producer's writes (cross-direction contention).
	FetchReadsDisk bool
	// FetchBatchBytes is the size of the synthetic record batch a fetch
	// serves copies of (default 128 KiB, eight 16 KiB records); a fetch
	// carries as many as its max bytes allow, at least one.
	FetchBatchBytes int
	// RealKafka, when set, is the class path directory of Apache Kafka
	// (KafkaLibs): the broker namespace runs a real KRaft broker on
	// 198.18.0.1:9092 instead of kfake, with Topics created at start (one
	// replica each). SASL, TLS, Log and the delays are kfake's and ignored.
	RealKafka string
	// BrokerProps are more server.properties lines for the real broker.
	BrokerProps []string
	// BrokerProtocol is the real broker's client listener protocol
	// (BrokerSpec.Protocol: "" PLAINTEXT, SASL_PLAINTEXT, SSL).
	BrokerProtocol string
}

// SASLUser is a login kfake accepts.
type SASLUser struct{ Mechanism, User, Password string }

// Build compiles sluice and loadgen from the repository root into dir.
func Build(root, dir string) (sluice, loadgen string, err error) {
	return BuildTagged(root, dir, "")
}

// BuildTagged is Build with build tags for sluice (faultinject: the
// fault-injection test's build, never shipped).
func BuildTagged(root, dir, tags string) (sluice, loadgen string, err error) {
	sluice, loadgen = filepath.Join(dir, "sluice"), filepath.Join(dir, "loadgen")
	for bin, pkg := range map[string]string{sluice: "./cmd/sluice", loadgen: "./test/loadgen"} {
		args := []string{"build", "-o", bin}
		if tags != "" && bin == sluice {
			args = append(args, "-tags", tags)
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("build %s: %v\n%s", pkg, err, out)
		}
	}
	return sluice, loadgen, nil
}

// BuildPrevious builds the previous release (test/release: the commit CI
// last landed, kept as source) into dir, and returns its binary and the
// version it is stamped with: the restart scenario upgrades from it.
func BuildPrevious(root, dir string) (sluice, version string, err error) {
	cmd := exec.Command(filepath.Join(root, "test", "release", "build.sh"), dir, "build")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		log := stderr.String()
		if len(log) > 4000 {
			log = log[len(log)-4000:]
		}
		return "", "", fmt.Errorf("build the previous release: %v\n%s", err, log)
	}
	return filepath.Join(dir, "src", "bin", "sluice"), strings.TrimSpace(string(out)), nil
}

// New builds the topology: namespaces, veth, a private bpffs for pins, and
// kfake listening on 198.18.0.1:9092 in the broker namespace (produce is
// discarded and fetches answer with synthetic batches, so long runs keep
// memory flat).
func New(dir, sluice, loadgen string, o Options) (*World, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the harness builds namespaces, BPF programs and qdiscs: it needs root")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, err
	}
	pair, err := netns.CreatePairQueues(o.Queues)
	if err != nil {
		return nil, err
	}
	w := &World{Pair: pair, Dir: dir, Sluice: sluice, Loadgen: loadgen, Socket: filepath.Join(dir, "sluice.sock")}
	w.bpffs = filepath.Join(dir, "bpf")
	if err := maps.MountBPFFS(w.bpffs); err != nil {
		w.Close()
		return nil, err
	}
	w.Pins = filepath.Join(w.bpffs, "sluice")
	if o.Partitions == 0 {
		o.Partitions = 1
	}
	if o.RealKafka != "" {
		w.Broker, err = StartBroker(BrokerSpec{Libs: o.RealKafka, NS: pair.Broker, IP: pair.BrokerIP.String(), NodeID: 1,
			Dir: filepath.Join(dir, "kafka"), Props: o.BrokerProps, Protocol: o.BrokerProtocol})
		if err == nil && len(o.Topics) > 0 {
			err = w.Broker.CreateTopics(pair.Client, o.Partitions, 1, o.Topics...)
		}
		if err != nil {
			w.Close()
			return nil, err
		}
		return w, nil
	}
	kopts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(o.Partitions, o.Topics...),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return pair.Broker.Listen(net.JoinHostPort(pair.BrokerIP.String(), "9092"))
		})}
	if o.TLS {
		cfg, caFile, err := brokerTLS(w.Dir, pair.BrokerIP)
		if err != nil {
			w.Close()
			return nil, err
		}
		w.CAFile = caFile
		kopts = append(kopts, kfake.TLS(cfg))
	}
	if len(o.SASL) > 0 {
		kopts = append(kopts, kfake.EnableSASL())
		for _, u := range o.SASL {
			kopts = append(kopts, kfake.Superuser(u.Mechanism, u.User, u.Password))
		}
	}
	if o.Log {
		// kfake keeps a segment in memory and doubles its buffer as it
		// grows, copying the whole segment: at its default 100 MiB
		// segments the broker stalls for hundreds of milliseconds every
		// few seconds under a 36 MB/s producer, and a stop-and-wait
		// (idempotent) producer loses those stalls for good: 25–30 MB/s
		// behind a 36 MB/s class, 35.5 with 4 MiB segments (measured with
		// the same producer, sluice and host). A real broker appends to a
		// file and has no such stall.
		kopts = append(kopts, kfake.BrokerConfigs(map[string]string{"log.segment.bytes": strconv.Itoa(segmentBytes)}))
	} else {
		kopts = append(kopts, kfake.BlackholeProduce(), kfake.SyntheticFetch(kfake.SyntheticBatch{RecordBytes: o.fetchBatchBytes() / 8, Records: 8, RandomFrac: 1}))
	}
	w.Kafka, err = kfake.NewCluster(kopts...)
	if err != nil {
		w.Close()
		return nil, err
	}
	if o.ProduceDelay != nil || o.DiskBytesPerSecond > 0 {
		c, disk := w.Kafka, &disk{bytesPerSecond: o.DiskBytesPerSecond}
		c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			d := disk.write(time.Now(), req.(*kmsg.ProduceRequest))
			if o.ProduceDelay != nil {
				d += o.ProduceDelay()
			}
			c.SleepControl(func() { time.Sleep(d) })
			return nil, nil, false // handled by kfake as usual, after the delay
		})
		if o.FetchReadsDisk {
			batch := o.fetchBatchBytes()
			c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				d := disk.queue(time.Now(), fetchBytes(req.(*kmsg.FetchRequest), batch))
				c.SleepControl(func() { time.Sleep(d) })
				return nil, nil, false
			})
		}
	}
	if len(o.SASL) > 0 && !o.TLS { // (asking a TLS listener would need a handshake; no world has both)
		if err := advertiseSaslHandshakeV0(w.Kafka, pair.Broker.Dial, w.Bootstrap()); err != nil {
			w.Close()
			return nil, err
		}
	}
	return w, nil
}

// disk is a broker's log disk: one writer at a fixed rate, first come
// first served.
type disk struct {
	bytesPerSecond float64
	mu             sync.Mutex
	free           time.Time // when the writer is done with what it has
}

// write queues a Produce request's record bytes at now and answers how
// long until they are written (0 with no disk).
func (d *disk) write(now time.Time, req *kmsg.ProduceRequest) time.Duration {
	if d.bytesPerSecond <= 0 {
		return 0
	}
	n := 0
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			n += len(p.Records)
		}
	}
	return d.queue(now, n)
}

// queue puts n bytes of writes or reads (one queue, first come first
// served) on the disk at now and answers how long until they are done (0
// with no disk).
func (d *disk) queue(now time.Time, n int) time.Duration {
	if d.bytesPerSecond <= 0 || n <= 0 {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.free = later(d.free, now).Add(time.Duration(float64(n) / d.bytesPerSecond * float64(time.Second)))
	return d.free.Sub(now)
}

// fetchBytes is what a synthetic fetch answers with: per partition as
// many batches as its max bytes allow, at least one, within the
// request's max bytes (the first batch whatever it says, as Kafka does).
func fetchBytes(req *kmsg.FetchRequest, batch int) int {
	total := 0
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			n := max(1, int(p.PartitionMaxBytes)/batch) * batch
			if req.MaxBytes > 0 && total > 0 && total+n > int(req.MaxBytes) {
				n = max(0, (int(req.MaxBytes)-total)/batch) * batch
			}
			total += n
		}
	}
	return total
}

func (o Options) fetchBatchBytes() int {
	if o.FetchBatchBytes > 0 {
		return o.FetchBatchBytes
	}
	return 128 << 10
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// segmentBytes is the log segment size of a world that keeps records.
const segmentBytes = 4 << 20

// Bootstrap is the broker address clients use.
func (w *World) Bootstrap() string { return net.JoinHostPort(w.Pair.BrokerIP.String(), "9092") }

// Close stops every process and removes everything the world created.
func (w *World) Close() error {
	w.mu.Lock()
	procs, agents := w.procs, w.agents
	w.procs, w.agents = nil, nil
	w.mu.Unlock()
	for _, a := range agents {
		a.Stop() // its log says why if it failed
	}
	stopProcesses(procs, 10*time.Second)
	if w.Kafka != nil {
		w.Kafka.Close()
	}
	if w.Broker != nil {
		w.Broker.Stop()
	}
	var errs []error
	if w.Pins != "" {
		// An agent that was killed leaves pins (and the links and trees they
		// keep); unload them as an operator would.
		if _, err := os.Stat(w.Pins); err == nil && w.Sluice != "" {
			cfg := w.WriteConfig("cleanup", Config{})
			exec.Command("ip", "netns", "exec", w.Pair.Broker.Name, w.Sluice, "unload", "--config", cfg).Run()
		}
	}
	if w.bpffs != "" {
		unix.Unmount(w.bpffs, unix.MNT_DETACH)
	}
	w.mu.Lock()
	if w.brokerMeter != nil {
		w.brokerMeter.Close()
		w.brokerMeter = nil
	}
	w.mu.Unlock()
	errs = append(errs, w.Pair.Delete())
	return errors.Join(errs...)
}

// stopProcesses ends client processes still running: SIGTERM (a producer
// flushes), then SIGKILL after grace.
func stopProcesses(procs []*exec.Cmd, grace time.Duration) {
	for _, p := range procs {
		if p.ProcessState == nil {
			p.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(grace):
				p.Process.Kill()
				<-done
			}
		}
	}
}

func (w *World) track(cmd *exec.Cmd) {
	w.mu.Lock()
	w.procs = append(w.procs, cmd)
	w.mu.Unlock()
}

func (w *World) trackAgent(a *Agent) {
	w.mu.Lock()
	w.agents = append(w.agents, a)
	w.mu.Unlock()
}

// Config is what a scenario sets; the rest is the world's.
type Config struct {
	ProduceCapacity, FetchCapacity string // e.g. "40MB"; "" = -1 (ungoverned)
	Mode                           string // enforce (default) or shadow
	KeepAttached                   bool
	StaleAfter                     string
	MemoryCycles                   int // K; 0 = the default
	// MinLimit is both directions' floor: "" gives the worlds' 256KiB (their
	// capacities are a few dozen MB/s, so the shipped floors would hide the
	// small weighted shares the scenarios check); "shipped" keeps
	// deploy/sluice.yaml's defaults.
	MinLimit string
	Extra    string // more YAML (entities, ...)
	// Listeners is the listeners value ("" gives [9092], PLAINTEXT).
	Listeners string
	// Shipped leaves every control-loop key (safety ratio, activity
	// threshold, memory, floors, refresh interval, rate window, stale_after,
	// metadata refresh) at deploy/sluice.yaml's defaults: the worlds'
	// shortened loop settings are not written.
	Shipped bool
}

// metricsAddr is where the worlds' agents serve /metrics, inside the
// broker namespace.
const metricsAddr = "127.0.0.1:7359"

// WriteConfig writes an agent configuration for this world.
func (w *World) WriteConfig(name string, c Config) string {
	capacity := func(s string) string {
		if s == "" {
			return "-1"
		}
		return s
	}
	if c.Mode == "" {
		c.Mode = "enforce"
	}
	if c.StaleAfter == "" {
		c.StaleAfter = "3s"
	}
	if c.ProduceCapacity == "" && c.FetchCapacity == "" {
		c.ProduceCapacity = "1GB"
	}
	if c.MemoryCycles == 0 {
		c.MemoryCycles = 10
	}
	if c.Listeners == "" {
		c.Listeners = "[9092]"
	}
	floor := fmt.Sprintf(", min_limit: %d", WorldMinLimit)
	switch c.MinLimit {
	case "":
	case "shipped":
		floor = ""
	default:
		floor = ", min_limit: " + c.MinLimit
	}
	yaml := fmt.Sprintf(`interfaces: [%s]
listeners: %s
mode: %s
produce: {capacity: %s, safety_ratio: 0.9, activity_threshold: 64KiB, memory_cycles: %d%s}
fetch: {capacity: %s, safety_ratio: 0.9, activity_threshold: 64KiB, memory_cycles: %d%s}
refresh_interval: 1s
rate_window: 2
stale_after: %s
bootstrap: [%s]
metadata_refresh: 2s
pin_path: %s
socket: %s
metrics_address: %s
keep_attached_on_exit: %v
log_level: debug
%s`, w.Pair.BrokerDev, c.Listeners, c.Mode, capacity(c.ProduceCapacity), c.MemoryCycles, floor, capacity(c.FetchCapacity), c.MemoryCycles, floor, c.StaleAfter, w.Bootstrap(),
		w.Pins, w.Socket, metricsAddr, c.KeepAttached, c.Extra)
	if c.Shipped {
		yaml = fmt.Sprintf(`interfaces: [%s]
listeners: %s
mode: %s
produce: {capacity: %s}
fetch: {capacity: %s}
bootstrap: [%s]
pin_path: %s
socket: %s
metrics_address: %s
keep_attached_on_exit: %v
%s`, w.Pair.BrokerDev, c.Listeners, c.Mode, capacity(c.ProduceCapacity), capacity(c.FetchCapacity), w.Bootstrap(), w.Pins, w.Socket, metricsAddr, c.KeepAttached, c.Extra)
	}
	path := filepath.Join(w.Dir, name+".yaml")
	os.WriteFile(path, []byte(yaml), 0o600)
	return path
}

// WorldMinLimit is the worlds' floor under every limit (bytes/s) unless a
// scenario asks for another: their capacities are a few dozen MB/s, so the
// shipped floors would hide the small weighted shares the scenarios check.
const WorldMinLimit = 256 << 10

// Agent is a running `sluice run`. One goroutine waits for it; Stop and
// Kill wait on that, never on the process again.
type Agent struct {
	Cmd       *exec.Cmd
	Log       string
	ReadyFile string
	done      chan struct{}
	err       error
}

// StartAgent runs the agent in the broker namespace and waits until it is
// ready (its ready file), at most 30 s.
func (w *World) StartAgent(config string) (*Agent, error) {
	a, err := w.LaunchAgent(config)
	if err != nil {
		return nil, err
	}
	return a, a.WaitReady()
}

// LaunchAgent runs the agent in the broker namespace and returns at once
// (WaitReady waits for it).
func (w *World) LaunchAgent(config string) (*Agent, error) {
	ready := filepath.Join(w.Dir, "ready")
	os.Remove(ready)
	logf, err := os.CreateTemp(w.Dir, "agent-*.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", "netns", "exec", w.Pair.Broker.Name, w.Sluice, "run", "--config", config, "--ready-file", ready)
	// The agent's host record goes to the test's directory, not the host's
	// /var/lib/sluice.
	cmd.Env = append(os.Environ(), "SLUICE_STATE_DIR="+filepath.Join(w.Dir, "state"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &Agent{Cmd: cmd, Log: logf.Name(), ReadyFile: ready, done: make(chan struct{})}
	go func() { a.err = cmd.Wait(); close(a.done) }()
	w.trackAgent(a)
	return a, nil
}

// Exited is closed when the agent's process has exited.
func (a *Agent) Exited() <-chan struct{} { return a.done }

// WaitReady waits until the agent has written its ready file, at most 30 s.
func (a *Agent) WaitReady() error {
	ready := a.ReadyFile
	deadline := time.After(30 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			return nil
		}
		select {
		case <-a.done:
			data, _ := os.ReadFile(a.Log)
			return fmt.Errorf("agent exited before it was ready (%v):\n%s", a.err, data)
		case <-deadline:
			data, _ := os.ReadFile(a.Log)
			return fmt.Errorf("agent not ready after 30 s:\n%s", data)
		case <-time.After(50 * time.Millisecond): // polling the ready file, bounded by the deadline
		}
	}
}

// Stop sends SIGTERM and waits; the agent detaches (or keeps its pins).
func (a *Agent) Stop() error {
	select {
	case <-a.done:
	default:
		a.Cmd.Process.Signal(syscall.SIGTERM)
		<-a.done
	}
	if a.err != nil {
		data, _ := os.ReadFile(a.Log)
		return fmt.Errorf("agent exit: %v\n%s", a.err, data)
	}
	return nil
}

// Kill sends SIGKILL and waits.
func (a *Agent) Kill() {
	a.Cmd.Process.Kill()
	<-a.done
}

// Status asks the agent for its last snapshot.
func (w *World) Status() (*status.Snapshot, error) { return status.Query(w.Socket) }

// WaitFor polls the agent's status until cond holds.
func (w *World) WaitFor(timeout time.Duration, cond func(*status.Snapshot) bool) (*status.Snapshot, error) {
	deadline := time.Now().Add(timeout)
	for {
		s, err := w.Status()
		if err == nil && cond(s) {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("condition not met within %v (last error %v)", timeout, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the agent's state, bounded by the deadline
	}
}

// Client is a running loadgen with its byte meter.
type Client struct {
	Name     string
	ClientID string
	cmd      *exec.Cmd
	mu       sync.Mutex
	// marks are (time, bytes moved so far) every 100 ms.
	marks   []mark
	errors  int64
	largest int64 // a consumer's largest Fetch response, bytes
	// What a checking consumer (ClientSpec.Check) found in the records
	// it read: how many, offset discontinuities, values failing their CRC.
	integrity Integrity
	stopping  bool // Stop was called: an exit after it is not early
	early     bool // the process ended before anyone stopped it
	done      chan struct{}
	// final is what a producer reports when it stops: the records the
	// broker acknowledged and the sum of their CRC-32s.
	final    *Tally
	stopOnce sync.Once
	outPath  string // StartCommandOut: where its standard output goes
}

// Tally counts records and sums their values' CRC-32s.
type Tally struct {
	Count    uint64 `json:"count"`
	Checksum uint64 `json:"checksum"`
}

type mark struct {
	at    time.Time
	bytes int64
}

// ClientSpec describes one loadgen client.
type ClientSpec struct {
	Name      string // for reports
	Lib       string // franz, sarama, kafkago
	Mode      string // produce, consume
	ClientID  string
	Topic     string
	Partition int
	Rate      float64  // bytes/s wanted; 0 greedy
	Args      []string // more loadgen flags (-replica-id, -local-port for -lib raw)
	// Check makes a consumer verify every record it reads (offsets follow
	// one another from 0, each value matches its own CRC-32): for worlds
	// with Options.Log, whose topics producers wrote.
	Check bool
}

// Integrity is what a checking consumer found in the records it read.
type Integrity struct {
	Records int64 `json:"records"`
	Gaps    int64 `json:"offset_gaps"`     // offsets that did not follow the one before
	Corrupt int64 `json:"corrupt_records"` // values whose CRC-32 did not match
}

// StartClient runs a loadgen in the client namespace.
func (w *World) StartClient(s ClientSpec) (*Client, error) {
	args := []string{"netns", "exec", w.Pair.Client.Name, w.Loadgen, "-lib", s.Lib, "-mode", s.Mode, "-client-id", s.ClientID,
		"-topic", s.Topic, "-partition", fmt.Sprint(s.Partition), "-bootstrap", w.Bootstrap(), "-rate", fmt.Sprint(s.Rate)}
	if s.Check {
		args = append(args, "-check")
	}
	args = append(args, s.Args...)
	cmd := exec.Command("ip", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, _ := os.Create(filepath.Join(w.Dir, "client-"+s.Name+".log"))
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w.track(cmd)
	c := &Client{Name: s.Name, ClientID: s.ClientID, cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var line struct {
				Ms, Bytes, Errors, Largest int64
				Records, Gaps, Corrupt     int64
				Final                      bool
				Count, Checksum            uint64
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			if line.Final {
				c.mu.Lock()
				c.final = &Tally{Count: line.Count, Checksum: line.Checksum}
				c.mu.Unlock()
				continue
			}
			c.mu.Lock()
			c.marks = append(c.marks, mark{time.UnixMilli(line.Ms), line.Bytes})
			c.errors, c.largest = line.Errors, line.Largest
			c.integrity = Integrity{Records: line.Records, Gaps: line.Gaps, Corrupt: line.Corrupt}
			c.mu.Unlock()
		}
		c.mu.Lock()
		c.early = !c.stopping
		c.mu.Unlock()
	}()
	return c, nil
}

// Stop ends the client (a producer flushes first) and waits; calling it
// again does nothing.
func (c *Client) Stop() {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		c.stopping = true
		c.mu.Unlock()
		c.cmd.Process.Signal(syscall.SIGTERM)
		// Read to the end first: Wait closes the stdout pipe, and a final
		// tally not yet read would be lost (a flaky overcommit scenario).
		<-c.done
		c.cmd.Wait()
	})
}

// Integrity is what a checking consumer found so far.
func (c *Client) Integrity() Integrity {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.integrity
}

// ExitedEarly says whether the client's process ended before Stop: a
// consumer that gave up is a failure even when it reported no error.
func (c *Client) ExitedEarly() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.early
}

// Prefill writes bytes of records to a partition of a kept log (Options.Log)
// with one greedy franz-go producer and waits for it to flush, so that
// consumers started later read records producers wrote, and stay behind
// the log's end however fast they are allowed to read. It returns what the
// broker acknowledged.
func (w *World) Prefill(topic string, partition int, bytes int64) (Tally, error) {
	c, err := w.StartClient(ClientSpec{Name: "prefill-" + topic, Lib: "franz", Mode: "produce", ClientID: "prefill", Topic: topic,
		Partition: partition, Args: []string{"-max-bytes", fmt.Sprint(bytes), "-duration", "2m"}})
	if err != nil {
		return Tally{}, err
	}
	<-c.done
	c.cmd.Wait()
	f := c.Final()
	switch {
	case f == nil:
		return Tally{}, fmt.Errorf("prefill %s/%d: the producer reported no final tally (see client-prefill-%s.log)", topic, partition, topic)
	case c.Errors() > 0:
		return *f, fmt.Errorf("prefill %s/%d: %d produce errors", topic, partition, c.Errors())
	case c.Moved() < bytes:
		// Moved is what the broker acknowledged, whatever the value size.
		return *f, fmt.Errorf("prefill %s/%d: %d bytes acknowledged, fewer than %d", topic, partition, c.Moved(), bytes)
	}
	return *f, nil
}

// Final is a stopped producer's acknowledged tally (nil before it stops).
func (c *Client) Final() *Tally {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.final
}

// Verify reads the whole topic from the client namespace and tallies the
// records per key (the producing client-id).
func (w *World) Verify(topic string, partitions int) (map[string]Tally, error) {
	out, err := exec.Command("ip", "netns", "exec", w.Pair.Client.Name, w.Loadgen, "-mode", "verify", "-topic", topic,
		"-partitions", fmt.Sprint(partitions), "-bootstrap", w.Bootstrap()).Output()
	if err != nil {
		return nil, fmt.Errorf("verify %s: %v", topic, err)
	}
	var res struct {
		Verify map[string]Tally `json:"verify"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("verify %s: %v: %s", topic, err, out)
	}
	return res.Verify, nil
}

// Moved is the bytes (or, for a churn client, the connections) the
// client reported so far.
func (c *Client) Moved() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.marks) == 0 {
		return 0
	}
	return c.marks[len(c.marks)-1].bytes
}

// Largest is the largest Fetch response a franz consumer read, in bytes.
func (c *Client) Largest() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.largest
}

// Errors is the number of failed requests the client saw: produce errors,
// and for franz consumers fetch errors and Fetch responses that failed to
// arrive (read deadline passed: a request timeout).
func (c *Client) Errors() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errors
}

// Rate is the client's bytes per second between two instants.
func (c *Client) Rate(from, to time.Time) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var a, b *mark
	for i := range c.marks {
		m := &c.marks[i]
		if a == nil && !m.at.Before(from) {
			a = m
		}
		if !m.at.After(to) {
			b = m
		}
	}
	if a == nil || b == nil || !b.at.After(a.at) {
		return 0
	}
	return float64(b.bytes-a.bytes) / b.at.Sub(a.at).Seconds()
}

// Ref names an entity: its kind ("client", "topic-partition") and name.
type Ref struct{ Kind, Name string }

// NICRatesOf is sluice's own figure of each entity's rate in a direction
// over the given duration (a diagnostic beside the socket meter, never the
// judge). It reads the bytes the shaper let through where the agent reports them: the data path counts
// segments before the shaper, so a segment the shaper dropped counts there
// again when TCP retransmits it (a bursty consumer at its limit read 40 %
// above it). Otherwise it reads the data path's counters.
func (w *World) NICRatesOf(dir int, over time.Duration, refs ...Ref) ([]float64, error) {
	type reading struct {
		counted, shaped uint64
		at              time.Time
	}
	read := func() ([]reading, error) {
		s, err := w.Status()
		if err != nil {
			return nil, err
		}
		out := make([]reading, len(refs))
		for i, r := range refs {
			j := slices.IndexFunc(s.Directions[dir].Entities, func(e status.EntityView) bool { return e.Kind == r.Kind && e.Name == r.Name })
			if j < 0 {
				return nil, fmt.Errorf("entity %s:%s not in the last cycle", r.Kind, r.Name)
			}
			e := s.Directions[dir].Entities[j]
			out[i] = reading{e.Bytes, e.ShapedBytes, s.Time}
		}
		return out, nil
	}
	first, err := read()
	if err != nil {
		return nil, err
	}
	time.Sleep(over) // the measurement window itself
	last, err := read()
	if err != nil {
		return nil, err
	}
	rates := make([]float64, len(refs))
	for i := range refs {
		bytes := last[i].counted - first[i].counted
		if first[i].shaped > 0 && last[i].shaped >= first[i].shaped {
			bytes = last[i].shaped - first[i].shaped
		}
		if d := last[i].at.Sub(first[i].at).Seconds(); d > 0 {
			rates[i] = float64(bytes) / d
		}
	}
	return rates, nil
}
