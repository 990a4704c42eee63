// Package agent_test runs the sluice binary as the daemon it is, in a
// network namespace in front of a Kafka protocol peer (kfake), with a real
// franz-go producer in another namespace.
package agent_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent"
	"github.com/sluice-dev/sluice/maps"
	"github.com/sluice-dev/sluice/test/netns"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test runs the agent in network namespaces with BPF and qdiscs: it needs root (CI runs make test as root)")
	}
}

// buildSluice builds the binary once per test run.
func buildSluice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/sluice").CombinedOutput()
	if err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	return bin
}

type world struct {
	t      *testing.T
	bin    string
	pair   *netns.Pair
	dir    string
	pins   string
	socket string
	kfake  *kfake.Cluster
}

func newWorld(t *testing.T) *world {
	requireRoot(t)
	w := &world{t: t, bin: buildSluice(t), pair: netns.NewPair(t), dir: t.TempDir()}
	bpf := filepath.Join(w.dir, "bpf")
	if err := maps.MountBPFFS(bpf); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(bpf, unix.MNT_DETACH) })
	w.pins = filepath.Join(bpf, "sluice")
	w.socket = filepath.Join(w.dir, "sluice.sock")
	var err error
	w.kfake, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"), kfake.BlackholeProduce(),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return w.pair.Broker.Listen(net.JoinHostPort(w.pair.BrokerIP.String(), "9092"))
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.kfake.Close)
	return w
}

func (w *world) config(keepAttached bool) string {
	cfg := fmt.Sprintf(`
interfaces: [%s]
listeners: [9092]
produce: {capacity: 20MB, safety_ratio: 0.9}
fetch: {capacity: 20MB, safety_ratio: 0.9}
refresh_interval: 1s
rate_window: 2
stale_after: 3s
bootstrap: [%s:9092]
pin_path: %s
socket: %s
metrics_address: 127.0.0.1:9464
keep_attached_on_exit: %v
log_level: debug
entities:
  clients:
    franz-producer: {producer_byte_rate: 2MB}
`, w.pair.BrokerDev, w.pair.BrokerIP, w.pins, w.socket, keepAttached)
	path := filepath.Join(w.dir, fmt.Sprintf("sluice-%v.yaml", keepAttached))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		w.t.Fatal(err)
	}
	return path
}

type agentProc struct {
	cmd *exec.Cmd
	log *os.File
}

// start runs `sluice run` in the broker namespace and waits for its ready file.
func (w *world) start(config string) *agentProc {
	w.t.Helper()
	ready := filepath.Join(w.dir, "ready")
	os.Remove(ready)
	logf, err := os.CreateTemp(w.dir, "agent-*.log")
	if err != nil {
		w.t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", w.pair.Broker.Name, w.bin, "run", "--config", config, "--ready-file", ready)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	p := &agentProc{cmd: cmd, log: logf}
	w.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		}
		if w.t.Failed() {
			data, _ := os.ReadFile(logf.Name())
			w.t.Logf("agent log %s:\n%s", logf.Name(), data)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			return p
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(logf.Name())
			w.t.Fatalf("agent not ready after 30s:\n%s", data)
		}
		time.Sleep(50 * time.Millisecond) // polling the readiness file, bounded by the deadline
	}
}

func (p *agentProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		data, _ := os.ReadFile(p.log.Name())
		t.Fatalf("agent exit: %v\n%s", err, data)
	}
}

// producer produces 16 KiB records from the client namespace as fast as
// the network lets it, and records acknowledged bytes over time.
type producer struct {
	client *kgo.Client
	acked  atomic.Int64
	mu     sync.Mutex
	marks  []mark
	stop   context.CancelFunc
	done   chan struct{}
	errs   atomic.Int64
}

type mark struct {
	at    time.Time
	bytes int64
}

func (w *world) produce(clientID string) *producer {
	w.t.Helper()
	dial := func(ctx context.Context, network, host string) (c net.Conn, err error) {
		err = w.pair.Client.Do(func() (err error) { c, err = (&net.Dialer{}).DialContext(ctx, network, host); return err })
		return c, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(net.JoinHostPort(w.pair.BrokerIP.String(), "9092")), kgo.ClientID(clientID),
		kgo.Dialer(dial), kgo.DefaultProduceTopic("orders"), kgo.MaxBufferedRecords(64), kgo.ProducerLinger(0),
		// Uncompressed, random values: acknowledged bytes are wire bytes.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProduceRequestTimeout(30*time.Second), kgo.RecordDeliveryTimeout(60*time.Second))
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &producer{client: cl, stop: cancel, done: make(chan struct{})}
	value := make([]byte, 16<<10)
	rand.Read(value)
	go func() {
		defer close(p.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-tick.C:
					p.mu.Lock()
					p.marks = append(p.marks, mark{now, p.acked.Load()})
					p.mu.Unlock()
				}
			}
		}()
		for ctx.Err() == nil {
			cl.Produce(ctx, &kgo.Record{Value: value}, func(r *kgo.Record, err error) {
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						p.errs.Add(1)
					}
					return
				}
				p.acked.Add(int64(len(r.Value)))
			})
		}
	}()
	w.t.Cleanup(p.close)
	return p
}

func (p *producer) close() {
	p.stop()
	<-p.done
	p.client.Close()
}

// rate is the acknowledged bytes per second between two instants.
func (p *producer) rate(from, to time.Time) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var a, b *mark
	for i := range p.marks {
		m := &p.marks[i]
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

// waitFor polls the agent's status until cond holds, bounded by a deadline.
func (w *world) waitFor(what string, timeout time.Duration, cond func(*agent.Snapshot) bool) *agent.Snapshot {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, err := agent.QueryStatus(w.socket)
		if err == nil && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: not within %v (last status error %v)", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the agent's state, bounded by the deadline
	}
}

func producerView(s *agent.Snapshot) (agent.EntityView, bool) {
	for _, e := range s.Directions[0].Entities {
		if e.Kind == "client" && e.Name == "franz-producer" {
			return e, true
		}
	}
	return agent.EntityView{}, false
}

func statusScreen(t *testing.T, w *world) string {
	out, err := exec.Command(w.bin, "status", "--socket", w.socket).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice status: %v\n%s", err, out)
	}
	return string(out)
}

// TestAgentIntegrationLearnCountLimitFailOpen: the producer's entity is
// learned from its requests, its bytes counted, its limit written, and its
// rate follows the limit; after kill -9 the data path keeps the last rates
// until stale_after, then holds nothing back.
func TestAgentIntegrationLearnCountLimitFailOpen(t *testing.T) {
	w := newWorld(t)
	proc := w.start(w.config(false))
	prod := w.produce("franz-producer")

	s := w.waitFor("the producer's entity learned, counted and limited", 20*time.Second, func(s *agent.Snapshot) bool {
		e, ok := producerView(s)
		return ok && e.Bytes > 0 && e.State == "active" && float64(e.DynamicLimit) == 2e6
	})
	start := time.Now()
	time.Sleep(5 * time.Second) // a measurement window of real traffic, not readiness
	limited := prod.rate(start.Add(time.Second), time.Now())
	t.Logf("status while limited:\n%s", statusScreen(t, w))
	if limited < 1.6e6 || limited > 2.2e6 {
		t.Errorf("producer rate %.0f B/s under a 2 MB/s limit, want 1.6-2.2 MB/s", limited)
	}
	e, _ := producerView(s)
	if e.ID == maps.EntityUnknown {
		t.Errorf("producer charged to the unknown entity: %+v", e)
	}

	// kill -9: the pinned links keep the programs and the trees keep the rates...
	killed := time.Now()
	proc.cmd.Process.Signal(syscall.SIGKILL)
	proc.cmd.Wait()
	time.Sleep(5 * time.Second)
	stillLimited := prod.rate(killed.Add(500*time.Millisecond), killed.Add(2500*time.Millisecond))
	open := prod.rate(killed.Add(3500*time.Millisecond), time.Now())
	t.Logf("after kill -9: %.2f MB/s in the first 2.5 s, %.2f MB/s after stale_after (3 s)", stillLimited/1e6, open/1e6)
	if stillLimited > 2.3e6 {
		t.Errorf("rate %.0f B/s right after kill -9: the last rate should hold until stale_after", stillLimited)
	}
	if open < 3*limited {
		t.Errorf("rate %.0f B/s after stale_after: the data path should hold nothing back (limited rate was %.0f)", open, limited)
	}
	if prod.errs.Load() != 0 {
		t.Errorf("%d produce errors: clients must never see errors", prod.errs.Load())
	}
	// Clean up what the killed agent left, as an operator would.
	if out, err := exec.Command("ip", "netns", "exec", w.pair.Broker.Name, w.bin, "unload", "--config", w.config(false)).CombinedOutput(); err != nil {
		t.Fatalf("sluice unload: %v\n%s", err, out)
	}
	assertRestored(t, w)
}

// TestAgentIntegrationRestartKeepsAttribution: with keep_attached_on_exit a
// restarted agent re-adopts the pinned state: same entity id, counters
// continue, no relearning needed; the final stop restores the device.
func TestAgentIntegrationRestartKeepsAttribution(t *testing.T) {
	w := newWorld(t)
	first := w.start(w.config(true))
	prod := w.produce("franz-producer")
	s := w.waitFor("the producer's entity learned", 20*time.Second, func(s *agent.Snapshot) bool {
		e, ok := producerView(s)
		return ok && e.Bytes > 0
	})
	before, _ := producerView(s)
	first.stop(t)
	if _, err := os.Stat(w.pins); err != nil {
		t.Fatalf("pins gone after a keep_attached exit: %v", err)
	}

	second := w.start(w.config(false))
	s = w.waitFor("the producer's entity back", 10*time.Second, func(s *agent.Snapshot) bool {
		_, ok := producerView(s)
		return ok
	})
	after, _ := producerView(s)
	if after.ID != before.ID {
		t.Errorf("entity id %d before the restart, %d after: attribution was reset", before.ID, after.ID)
	}
	if after.Bytes < before.Bytes {
		t.Errorf("counters went back: %d before, %d after", before.Bytes, after.Bytes)
	}
	t.Logf("restart kept entity %d (%s): %d bytes before, %d after", after.ID, after.Name, before.Bytes, after.Bytes)
	prod.close()
	second.stop(t)
	assertRestored(t, w)
}

// assertRestored: no sluice qdisc, IFB or pins left.
func assertRestored(t *testing.T, w *world) {
	t.Helper()
	out, _ := exec.Command("ip", "netns", "exec", w.pair.Broker.Name, "tc", "qdisc", "show", "dev", w.pair.BrokerDev).CombinedOutput()
	if strings.Contains(string(out), "htb") {
		t.Errorf("htb left on %s:\n%s", w.pair.BrokerDev, out)
	}
	links, _ := exec.Command("ip", "netns", "exec", w.pair.Broker.Name, "ip", "link").CombinedOutput()
	if strings.Contains(string(links), "slifb") {
		t.Errorf("IFB left:\n%s", links)
	}
	if _, err := os.Stat(w.pins); !os.IsNotExist(err) {
		t.Errorf("pins left at %s", w.pins)
	}
}
