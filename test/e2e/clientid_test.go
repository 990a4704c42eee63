package e2e

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/agent/kafka/kafkatest"
	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/maps"
	"github.com/sluice-dev/sluice/test/harness"
)

// Long client-ids: a client chooses its client-id's length (up to 32767
// bytes), and a data path that samples each request's first bytes must
// still read what decides the request's entity after it. Producers with
// client-ids of 0, 200, 240, 1000 and 32000 bytes write to topic-partitions
// that carry a producer_byte_rate, and as users that carry one, from
// franz-go and librdkafka (kcat) at once, on one SASL_PLAINTEXT listener.
// Each is judged alone, by the broker sockets' tcp_info: within ±3 % of
// its own limit.
//
// Every case has a limit of its own, and an idle topic-partition carries
// the lowest produce limit in the configuration: a producer that fell into
// the unresolved entity (held to that lowest limit, shared) or stayed
// unknown (held to H) cannot land on its own limit by accident.
//
// What the libraries refuse, probed each run and recorded: franz-go's kgo
// validates a client-id of at most 256 bytes, so 1000 and 32000 bytes go
// from this process with franz-go's protocol package (kmsg: ApiVersions, a
// PLAIN login and pipelined Produce requests on one connection, metered by
// its port); librdkafka treats an empty client.id as unset and sends its
// default "rdkafka", so 0 bytes is franz-go's alone.
func TestScenarioLongClientIDs(t *testing.T) {
	const (
		agentPassword = "sluice-Pw-51c9"
		writer        = "writer" // logs the topic-partition cases in; no quota of its own
		idle          = 1.0e6    // orders-9's limit, which no producer uses: the lowest anywhere
		partitions    = 10
	)
	lengths := []struct {
		n   int
		lib string
	}{{0, libFranz}, {200, libFranz}, {240, libFranz}, {1000, libKmsg}, {32000, libKmsg},
		{200, libKcat}, {240, libKcat}, {1000, libKcat}, {32000, libKcat}}
	var cases []*longIDCase
	users := []harness.SASLUser{{Mechanism: "PLAIN", User: "sluice", Password: agentPassword}, {Mechanism: "PLAIN", User: writer, Password: "pw-" + writer}}
	entities := "entities:\n  topic-partitions:\n    orders-9: {producer_byte_rate: " + itoa(idle) + "}\n"
	userEntities := "  users:\n"
	for i, l := range lengths {
		tp := &longIDCase{target: "topic-partition", lib: l.lib, n: l.n, topic: "orders", partition: i, entity: fmt.Sprintf("orders-%d", i),
			limit: 1.4e6 + 0.15e6*float64(i), user: writer}
		u := &longIDCase{target: "user", lib: l.lib, n: l.n, topic: "events", partition: i, entity: fmt.Sprintf("u%d", i),
			limit: 1.45e6 + 0.15e6*float64(i), user: fmt.Sprintf("u%d", i)}
		for _, c := range []*longIDCase{tp, u} {
			short := map[string]string{"topic-partition": "tp", "user": "user"}[c.target]
			c.name = fmt.Sprintf("%s-%s-%d", short, c.lib, c.n)
			c.clientID = longClientID(c.name, c.n)
			cases = append(cases, c)
		}
		entities += "    " + tp.entity + ": {producer_byte_rate: " + itoa(tp.limit) + "}\n"
		userEntities += "    " + u.user + ": {producer_byte_rate: " + itoa(u.limit) + "}\n"
		users = append(users, harness.SASLUser{Mechanism: "PLAIN", User: u.user, Password: "pw-" + u.user})
	}
	probes := probeClientIDLimits(t)

	w := world(t, harness.Options{Topics: []string{"orders", "events"}, Partitions: partitions, SASL: users})
	t.Logf("world: namespaces %s, %s", w.Pair.Broker.Name, w.Pair.Client.Name)
	a := start(t, w, harness.Config{ProduceCapacity: "100MB", Listeners: "[{port: 9092, protocol: SASL_PLAINTEXT}]",
		Extra: "sasl: {mechanism: PLAIN, username: sluice, password: " + agentPassword + "}\n" + entities + userEntities})
	defer a.Stop()

	var pidClients []*harness.Client
	var raws []*kmsgProducer
	for _, c := range cases {
		switch c.lib {
		case libFranz:
			c.client = client(t, w, harness.ClientSpec{Name: c.name, Lib: "franz", Mode: "produce", ClientID: c.clientID, Topic: c.topic, Partition: c.partition,
				Args: []string{"-sasl-mechanism", "PLAIN", "-sasl-user", c.user, "-sasl-password", "pw-" + c.user}})
			pidClients = append(pidClients, c.client)
		case libKcat:
			c.client = kcatProducer(t, w, c.name, c.clientID, c.topic, c.partition, c.user, "pw-"+c.user)
			pidClients = append(pidClients, c.client)
		case libKmsg:
			p, err := startKmsgProducer(w, c.clientID, c.topic, int32(c.partition), c.user, "pw-"+c.user)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			t.Cleanup(p.stop)
			c.raw = p
			raws = append(raws, p)
		}
	}

	// Ready when sluice has seen bytes of every case's entity (readiness
	// only: a case whose entity never shows is measured all the same).
	_, readyErr := w.WaitFor(30*time.Second, func(s *status.Snapshot) bool {
		for _, c := range cases {
			if e := produceEntity(s, c.target, c.entity); e == nil || e.Bytes == 0 {
				return false
			}
		}
		return true
	})
	if readyErr != nil {
		t.Logf("not every case's entity was seen: %v", readyErr)
	}
	// And every connection of every case is bound (none left in unknown,
	// where a SASL connection waits for its login) the same way two looks
	// a second apart: a connection that moves between classes during the
	// window carries its old class's rate into it.
	settled := settleBindings(w, cases, 30*time.Second)
	before, _ := w.Status()
	time.Sleep(3 * time.Second) // settle, as metered does
	var ports []uint16
	for _, p := range raws {
		ports = append(ports, p.port)
	}
	var (
		portRates []float64
		portErr   error
		wg        sync.WaitGroup
	)
	var perSecond map[string][]string
	wg.Add(2)
	go func() {
		defer wg.Done()
		portRates, portErr = meterPorts(w, window, ports)
	}()
	go func() {
		defer wg.Done()
		perSecond = timeline(w, cases, int(window/time.Second))
	}()
	pidRates, err := w.MeterClients(0, window, pidClients...)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if portErr != nil {
		t.Fatal(portErr)
	}
	after, statusErr := w.Status()
	bindings, bindErr := w.Bindings()
	owners, ownersErr := w.ClientPorts()

	pass := true
	measured := map[string]any{}
	expected := map[string]any{}
	var clientErrs int64
	exited := []string{}
	for _, c := range cases {
		var rate float64
		var conns []uint16
		switch {
		case c.client != nil:
			i := indexOf(pidClients, c.client)
			rate = pidRates[i]
			clientErrs += c.client.Errors()
			if c.client.ExitedEarly() {
				exited = append(exited, c.name)
			}
			conns = owners[c.client.Pid()]
		default:
			i := indexOf(raws, c.raw)
			rate = portRates[i]
			clientErrs += c.raw.errs.Load()
			if err := c.raw.failure(); err != nil {
				exited = append(exited, c.name+": "+err.Error())
			}
			conns = []uint16{c.raw.port}
		}
		ok := within(rate, c.limit, 0.03)
		pass = pass && ok
		m := map[string]any{"kernel_bps": rate, "within": ok, "lib": libNames[c.lib], "client_id_bytes": len(c.clientID),
			"target": c.target + ":" + c.entity}
		if after != nil {
			if e := produceEntity(after, c.target, c.entity); e != nil {
				m["sluice"] = entitySummary(e)
			} else {
				m["sluice"] = "entity not in the last cycle"
			}
			m["connections"] = boundTo(w, after, bindings, conns)
		}
		m["per_second"] = perSecond[c.name]
		measured[c.name] = m
		expected[c.name] = map[string]any{"bps": c.limit, "tolerance": 0.03}
	}
	diag := map[string]any{"ready": errString(readyErr), "bindings_settled": errString(settled), "status_error": errString(statusErr), "bindings_error": errString(bindErr),
		"client_ports_error": errString(ownersErr)}
	if after != nil {
		diag["learner"] = after.Learner
		diag["connections"] = after.Connections
		if before != nil {
			diag["learner_unresolved_during_window"] = after.Learner.Unresolved - before.Learner.Unresolved
		}
		for _, kind := range []string{"unresolved", "unknown"} {
			for _, e := range after.Directions[maps.Produce].Entities {
				if e.Kind == kind {
					diag[kind+"_entity"] = entitySummary(&e)
				}
			}
		}
	}
	errsOK := clientErrs == 0 && len(exited) == 0
	measured["client_errors"] = clientErrs
	measured["clients_that_exited"] = exited
	measured["measured_at"] = meteredAt + "; kmsg producers (this process) by their connection's port"
	measured["library_limits"] = probes
	measured["diagnostics"] = diag
	expected["client_errors"] = 0
	expected["clients_that_exited"] = "none"
	expected["unresolved_limit_bps"] = idle
	expected["meaning"] = "each producer alone, from the broker socket's bytes_received over 10 s after a 3 s settle, within ±3 % of its own " +
		"topic-partition or user producer_byte_rate; a case that fell into the unresolved entity would be held to orders-9's " + itoa(idle) + " (shared)"
	record(t, Result{Name: "long-client-ids", Pass: pass && errsOK, Measured: measured, Expected: expected})
}

// window is how long the long client-id producers are measured: 10 s, so
// that a burst as a connection settles weighs less than the tolerance.
const window = 10 * time.Second

// settleBindings waits (at most timeout) until no connection of any case
// is in the unknown entity and the bindings of all of them read the same
// twice a second apart. Readiness only: it returns why it gave up, for the
// record, and the window is measured either way.
func settleBindings(w *harness.World, cases []*longIDCase, timeout time.Duration) error {
	look := func() (string, error) {
		s, err := w.Status()
		if err != nil {
			return "", err
		}
		b, err := w.Bindings()
		if err != nil {
			return "", err
		}
		owners, err := w.ClientPorts()
		if err != nil {
			return "", err
		}
		var all []string
		for _, c := range cases {
			ports := []uint16{}
			if c.client != nil {
				ports = owners[c.client.Pid()]
			} else {
				ports = []uint16{c.raw.port}
			}
			for p, name := range boundTo(w, s, b, ports) {
				if strings.HasPrefix(name, "unknown") || name == "no binding" {
					return "", fmt.Errorf("%s's connection %s is %s", c.name, p, name)
				}
				all = append(all, c.name+"/"+p+"="+name)
			}
		}
		slices.Sort(all)
		return strings.Join(all, " "), nil
	}
	return untilStable(look, timeout)
}

const (
	libFranz = "franz"
	libKmsg  = "kmsg"
	libKcat  = "kcat"
)

var libNames = map[string]string{
	libFranz: "franz-go (kgo, loadgen)",
	libKmsg:  "franz-go kmsg (this process; kgo refuses client-ids over 256 bytes)",
	libKcat:  "librdkafka (kcat)",
}

// longIDCase is one producer: its client-id's length, its library, and
// the entity (topic-partition or user) whose limit holds it.
type longIDCase struct {
	name, lib, clientID string
	n                   int
	target, entity      string
	limit               float64
	topic               string
	partition           int
	user                string
	client              *harness.Client // franz, kcat
	raw                 *kmsgProducer   // kmsg
}

// longClientID is a client-id of exactly n bytes that starts with name.
func longClientID(name string, n int) string {
	if n == 0 {
		return ""
	}
	id := name + "."
	if len(id) > n {
		return id[:n]
	}
	return id + strings.Repeat("x", n-len(id))
}

func indexOf[T comparable](s []T, v T) int {
	for i := range s {
		if s[i] == v {
			return i
		}
	}
	return -1
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func produceEntity(s *status.Snapshot, kind, name string) *status.EntityView {
	for i, e := range s.Directions[maps.Produce].Entities {
		if e.Kind == kind && e.Name == name {
			return &s.Directions[maps.Produce].Entities[i]
		}
	}
	return nil
}

func entitySummary(e *status.EntityView) map[string]any {
	return map[string]any{"kind": e.Kind, "name": e.Name, "rate_bps": e.Rate, "limit_bps": e.Limit, "dynamic_limit_bps": e.DynamicLimit, "throttled": e.Throttled}
}

// boundTo names, for each of a client's connections (by its port), the
// entity the data path's table binds its produce direction to.
func boundTo(w *harness.World, s *status.Snapshot, bindings map[maps.ConnKey]maps.Binding, ports []uint16) map[string]string {
	names := map[uint32]string{}
	for _, e := range s.Directions[maps.Produce].Entities {
		names[e.ID] = e.Kind + ":" + e.Name
	}
	out := map[string]string{}
	for _, p := range ports {
		v := "no binding"
		for k, b := range bindings {
			if k.Peer.Port() == p && k.Peer.Addr() == w.Pair.ClientIP {
				v = fmt.Sprintf("entity %d", b.Produce)
				if n, ok := names[b.Produce]; ok {
					v = n
				}
			}
		}
		out[fmt.Sprint(p)] = v
	}
	return out
}

// probeClientIDLimits asks each library what it makes of the lengths it
// cannot send: franz-go's kgo validates its configuration without a
// broker, and kcat dumps librdkafka's configuration.
func probeClientIDLimits(t *testing.T) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, n := range []int{1000, 32000} {
		cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9"), kgo.ClientID(strings.Repeat("x", n)))
		if err == nil {
			cl.Close()
			out[fmt.Sprintf("franz-go kgo client-id %d bytes", n)] = "accepted"
			continue
		}
		out[fmt.Sprintf("franz-go kgo client-id %d bytes", n)] = "refused: " + err.Error()
	}
	dump := func(id string) string {
		o, err := exec.Command("timeout", "10", "kcat", "-P", "-b", "127.0.0.1:9", "-t", "probe", "-X", "client.id="+id, "-X", "dump").CombinedOutput()
		for _, line := range strings.Split(string(o), "\n") {
			if v, ok := strings.CutPrefix(line, "client.id = "); ok {
				return v
			}
		}
		return fmt.Sprintf("no client.id in kcat -X dump (%v): %.200s", err, o)
	}
	empty := dump("")
	out["librdkafka client.id empty"] = fmt.Sprintf("kcat -X client.id= : librdkafka's configuration holds client.id = %q", empty)
	long := dump(strings.Repeat("x", 32000))
	out["librdkafka client.id 32000 bytes"] = fmt.Sprintf("kcat -X client.id=<32000 bytes>: configuration holds %d bytes", len(long))
	return out
}

// kcatProducer runs kcat (librdkafka) as a greedy producer to one
// partition, logged in with PLAIN. Its records come from a FIFO this test
// feeds with 8 KiB lines until the test ends (kcat -l reads records from
// it, one a line); librdkafka's queue is bounded to 4 MiB so a held
// producer keeps little in memory and drains fast when it stops.
func kcatProducer(t *testing.T, w *harness.World, name, clientID, topic string, partition int, user, password string) *harness.Client {
	t.Helper()
	return startKcat(t, w.StartCommand, w.Dir, name, 0, "-b", w.Bootstrap(), "-t", topic, "-p", fmt.Sprint(partition),
		"-X", "client.id="+clientID, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
		"-X", "sasl.username="+user, "-X", "sasl.password="+password)
}

// startKcat runs kcat -P (librdkafka) with args, its records fed from a FIFO
// in dir at rate bytes/s (0: as fast as it reads), its queue bounded to
// 4 MiB.
func startKcat(t *testing.T, start func(name string, argv ...string) (*harness.Client, error), dir, name string, rate float64, args ...string) *harness.Client {
	t.Helper()
	feed, err := harness.NewLineFeed(filepath.Join(dir, "feed-"+name), rate)
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"kcat", "-P", "-q", "-X", "queue.buffering.max.kbytes=4096", "-X", "linger.ms=5", "-l", feed.Path}, args...)
	c, err := start(name, argv...)
	if err != nil {
		feed.Close()
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	// Registered after c.Stop, so it runs first: kcat reads the end of its
	// input, flushes and exits, and Stop's SIGTERM finds it leaving.
	t.Cleanup(feed.Close)
	return c
}

// kmsgProducer is a greedy producer on one connection from the client
// namespace, written with franz-go's kmsg, for client-ids kgo refuses: it
// logs in with PLAIN, then keeps up to four Produce requests (v7, acks=1,
// 256 KiB of records each) in flight to one partition.
type kmsgProducer struct{ rawProducer }

func startKmsgProducer(w *harness.World, clientID, topic string, partition int32, user, password string) (*kmsgProducer, error) {
	conn, err := w.Pair.Client.Dial(w.Bootstrap())
	if err != nil {
		return nil, err
	}
	p := &kmsgProducer{newRawProducer(conn)}
	format := kmsg.NewRequestFormatter(kmsg.FormatterClientID(clientID))
	corr := int32(0)
	roundTrip := func(req kmsg.Request, resp kmsg.Response) error {
		corr++
		if _, err := conn.Write(format.AppendRequest(nil, req, corr)); err != nil {
			return err
		}
		body, err := readFrame(conn)
		if err != nil {
			return err
		}
		resp.SetVersion(req.GetVersion())
		return resp.ReadFrom(body[4:]) // response header v0: the correlation id
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	av.ClientSoftwareName, av.ClientSoftwareVersion = "sluice-e2e-kmsg", "1"
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.SetVersion(1)
	hs.Mechanism = "PLAIN"
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.SetVersion(1)
	auth.SASLAuthBytes = []byte("\x00" + user + "\x00" + password)
	avResp, hsResp, authResp := kmsg.NewPtrApiVersionsResponse(), kmsg.NewPtrSASLHandshakeResponse(), kmsg.NewPtrSASLAuthenticateResponse()
	err = roundTrip(av, avResp)
	if err == nil {
		err = roundTrip(hs, hsResp)
	}
	if err == nil && hsResp.ErrorCode != 0 {
		err = fmt.Errorf("sasl handshake: error code %d", hsResp.ErrorCode)
	}
	if err == nil {
		err = roundTrip(auth, authResp)
	}
	if err == nil && authResp.ErrorCode != 0 {
		err = fmt.Errorf("sasl authenticate: error code %d", authResp.ErrorCode)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("kmsg producer login: %w", err)
	}
	conn.SetDeadline(time.Time{})

	const records, valueBytes = 16, 16 << 10
	values := make([][]byte, records)
	for i := range values {
		values[i] = make([]byte, valueBytes)
		rand.Read(values[i])
	}
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(7)
	req.Acks, req.TimeoutMillis = 1, 30000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = kafkatest.RecordBatch(values, time.Now().UnixMilli())
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	p.produce(format, corr+1, func(int) kmsg.Request { return req })
	return p, nil
}

func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 4 || n > 64<<20 {
		return nil, fmt.Errorf("response of %d bytes", n)
	}
	body := make([]byte, n)
	_, err := io.ReadFull(r, body)
	return body, err
}

// meterPorts is the rate the broker received from each of this process's
// own connections (by the client's port) over the given duration, from
// the broker sockets' tcp_info bytes_received: the socket meter, for
// connections no client process owns.
func meterPorts(w *harness.World, over time.Duration, ports []uint16) ([]float64, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	// Each reading is dated at the middle of the sock_diag call that took it.
	read := w.BrokerSockets
	first, from, err := read()
	if err != nil {
		return nil, err
	}
	time.Sleep(over) // the measurement window itself
	last, to, err := read()
	if err != nil {
		return nil, err
	}
	secs := to.Sub(from).Seconds()
	rates := make([]float64, len(ports))
	for i, p := range ports {
		f, ok1 := first[p]
		l, ok2 := last[p]
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("connection from port %d not at the broker at both ends of the window (%v, %v)", p, ok1, ok2)
		}
		rates[i] = float64(l.Received-f.Received) / secs
	}
	return rates, nil
}

// timeline is a diagnostic beside the judge: each second of the window,
// each case's rate from the broker sockets (its connections present at
// both ends of the second), the entities the data path binds its
// connections' produce direction to, and sluice's own figures for its
// entity (rate/dynamic limit MB/s).
func timeline(w *harness.World, cases []*longIDCase, seconds int) map[string][]string {
	type reading struct {
		owners   map[int][]uint16
		socks    map[uint16]harness.SocketCounts
		snap     *status.Snapshot
		bindings map[maps.ConnKey]maps.Binding
	}
	read := func() (r reading, err error) {
		if r.owners, err = w.ClientPorts(); err != nil {
			return r, err
		}
		if r.socks, _, err = w.BrokerSockets(); err != nil {
			return r, err
		}
		r.snap, _ = w.Status()
		r.bindings, _ = w.Bindings()
		return r, nil
	}
	out := map[string][]string{}
	prev, err := read()
	if err != nil {
		out["error"] = []string{err.Error()}
		return out
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; i < seconds; i++ {
		<-tick.C // the window, read as it passes
		cur, err := read()
		if err != nil {
			out["error"] = []string{err.Error()}
			return out
		}
		for _, c := range cases {
			var ports []uint16
			if c.client != nil {
				ports = cur.owners[c.client.Pid()]
			} else {
				ports = []uint16{c.raw.port}
			}
			var bytes uint64
			for _, p := range ports {
				a, ok1 := prev.socks[p]
				b, ok2 := cur.socks[p]
				if ok1 && ok2 && b.Received >= a.Received {
					bytes += b.Received - a.Received
				}
			}
			line := fmt.Sprintf("%.3f MB/s", float64(bytes)/1e6)
			if cur.snap != nil {
				bound := boundTo(w, cur.snap, cur.bindings, ports)
				var names []string
				for _, p := range ports {
					names = append(names, bound[fmt.Sprint(p)])
				}
				line += " bound " + strings.Join(names, ",")
				if e := produceEntity(cur.snap, c.target, c.entity); e != nil {
					line += fmt.Sprintf(" sluice %.3f/%.3f", float64(e.Rate)/1e6, float64(e.DynamicLimit)/1e6)
				}
			}
			out[c.name] = append(out[c.name], line)
		}
		if cur.snap != nil {
			out["_rebinds"] = append(out["_rebinds"], fmt.Sprint(cur.snap.Connections.Rebinds, " unresolved ", cur.snap.Learner.Unresolved))
		}
		prev = cur
	}
	return out
}
