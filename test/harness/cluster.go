package harness

// A Kafka cluster of three broker hosts, each a network namespace with its
// own NIC and sluice agent, for cluster budgets (issue #35): kfake with
// three brokers whose listeners live in the three namespaces, and one
// client namespace joined to each broker by its own veth pair (it also
// routes between the brokers, so that the agents reach the coordination
// topic's leader wherever it is).

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf/rlimit"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/internal/netns"
	"github.com/sluice-dev/sluice/maps"
)

// ClusterWorld is three broker hosts and a client host.
type ClusterWorld struct {
	Dir             string
	Sluice, Loadgen string
	Clients         *netns.NS
	Brokers         []*BrokerHost
	Kafka           *kfake.Cluster
	// DataTopic's produce is answered without being stored, by its
	// partition's leader only; every other topic (the coordination topic)
	// is kfake's own. Stored, memory grows with the run, and kfake copies
	// a growing segment as it doubles its buffer: every client stalled for
	// hundreds of milliseconds now and then, and clients held to a static
	// limit got 86-99 % of it (answered here: 99.9 %).
	DataTopic string
	bpffs     string

	mu      sync.Mutex
	leaders map[int32]int32 // DataTopic partition → leader node
	outage  bool            // the coordination topic takes no writes
	// The topics' ids (produce v13 carries no names).
	dataID, coordID [16]byte
	next            map[int32]int64 // DataTopic partition → next offset
	canned          []byte          // the data topic's record batch (fetch)
	procs           []*exec.Cmd
	agents          []*Agent
}

// BrokerHost is one broker's namespace, NIC and agent.
type BrokerHost struct {
	ID  int32 // kfake's node id
	NS  *netns.NS
	Dev string // the broker's NIC, in NS
	// IP is the broker's address; ClientIP and OtherIP are the client
	// host's addresses on this broker's link (two tenants, told apart by
	// source address).
	IP, ClientIP, OtherIP netip.Addr
	Pins, Socket          string
	Agent                 *Agent
	// Kafka is the host's Apache Kafka broker in a world made by
	// NewRealClusterWorld (nil with kfake).
	Kafka *Broker
}

// Addr is the broker's listener.
func (b *BrokerHost) Addr() string { return net.JoinHostPort(b.IP.String(), "9092") }

// NewClusterWorld builds the topology and a three-broker kfake with
// DataTopic seeded with partitions partitions.
func NewClusterWorld(dir, sluice, loadgen, dataTopic string, partitions int32) (*ClusterWorld, error) {
	w, err := newClusterHosts(dir, sluice, loadgen)
	if err != nil {
		return nil, err
	}
	w.DataTopic, w.canned = dataTopic, cannedBatch()
	listening := 0
	w.Kafka, err = kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(partitions, dataTopic),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			b := w.Brokers[listening] // kfake creates brokers 0, 1, 2 in order
			listening++
			return b.NS.Listen(b.Addr())
		}))
	if err != nil {
		w.Close()
		return nil, err
	}
	for p := range partitions {
		w.leaders[p] = w.Kafka.LeaderFor(dataTopic, p)
	}
	info := w.Kafka.TopicInfo(dataTopic)
	if info == nil {
		w.Close()
		return nil, fmt.Errorf("kfake did not seed %s", dataTopic)
	}
	w.dataID = info.TopicID
	c := w.Kafka
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return w.produce(req.(*kmsg.ProduceRequest), c.CurrentNode())
	})
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return w.fetch(req.(*kmsg.FetchRequest), c.CurrentNode())
	})
	return w, nil
}

// newClusterHosts builds the three broker hosts and the client host that
// joins and routes between them, and a bpffs for the agents' pins.
func newClusterHosts(dir, sluice, loadgen string) (*ClusterWorld, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the cluster world builds namespaces, BPF programs and qdiscs: it needs root")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, err
	}
	w := &ClusterWorld{Dir: dir, Sluice: sluice, Loadgen: loadgen, leaders: map[int32]int32{}, next: map[int32]int64{}}
	sfx := netns.Suffix()
	var err error
	if w.Clients, err = netns.Create(netns.Prefix + "cc-" + sfx); err != nil {
		return nil, err
	}
	for i := range 3 {
		b := &BrokerHost{ID: int32(i), Dev: fmt.Sprintf("slb%d%s", i, sfx),
			IP:       netip.AddrFrom4([4]byte{198, 18, byte(11 + i), 2}),
			ClientIP: netip.AddrFrom4([4]byte{198, 18, byte(11 + i), 1}),
			OtherIP:  netip.AddrFrom4([4]byte{198, 18, byte(11 + i), 3}),
		}
		if b.NS, err = netns.Create(fmt.Sprintf("%scb%d-%s", netns.Prefix, i, sfx)); err != nil {
			w.Close()
			return nil, err
		}
		w.Brokers = append(w.Brokers, b)
		clientDev := fmt.Sprintf("slk%d%s", i, sfx)
		if err := netns.Veth(b.NS, b.Dev, netip.PrefixFrom(b.IP, 24), w.Clients, clientDev, netip.PrefixFrom(b.ClientIP, 24)); err != nil {
			w.Close()
			return nil, err
		}
		if err := run("ip", "netns", "exec", w.Clients.Name, "ip", "addr", "add", b.OtherIP.String()+"/24", "dev", clientDev); err != nil {
			w.Close()
			return nil, err
		}
		if err := run("ip", "netns", "exec", b.NS.Name, "ip", "route", "add", "default", "via", b.ClientIP.String()); err != nil {
			w.Close()
			return nil, err
		}
	}
	// The client host routes between the brokers (its own namespace's
	// setting: the machine's is untouched).
	if err := run("ip", "netns", "exec", w.Clients.Name, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		w.Close()
		return nil, err
	}
	w.bpffs = filepath.Join(dir, "bpf")
	if err := maps.MountBPFFS(w.bpffs); err != nil {
		w.Close()
		return nil, err
	}
	for _, b := range w.Brokers {
		b.Pins = filepath.Join(w.bpffs, fmt.Sprintf("b%d", b.ID))
		b.Socket = filepath.Join(dir, fmt.Sprintf("b%d.sock", b.ID))
	}
	return w, nil
}

func run(argv ...string) error {
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
	return nil
}

// produce answers a Produce of DataTopic without storing it: each
// partition's records get offsets, on its leader only (elsewhere
// NOT_LEADER_FOR_PARTITION, as a broker would answer after a leader move).
// Other topics are left to kfake.
func (w *ClusterWorld) produce(req *kmsg.ProduceRequest, node int32) (kmsg.Response, error, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Produce v13 names topics by id only.
	is := func(t *kmsg.ProduceRequestTopic, name string, id [16]byte) bool {
		return t.Topic == name || (t.Topic == "" && id != [16]byte{} && t.TopicID == id)
	}
	for i := range req.Topics {
		t := &req.Topics[i]
		if !is(t, w.DataTopic, w.dataID) {
			if w.outage && is(t, CoordinationTopic, w.coordID) {
				return w.refuse(req), nil, true
			}
			return nil, nil, false
		}
	}
	return answer(req, func(p *kmsg.ProduceRequestTopicPartition, rp *kmsg.ProduceResponseTopicPartition) {
		if rp.ErrorCode = w.leaderError(p.Partition, node); rp.ErrorCode == 0 {
			rp.BaseOffset = w.next[p.Partition]
			w.next[p.Partition] += int64(batchRecords(p.Records))
			rp.LogAppendTime = -1
		}
	}), nil, true
}

// leaderError is a data topic partition's error code as node answers it:
// none from its leader, NOT_LEADER from another broker (as after a leader
// move). Callers hold w.mu.
func (w *ClusterWorld) leaderError(partition, node int32) int16 {
	leader, ok := w.leaders[partition]
	switch {
	case !ok:
		return kerr.UnknownTopicOrPartition.Code
	case leader != node:
		return kerr.NotLeaderForPartition.Code
	}
	return 0
}

// refuse answers a Produce as a cluster that cannot take it: every
// partition NOT_ENOUGH_REPLICAS (retriable: the producer retries until its
// delivery timeout, as against a real outage).
func (w *ClusterWorld) refuse(req *kmsg.ProduceRequest) kmsg.Response {
	return answer(req, func(_ *kmsg.ProduceRequestTopicPartition, rp *kmsg.ProduceResponseTopicPartition) {
		rp.ErrorCode = kerr.NotEnoughReplicas.Code
	})
}

// answer builds a Produce response with one entry per requested
// partition, each filled by fill.
func answer(req *kmsg.ProduceRequest, fill func(*kmsg.ProduceRequestTopicPartition, *kmsg.ProduceResponseTopicPartition)) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for i := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = t.Partitions[i].Partition
			fill(&t.Partitions[i], &rp)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// CoordinationOutage makes the coordination topic refuse every write (on)
// or take them again (off): for the agents, the whole cluster is out.
func (w *ClusterWorld) CoordinationOutage(on bool) error {
	info := w.Kafka.TopicInfo(CoordinationTopic)
	if info == nil {
		return errors.New("no coordination topic yet")
	}
	w.mu.Lock()
	w.outage, w.coordID = on, info.TopicID
	w.mu.Unlock()
	return nil
}

// batchRecords counts the records of a produce request's record batches
// (v2: the count is the last field of each batch's 61-byte header).
func batchRecords(b []byte) int {
	n := 0
	for len(b) >= 61 {
		size := int(int32(binary.BigEndian.Uint32(b[8:12])))
		n += int(int32(binary.BigEndian.Uint32(b[57:61])))
		if size <= 0 || 12+size > len(b) {
			break
		}
		b = b[12+size:]
	}
	return max(n, 1)
}

// MoveLeader makes node the leader of a DataTopic partition.
func (w *ClusterWorld) MoveLeader(partition, node int32) error {
	if err := w.Kafka.MoveTopicPartition(w.DataTopic, partition, node); err != nil {
		return err
	}
	w.mu.Lock()
	w.leaders[partition] = node
	w.mu.Unlock()
	return nil
}

// CoordinationTopic is the agents' default coordination topic.
const CoordinationTopic = "__sluice_cluster_budgets"

// MoveCoordinationLeader makes node the leader of the coordination topic,
// once an agent has created it (at most 10 s).
func (w *ClusterWorld) MoveCoordinationLeader(node int32) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := w.Kafka.MoveTopicPartition(CoordinationTopic, 0, node)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("move the coordination topic's leader: %w", err)
		}
		time.Sleep(100 * time.Millisecond) // polling for the topic an agent creates, bounded by the deadline
	}
}

// ClusterAgentConfig is what a scenario sets in each broker's agent
// configuration.
type ClusterAgentConfig struct {
	ProduceCapacity string // e.g. "40MB"
	FetchCapacity   string // "" : the fetch direction is not governed
	Cluster         string // the cluster section's body, indented by two spaces, without broker_id and state_file
	Extra           string // more YAML (entities, ...)
	// AllBrokers bootstraps the agent from every broker, not only its own:
	// an agent whose broker is down still reaches the coordination topic.
	AllBrokers bool
}

// WriteAgentConfig writes broker b's agent configuration: its NIC, the
// other brokers exempt (the agents' reports cross the NICs), and the
// cluster section with its own broker id and state file.
func (w *ClusterWorld) WriteAgentConfig(b *BrokerHost, c ClusterAgentConfig) string {
	fetch := "{capacity: -1}"
	if c.FetchCapacity != "" {
		fetch = fmt.Sprintf("{capacity: %s, safety_ratio: 0.9, activity_threshold: 64KiB, memory_cycles: 10, min_limit: %d}", c.FetchCapacity, WorldMinLimit)
	}
	var exempt []string
	for _, o := range w.Brokers {
		exempt = append(exempt, o.IP.String()+"/32")
	}
	bootstrap := b.Addr()
	if c.AllBrokers {
		bootstrap = strings.ReplaceAll(w.Bootstrap(), ",", ", ")
	}
	yaml := fmt.Sprintf(`interfaces: [%s]
listeners: [9092]
exempt_peers: [%s]
produce: {capacity: %s, safety_ratio: 0.9, activity_threshold: 64KiB, memory_cycles: 10, min_limit: %d}
fetch: %s
refresh_interval: 1s
rate_window: 2
stale_after: 3s
bootstrap: [%s]
metadata_refresh: 2s
pin_path: %s
socket: %s
metrics_address: 127.0.0.1:7359
log_level: debug
%s`, b.Dev, strings.Join(exempt, ", "), c.ProduceCapacity, WorldMinLimit, fetch, bootstrap, b.Pins, b.Socket, c.Extra)
	if c.Cluster != "" {
		yaml += fmt.Sprintf("\ncluster:\n  broker_id: %d\n  state_file: %s\n%s\n", b.ID, filepath.Join(w.Dir, fmt.Sprintf("b%d.cluster.state", b.ID)),
			strings.TrimRight(c.Cluster, "\n"))
	}
	path := filepath.Join(w.Dir, fmt.Sprintf("b%d.yaml", b.ID))
	os.WriteFile(path, []byte(yaml), 0o600)
	return path
}

// StartAgent runs broker b's agent in its namespace and waits until ready.
func (w *ClusterWorld) StartAgent(b *BrokerHost, config string) error {
	ready := filepath.Join(w.Dir, fmt.Sprintf("b%d.ready", b.ID))
	os.Remove(ready)
	logf, err := os.CreateTemp(w.Dir, fmt.Sprintf("agent-b%d-*.log", b.ID))
	if err != nil {
		return err
	}
	cmd := exec.Command("ip", "netns", "exec", b.NS.Name, w.Sluice, "run", "--config", config, "--ready-file", ready)
	// Each host's record in its own directory, not the host's /var/lib/sluice.
	cmd.Env = append(os.Environ(), "SLUICE_STATE_DIR="+filepath.Join(w.Dir, fmt.Sprintf("state-b%d", b.ID)))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	a := &Agent{Cmd: cmd, Log: logf.Name(), ReadyFile: ready, done: make(chan struct{})}
	go func() { a.err = cmd.Wait(); close(a.done) }()
	w.mu.Lock()
	w.agents = append(w.agents, a)
	w.mu.Unlock()
	b.Agent = a
	return a.WaitReady()
}

// Status asks broker b's agent for its snapshot.
func (b *BrokerHost) Status() (*status.Snapshot, error) { return status.Query(b.Socket) }

// Cut takes broker b's host off every other host (the coordination topic's
// leader among them, unless it is b) while its clients still reach it:
// its default route goes. Heal puts it back.
func (w *ClusterWorld) Cut(b *BrokerHost) error {
	return run("ip", "netns", "exec", b.NS.Name, "ip", "route", "del", "default")
}

// Heal undoes Cut.
func (w *ClusterWorld) Heal(b *BrokerHost) error {
	return run("ip", "netns", "exec", b.NS.Name, "ip", "route", "add", "default", "via", b.ClientIP.String())
}

// StartProducer runs a franz-go producer in the client host for one
// partition of DataTopic, asking rate bytes/s, from source address from (the
// zero Addr: the address of the link to the partition's leader, which
// follows a leader move).
func (w *ClusterWorld) StartProducer(name, clientID string, partition int, rate float64, from netip.Addr) (*Client, error) {
	return w.startLoadgen("produce", name, clientID, partition, rate, from)
}

// StartConsumer runs a franz-go consumer of one partition of DataTopic
// (from offset 0; the topic has no end), reading at most rate bytes/s, from
// source address from, as StartProducer. It fetches at most 1 MiB a
// response, a Java consumer's max.partition.fetch.bytes.
func (w *ClusterWorld) StartConsumer(name, clientID string, partition int, rate float64, from netip.Addr) (*Client, error) {
	return w.startLoadgen("consume", name, clientID, partition, rate, from, "-fetch-max-bytes", "1048576")
}

func (w *ClusterWorld) startLoadgen(mode, name, clientID string, partition int, rate float64, from netip.Addr, extra ...string) (*Client, error) {
	args := []string{"netns", "exec", w.Clients.Name, w.Loadgen, "-lib", "franz", "-mode", mode, "-client-id", clientID,
		"-topic", w.DataTopic, "-partition", strconv.Itoa(partition), "-bootstrap", w.Brokers[0].Addr(),
		"-rate", fmt.Sprint(rate), "-duration", "5m"}
	if from.IsValid() {
		args = append(args, "-source-addr", from.String())
	}
	args = append(args, extra...)
	cmd := exec.Command("ip", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, _ := os.Create(filepath.Join(w.Dir, "client-"+name+".log"))
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.procs = append(w.procs, cmd)
	w.mu.Unlock()
	c := &Client{Name: name, ClientID: clientID, cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var line struct{ Ms, Bytes, Errors int64 }
			if json.Unmarshal(sc.Bytes(), &line) == nil {
				c.mu.Lock()
				c.marks = append(c.marks, mark{time.UnixMilli(line.Ms), line.Bytes})
				c.errors = line.Errors
				c.mu.Unlock()
			}
		}
		c.mu.Lock()
		c.early = !c.stopping
		c.mu.Unlock()
	}()
	return c, nil
}

// LinkKey is one source address → broker address pair: a tenant's traffic
// to one broker, as the client host's sockets see it.
type LinkKey struct{ From, To netip.Addr }

// ClientSocketBytes reads, from the client host's kernel, every
// established connection to a broker's 9092, keyed by the client's end;
// at is the middle of the reading (in process, through sock_diag: see
// World.BrokerSockets).
func (w *ClusterWorld) ClientSocketBytes() (map[netip.AddrPort]LinkBytes, time.Time, error) {
	return establishedSockets(w.Clients, func(local, peer netip.AddrPort) (netip.AddrPort, bool) { return local, peer.Port() == 9092 })
}

// ListenerSockets reads, from broker host b's kernel, every established
// connection to its listener on 9092, keyed by the peer (a client, or
// another broker's replica fetcher): bytes_received is what the peer sent,
// bytes_acked what it received.
func (b *BrokerHost) ListenerSockets() (map[netip.AddrPort]LinkBytes, error) {
	socks, _, err := establishedSockets(b.NS, func(local, peer netip.AddrPort) (netip.AddrPort, bool) { return peer, local.Port() == 9092 })
	if err != nil {
		return nil, fmt.Errorf("broker host %d: %w", b.ID, err)
	}
	return socks, nil
}

// establishedSockets reads every established TCP connection of ns that
// pick keeps, keyed by what it picks of the two ends (addresses unmapped:
// a JVM's sockets are dual-stack).
func establishedSockets(ns *netns.NS, pick func(local, peer netip.AddrPort) (netip.AddrPort, bool)) (map[netip.AddrPort]LinkBytes, time.Time, error) {
	m, err := NewListenerMeter(ns)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer m.Close()
	all, at, err := m.read()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: %w", ns.Name, err)
	}
	socks := map[netip.AddrPort]LinkBytes{}
	for _, s := range all {
		if s.InetDiagMsg.State != tcpEstablished {
			continue
		}
		id := s.InetDiagMsg.ID
		la, ok1 := netip.AddrFromSlice(id.Source)
		pa, ok2 := netip.AddrFromSlice(id.Destination)
		if !ok1 || !ok2 {
			continue
		}
		local, peer := netip.AddrPortFrom(la.Unmap(), id.SourcePort), netip.AddrPortFrom(pa.Unmap(), id.DestinationPort)
		k, keep := pick(local, peer)
		if !keep {
			continue
		}
		socks[k] = LinkBytes{Link: LinkKey{From: local.Addr(), To: peer.Addr()},
			LinkCounts: LinkCounts{Acked: s.TCPInfo.Bytes_acked, Received: s.TCPInfo.Bytes_received, Retransmitted: s.TCPInfo.Bytes_retrans}}
	}
	return socks, at, nil
}

// tcpEstablished is TCP_ESTABLISHED, the state sock_diag reports.
const tcpEstablished = 1

// LinkBytes is one connection's link and acknowledged bytes.
type LinkBytes struct {
	Link LinkKey
	LinkCounts
}

// LinkCounts are a connection's (or a link's) tcp_info byte counters at
// the client host: Acked is what producers delivered, Received what
// consumers read, Retransmitted what producers sent again (a shaper's
// drops: bytes that cost the link's rate and delivered nothing new).
type LinkCounts struct{ Acked, Received, Retransmitted uint64 }

// LinkMeter follows the client host's connections and sums, per link, the
// bytes acknowledged since it started (a connection that closes keeps what
// it had at the last reading; a new one counts from zero).
type LinkMeter struct {
	w     *ClusterWorld
	last  map[netip.AddrPort]LinkBytes
	total map[LinkKey]LinkCounts
	at    time.Time
}

// NewLinkMeter takes the first reading.
func (w *ClusterWorld) NewLinkMeter() (*LinkMeter, error) {
	m := &LinkMeter{w: w, total: map[LinkKey]LinkCounts{}}
	socks, at, err := w.ClientSocketBytes()
	if err != nil {
		return nil, err
	}
	m.last, m.at = socks, at
	return m, nil
}

// Read takes a reading and returns the totals per link since the start, and
// when the reading was taken.
func (m *LinkMeter) Read() (map[LinkKey]LinkCounts, time.Time, error) {
	socks, at, err := m.w.ClientSocketBytes()
	if err != nil {
		return nil, time.Time{}, err
	}
	for port, now := range socks {
		before, seen := m.last[port]
		t := m.total[now.Link]
		if !seen || now.Link != before.Link || now.Acked < before.Acked || now.Received < before.Received {
			before.LinkCounts = LinkCounts{} // a connection new since the last reading
		}
		t.Acked += now.Acked - before.Acked
		t.Received += now.Received - before.Received
		t.Retransmitted += now.Retransmitted - min(now.Retransmitted, before.Retransmitted)
		m.total[now.Link] = t
	}
	m.last, m.at = socks, at
	out := make(map[LinkKey]LinkCounts, len(m.total))
	for k, v := range m.total {
		out[k] = v
	}
	return out, at, nil
}

// Close stops every process and removes everything the world created.
func (w *ClusterWorld) Close() error {
	w.mu.Lock()
	procs, agents := w.procs, w.agents
	w.procs, w.agents = nil, nil
	w.mu.Unlock()
	for _, a := range agents {
		a.Stop()
	}
	stopProcesses(procs, 5*time.Second)
	if w.Kafka != nil {
		w.Kafka.Close()
	}
	var stopping sync.WaitGroup
	for _, b := range w.Brokers {
		if b.Kafka != nil {
			stopping.Go(b.Kafka.Stop)
		}
	}
	stopping.Wait()
	var errs []error
	for _, b := range w.Brokers {
		// The agents left their pins and trees (keep_attached_on_exit):
		// the namespaces' deletion takes the devices and trees.
		if err := b.NS.Delete(); err != nil {
			errs = append(errs, err)
		}
	}
	if w.Clients != nil {
		if err := w.Clients.Delete(); err != nil {
			errs = append(errs, err)
		}
	}
	if w.bpffs != "" {
		if err := unix.Unmount(w.bpffs, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", w.bpffs, err))
		}
	}
	return errors.Join(errs...)
}

// SetProducerQuota sets client-id clientID's producer_byte_rate in the
// cluster's quota store, as kafka-configs.sh --alter --entity-type clients
// does, from the client host.
func (w *ClusterWorld) SetProducerQuota(clientID string, rate float64) error {
	return AlterClientQuota(w.Clients.Dial, []string{w.Brokers[0].Addr()}, kadm.ClientQuotaEntity{{Type: "client-id", Name: &clientID}}, "producer_byte_rate", rate)
}
