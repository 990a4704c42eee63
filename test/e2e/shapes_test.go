package e2e

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sys/unix"

	kt "github.com/sluice-dev/sluice/agent/kafka/kafkatest"
	"github.com/sluice-dev/sluice/maps"
	"github.com/sluice-dev/sluice/test/harness"
)

// Request shapes a client chooses, against identity (#46): what decides a
// connection's entity must be read whatever the shape of its requests.
//
//   - A producer whose every Produce names 3 to 6 partitions of two topics,
//     one of them the governed orders-3, never first and always behind at
//     least one 16 KiB record batch, past any sample's end. The data path
//     does not read past record batches: a request whose sample ends
//     before its partitions do is held to the strictest configured
//     partition it may hide (of its topic, or of any topic when whole
//     topics are unseen: docs/design.md §5), never to the client's entity.
//     orders-3 is the only configured partition here, so that rule and a
//     full read agree: the connection's bytes, all partitions together,
//     are held to orders-3's limit. (With a stricter idle partition in the
//     same configuration the producer is held to that one instead, by the
//     same rule: 1.000 MB/s was measured that way.)
//   - A SASL client that pipelines its SaslHandshake and SaslAuthenticate
//     in one write and splits the SaslAuthenticate's header across two TCP
//     segments (9 bytes in the first, which also holds the whole
//     handshake; the rest in the second), with a 300-byte client-id. Its
//     login must put it under its user's quota.
//
// The split is checked, not assumed: TCP_NODELAY, each write sent before
// the next is made (the socket's tcp_info: nothing unsent), and the
// socket's data_segs_out must have grown by exactly one per write. An idle
// user carries the lowest limit in the configuration, which is what the
// unresolved entity is held to: a connection that fell there lands on
// 1 MB/s, not its own limit; one left at H runs at up to 100 MB/s. Each is
// judged by its broker socket's tcp_info bytes_received over 10 s after a
// 3 s settle, within ±3 % of its limit.
func TestScenarioRequestShapes(t *testing.T) {
	const (
		agentPassword = "sluice-Pw-3a61"
		governedLimit = 3.0e6 // orders-3
		userLimit     = 4.0e6 // carol
		idle          = 1.0e6 // the user idle's limit, which no client uses: the lowest anywhere
		splitAt       = 9     // bytes of the SaslAuthenticate in the first segment
	)
	users := []harness.SASLUser{
		{Mechanism: "PLAIN", User: "sluice", Password: agentPassword},
		{Mechanism: "PLAIN", User: "writer", Password: "pw-writer"}, // no quota of its own
		{Mechanism: "PLAIN", User: "carol", Password: "pw-carol"},
	}
	w := world(t, harness.Options{Topics: []string{"orders", "events"}, Partitions: 10, SASL: users})
	a := start(t, w, harness.Config{ProduceCapacity: "100MB", Listeners: "[{port: 9092, protocol: SASL_PLAINTEXT}]",
		Extra: "sasl: {mechanism: PLAIN, username: sluice, password: " + agentPassword + "}\n" +
			"entities:\n  topic-partitions:\n" +
			"    orders-3: {producer_byte_rate: " + itoa(governedLimit) + "}\n" +
			"  users:\n    carol: {producer_byte_rate: " + itoa(userLimit) + "}\n" +
			"    idle: {producer_byte_rate: " + itoa(idle) + "}\n"})
	defer a.Stop()

	multi, err := startShapedProducer(w, shapedSpec{clientID: "shapes-multi", user: "writer", password: "pw-writer", requests: multiPartitionRequests()})
	if err != nil {
		t.Fatalf("multi-partition producer: %v", err)
	}
	t.Cleanup(multi.stop)
	sasl, err := startShapedProducer(w, shapedSpec{clientID: longClientID("shapes-sasl", 300), user: "carol", password: "pw-carol", splitAt: splitAt,
		requests: []kmsg.Request{produceOf(shapeTP{"events", 7})}})
	if err != nil {
		t.Fatalf("split and pipelined SASL producer: %v", err)
	}
	t.Cleanup(sasl.stop)

	ports := []uint16{multi.port, sasl.port}
	settled := settlePorts(w, ports, 30*time.Second)
	before, _ := w.Status()
	time.Sleep(3 * time.Second) // settle, as metered does
	rates, err := meterPorts(w, window, ports)
	if err != nil {
		t.Fatal(err)
	}
	after, statusErr := w.Status()
	bindings, bindErr := w.Bindings()

	multiOK, saslOK := within(rates[0], governedLimit, 0.03), within(rates[1], userLimit, 0.03)
	split := sasl.login.firstSegments == 1 && sasl.login.secondSegments == 1
	var failures []string
	for _, p := range []*shapedProducer{multi, sasl} {
		if err := p.failure(); err != nil {
			failures = append(failures, err.Error())
		}
	}
	errs := multi.errs.Load() + sasl.errs.Load()
	diag := map[string]any{"bindings_settled": errString(settled), "status_error": errString(statusErr), "bindings_error": errString(bindErr)}
	if after != nil {
		diag["learner"] = after.Learner
		diag["rebinds"] = after.Connections.Rebinds
		if bindErr == nil {
			diag["bound"] = boundTo(w, after, bindings, ports)
		}
		if before != nil {
			diag["learner_unresolved_during_window"] = after.Learner.Unresolved - before.Learner.Unresolved
		}
		for _, e := range after.Directions[maps.Produce].Entities {
			if (e.Kind == "topic-partition" && e.Name == "orders-3") || (e.Kind == "user" && e.Name == "carol") || e.Kind == "unresolved" || e.Kind == "unknown" {
				diag[e.Kind+":"+e.Name] = entitySummary(&e)
			}
		}
	}
	record(t, Result{
		Name: "request-shapes",
		Pass: multiOK && saslOK && split && len(failures) == 0 && errs == 0,
		Measured: map[string]any{
			"multi_partition_bps": rates[0], "multi_partition_requests": multi.shapes,
			"sasl_split_pipelined_bps": rates[1],
			"sasl_login_writes_bytes":  []int{sasl.login.firstBytes, sasl.login.secondBytes},
			"sasl_login_data_segments": []uint32{sasl.login.firstSegments, sasl.login.secondSegments},
			"sasl_client_id_bytes":     300,
			"client_errors":            errs, "producer_failures": failures,
			"measured_at": meteredAt + "; both producers are this process's own connections, metered by their ports",
			"diagnostics": diag,
		},
		Expected: map[string]any{
			"multi_partition_bps": governedLimit, "sasl_split_pipelined_bps": userLimit, "tolerance": 0.03,
			"sasl_login_data_segments": []int{1, 1}, "client_errors": 0,
			"meaning": "the multi-partition producer held to orders-3's producer_byte_rate, the SASL client to carol's; either at the idle user's " +
				itoa(idle) + " means unresolved, far above means H",
		},
	})
}

// shapeTP is one topic-partition of a Produce request.
type shapeTP struct {
	topic     string
	partition int32
}

// multiPartitionRequests are the multi-partition producer's requests, sent
// in turn: 3, 4, 5 and 6 partitions, two layouts each. orders-3 is never
// the first partition, and a 16 KiB record batch always comes before it:
// either the events topic's partitions come first and orders-3 last, or
// orders-4 comes first within the orders topic, which comes first.
func multiPartitionRequests() []kmsg.Request {
	var out []kmsg.Request
	for n := 3; n <= 6; n++ {
		var last, first []shapeTP
		for p := range n - 1 {
			last = append(last, shapeTP{"events", int32(p)})
		}
		last = append(last, shapeTP{"orders", 3})
		first = []shapeTP{{"orders", 4}, {"orders", 3}}
		for p := range n - 2 {
			first = append(first, shapeTP{"events", int32(p)})
		}
		out = append(out, produceOf(last...), produceOf(first...))
	}
	return out
}

// produceOf is a Produce request (v7, acks=1) with one record batch of
// four 4 KiB records (16 KiB) for each topic-partition, grouped by topic
// in the order given.
func produceOf(tps ...shapeTP) kmsg.Request {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(7)
	req.Acks, req.TimeoutMillis = 1, 30000
	for _, tp := range tps {
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != tp.topic {
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = tp.topic
			req.Topics = append(req.Topics, rt)
		}
		values := make([][]byte, 4)
		for i := range values {
			values[i] = make([]byte, 4<<10)
			rand.Read(values[i])
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = tp.partition
		rp.Records = kt.RecordBatch(values, time.Now().UnixMilli())
		rt := &req.Topics[len(req.Topics)-1]
		rt.Partitions = append(rt.Partitions, rp)
	}
	return req
}

// shapedSpec is a raw producer's client-id, login and requests.
type shapedSpec struct {
	clientID, user, password string
	// splitAt > 0: the SaslHandshake and the SaslAuthenticate go in one
	// write with the SaslAuthenticate's first splitAt bytes, then the rest
	// in a second write (pipelined, and its header split across segments).
	splitAt  int
	requests []kmsg.Request // sent in turn, four in flight
}

// loginWrites is what the kernel made of a split login's two writes.
type loginWrites struct {
	firstBytes, secondBytes       int
	firstSegments, secondSegments uint32 // data segments each write went out in
}

// shapedProducer is a greedy producer on one connection from the client
// namespace (this process, franz-go's kmsg): it logs in with PLAIN as its
// spec says, then keeps four Produce requests in flight.
type shapedProducer struct {
	rawProducer
	login  loginWrites
	shapes []string // each request's topic-partitions, for the record
}

func startShapedProducer(w *harness.World, spec shapedSpec) (*shapedProducer, error) {
	conn, err := w.Pair.Client.Dial(w.Bootstrap())
	if err != nil {
		return nil, err
	}
	p := &shapedProducer{rawProducer: newRawProducer(conn)}
	if err := p.logIn(spec); err != nil {
		conn.Close()
		return nil, fmt.Errorf("login: %w", err)
	}
	format := kmsg.NewRequestFormatter(kmsg.FormatterClientID(spec.clientID))
	for _, r := range spec.requests {
		var tps []string
		for _, t := range r.(*kmsg.ProduceRequest).Topics {
			for _, pr := range t.Partitions {
				tps = append(tps, fmt.Sprintf("%s-%d", t.Topic, pr.Partition))
			}
		}
		p.shapes = append(p.shapes, strings.Join(tps, ","))
	}
	p.produce(format, 100, func(i int) kmsg.Request { return spec.requests[i%len(spec.requests)] })
	return p, nil
}

// logIn sends ApiVersions, then the SASL PLAIN exchange: one request at a
// time, or (splitAt > 0) the handshake and the login pipelined in one
// write with the login's header split across two segments.
func (p *shapedProducer) logIn(spec shapedSpec) error {
	conn := p.conn
	format := kmsg.NewRequestFormatter(kmsg.FormatterClientID(spec.clientID))
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	defer conn.SetDeadline(time.Time{})
	read := func(req kmsg.Request, resp kmsg.Response) error {
		body, err := readFrame(conn)
		if err != nil {
			return err
		}
		resp.SetVersion(req.GetVersion())
		return resp.ReadFrom(body[4:]) // response header v0: the correlation id
	}
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	av.ClientSoftwareName, av.ClientSoftwareVersion = "sluice-e2e-shapes", "1"
	if _, err := conn.Write(format.AppendRequest(nil, av, 1)); err != nil {
		return err
	}
	if err := read(av, kmsg.NewPtrApiVersionsResponse()); err != nil {
		return fmt.Errorf("api versions: %w", err)
	}
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.SetVersion(1)
	hs.Mechanism = "PLAIN"
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.SetVersion(1)
	auth.SASLAuthBytes = []byte("\x00" + spec.user + "\x00" + spec.password)
	hsFrame, authFrame := format.AppendRequest(nil, hs, 2), format.AppendRequest(nil, auth, 3)
	if spec.splitAt == 0 {
		if _, err := conn.Write(hsFrame); err != nil {
			return err
		}
	} else {
		first := append(slices.Clone(hsFrame), authFrame[:spec.splitAt]...)
		segs, err := p.writeSegment(first)
		if err != nil {
			return err
		}
		p.login.firstBytes, p.login.firstSegments = len(first), segs
		authFrame = authFrame[spec.splitAt:]
	}
	hsResp := kmsg.NewPtrSASLHandshakeResponse()
	if spec.splitAt == 0 {
		if err := read(hs, hsResp); err != nil {
			return fmt.Errorf("sasl handshake: %w", err)
		}
	}
	segs, err := p.writeSegment(authFrame)
	if err != nil {
		return err
	}
	if spec.splitAt > 0 {
		p.login.secondBytes, p.login.secondSegments = len(authFrame), segs
		if err := read(hs, hsResp); err != nil {
			return fmt.Errorf("sasl handshake: %w", err)
		}
	}
	if hsResp.ErrorCode != 0 {
		return fmt.Errorf("sasl handshake: error code %d", hsResp.ErrorCode)
	}
	authResp := kmsg.NewPtrSASLAuthenticateResponse()
	if err := read(auth, authResp); err != nil {
		return fmt.Errorf("sasl authenticate: %w", err)
	}
	if authResp.ErrorCode != 0 {
		return fmt.Errorf("sasl authenticate: error code %d", authResp.ErrorCode)
	}
	return nil
}

// writeSegment writes b with TCP_NODELAY and waits until the kernel has
// sent all of it (tcp_info: nothing unsent), so that the next write cannot
// join its segment. It returns how many data segments the write went out
// in (tcp_info data_segs_out before and after).
func (p *shapedProducer) writeSegment(b []byte) (uint32, error) {
	tcp := p.conn.(*net.TCPConn)
	if err := tcp.SetNoDelay(true); err != nil {
		return 0, err
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return 0, err
	}
	info := func() (*unix.TCPInfo, error) {
		var i *unix.TCPInfo
		var ierr error
		if err := raw.Control(func(fd uintptr) { i, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
			return nil, err
		}
		return i, ierr
	}
	before, err := info()
	if err != nil {
		return 0, err
	}
	if _, err := tcp.Write(b); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		now, err := info()
		if err != nil {
			return 0, err
		}
		if now.Notsent_bytes == 0 {
			return now.Data_segs_out - before.Data_segs_out, nil
		}
		if time.Now().After(deadline) {
			return 0, errors.New("a write was not sent within 2 s")
		}
		time.Sleep(time.Millisecond) // polling the socket's own counter, not a guess at readiness
	}
}

// settlePorts waits (at most timeout) until each of this process's
// connections (by port) is bound to an entity other than unknown and the
// bindings read the same twice a second apart. Readiness only: it returns
// why it gave up, for the record, and the window is measured either way.
func settlePorts(w *harness.World, ports []uint16, timeout time.Duration) error {
	look := func() (string, error) {
		s, err := w.Status()
		if err != nil {
			return "", err
		}
		b, err := w.Bindings()
		if err != nil {
			return "", err
		}
		var all []string
		for p, name := range boundTo(w, s, b, ports) {
			if strings.HasPrefix(name, "unknown") || name == "no binding" {
				return "", fmt.Errorf("connection %s is %s", p, name)
			}
			all = append(all, p+"="+name)
		}
		slices.Sort(all)
		return strings.Join(all, " "), nil
	}
	return untilStable(look, timeout)
}
