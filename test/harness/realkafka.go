package harness

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/netns"
)

// The real broker: Apache Kafka (KRaft, broker and controller in one JVM)
// started from the jars `make kafka-deps` copied out of Maven Central
// (test/kafka/pom.xml pins the version). The scenarios of `make
// kafka-check` run it where the other worlds run kfake.

// KafkaVersion is the Apache Kafka release test/kafka/pom.xml pins.
const KafkaVersion = "4.1.1"

// KafkaLibs is the class path directory of the pinned Kafka under the
// repository root, or an error that says how to fill it.
func KafkaLibs(root string) (string, error) {
	dir := filepath.Join(root, "test", "kafka", "lib")
	jar := filepath.Join(dir, "kafka_2.13-"+KafkaVersion+".jar")
	if _, err := os.Stat(jar); err != nil {
		return "", fmt.Errorf("Apache Kafka %s is not in %s (run make kafka-deps): %w", KafkaVersion, dir, err)
	}
	return dir, nil
}

// BrokerSpec is one real broker.
type BrokerSpec struct {
	Libs   string        // KafkaLibs
	NS     *netns.NS     // the broker host
	IP     string        // the client listener's address (port 9092)
	NodeID int           // node.id
	Dir    string        // its configuration, log dirs and server.log
	Heap   string        // -Xmx, e.g. "768m" (default)
	Props  []string      // more server.properties lines (key=value)
	Start  time.Duration // how long it may take to answer ApiVersions (default 60 s)
	// Voters, when set, is a static quorum of combined nodes
	// (controller.quorum.voters, id@host:9093,...): the node's controller
	// listens on IP:9093. Unset, the node is a quorum of its own, its
	// controller on the host's loopback.
	Voters string
	// Protocol is the client listener's: PLAINTEXT (""), SASL_PLAINTEXT
	// (SCRAM-SHA-512, users made with AddSCRAMUser) or SSL (a keystore
	// made for IP, its certificate in TLSFiles). Other than PLAINTEXT, the
	// broker also listens in PLAINTEXT on the host's loopback
	// (InternalAddr) for itself, the readiness probe and the admin tools.
	Protocol string
}

// InternalAddr is the PLAINTEXT listener on the broker host's loopback of
// a broker whose client listener is not PLAINTEXT.
const InternalAddr = "127.0.0.1:9094"

// internal says whether the broker's own traffic and the admin tools go
// through InternalAddr.
func (s BrokerSpec) internal() bool { return s.Protocol != "" && s.Protocol != "PLAINTEXT" }

// Broker is a running Apache Kafka broker.
type Broker struct {
	Spec BrokerSpec
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Addr is the broker's client listener.
func (b *Broker) Addr() string { return net.JoinHostPort(b.Spec.IP, "9092") }

// DataDir is the broker's log directory (the partitions' segments).
func (b *Broker) DataDir() string { return filepath.Join(b.Spec.Dir, "data") }

func (b *Broker) logDir() string { return filepath.Join(b.Spec.Dir, "logs") }

// StartBroker formats the broker's storage and starts it in its
// namespace, then waits until its listener answers ApiVersions. A broker
// that exits or does not answer in time is stopped, and the error carries
// the end of its own log.
func StartBroker(s BrokerSpec) (*Broker, error) {
	if s.Heap == "" {
		s.Heap = "768m"
	}
	if s.Start == 0 {
		s.Start = 60 * time.Second
	}
	b := &Broker{Spec: s, done: make(chan struct{})}
	for _, d := range []string{b.DataDir(), b.logDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if s.Protocol == "SSL" {
		if err := b.makeKeystore(); err != nil {
			return nil, err
		}
	}
	props := filepath.Join(s.Dir, "server.properties")
	if err := os.WriteFile(props, []byte(b.properties()), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "log4j2.properties"), []byte(log4j2), 0o644); err != nil {
		return nil, err
	}
	formatArgs := []string{"format", "--cluster-id", clusterID, "--config", props, "--ignore-formatted"}
	if s.Voters == "" {
		formatArgs = append(formatArgs, "--standalone")
	}
	format := b.java("256m", "kafka.tools.StorageTool", formatArgs...)
	if out, err := format.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("kafka-storage format (node %d): %v\n%s", s.NodeID, err, out)
	}
	logf, err := os.Create(filepath.Join(b.logDir(), "stdout.log"))
	if err != nil {
		return nil, err
	}
	b.cmd = b.jvm(jmxOptions, s.Heap, "kafka.Kafka", props)
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	if err := b.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { b.err = b.cmd.Wait(); logf.Close(); close(b.done) }()
	if err := b.waitReady(); err != nil {
		b.Stop()
		return nil, fmt.Errorf("broker %d: %w\n%s", s.NodeID, err, b.LogTail(40))
	}
	return b, nil
}

// clusterID is every real world's cluster id (one cluster a world).
const clusterID = "c2x1aWNlLXRlc3RzLTAwMQ"

// properties is the broker's server.properties: one combined KRaft node
// (its controller on loopback inside its host), sized for a 2-core host.
func (b *Broker) properties() string {
	s := b.Spec
	quorum, controller := "controller.quorum.bootstrap.servers=127.0.0.1:9093", "127.0.0.1:9093"
	if s.Voters != "" {
		quorum, controller = "controller.quorum.voters="+s.Voters, net.JoinHostPort(s.IP, "9093")
	}
	listeners := []string{
		"listeners=PLAINTEXT://" + b.Addr() + ",CONTROLLER://" + controller,
		"advertised.listeners=PLAINTEXT://" + b.Addr(),
		"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"inter.broker.listener.name=PLAINTEXT",
	}
	if s.internal() {
		p := s.Protocol
		listeners = []string{
			"listeners=" + p + "://" + b.Addr() + ",CONTROLLER://" + controller + ",INTERNAL://" + InternalAddr,
			"advertised.listeners=" + p + "://" + b.Addr() + ",INTERNAL://" + InternalAddr,
			"listener.security.protocol.map=" + p + ":" + p + ",CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT",
			"inter.broker.listener.name=INTERNAL",
		}
	}
	switch s.Protocol {
	case "SASL_PLAINTEXT":
		listeners = append(listeners, "sasl.enabled.mechanisms=SCRAM-SHA-512",
			"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;")
	case "SSL":
		tf := b.TLSFiles()
		listeners = append(listeners, "ssl.keystore.type=PKCS12", "ssl.keystore.location="+tf.Keystore,
			"ssl.keystore.password="+tf.Password, "ssl.key.password="+tf.Password)
	}
	lines := append([]string{
		"process.roles=broker,controller",
		"node.id=" + strconv.Itoa(s.NodeID),
		quorum,
		"controller.listener.names=CONTROLLER",
	}, listeners...)
	lines = append(lines,
		"log.dirs="+b.DataDir(),
		"num.partitions=1",
		"offsets.topic.replication.factor=1",
		"offsets.topic.num.partitions=4",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"share.coordinator.state.topic.replication.factor=1",
		"share.coordinator.state.topic.min.isr=1",
		"group.initial.rebalance.delay.ms=0",
		"num.network.threads=2",
		"num.io.threads=4",
		"auto.create.topics.enable=false",
		// Segments small enough that a run's log stays in the page cache's
		// reach; retention bounds the disk a long run uses.
		"log.segment.bytes=67108864",
		"log.retention.bytes=1073741824",
	)
	return strings.Join(append(lines, s.Props...), "\n") + "\n"
}

// log4j2 writes the broker's log to logs/server.log (LogTail reads it).
const log4j2 = `appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka.request.logger
logger.kafka.level = WARN
`

// java is a JVM in the broker's host on the Kafka class path.
func (b *Broker) java(heap, main string, args ...string) *exec.Cmd {
	return b.jvm(nil, heap, main, args...)
}

// jvm is java with more JVM options.
func (b *Broker) jvm(opts []string, heap, main string, args ...string) *exec.Cmd {
	argv := jvmArgv(opts, b.Spec.Libs, filepath.Join(b.Spec.Dir, "log4j2.properties"), filepath.Join(b.Spec.Dir, "logs"), heap, main, args...)
	// No Pdeathsig: it follows the OS thread that forked, and the
	// namespace helpers retire threads; Close and the kafka-check's
	// leftover check end every JVM instead.
	return exec.Command("ip", append([]string{"netns", "exec", b.Spec.NS.Name}, argv...)...)
}

// jmxPort is where a broker serves JMX, on its host's loopback: the
// scenarios read Kafka's own metrics there (JMX).
const jmxPort = "9999"

// jmxOptions start the JVM's JMX agent on the host's loopback.
var jmxOptions = []string{"-Dcom.sun.management.jmxremote", "-Dcom.sun.management.jmxremote.port=" + jmxPort,
	"-Dcom.sun.management.jmxremote.rmi.port=" + jmxPort, "-Dcom.sun.management.jmxremote.local.only=true",
	"-Dcom.sun.management.jmxremote.authenticate=false", "-Dcom.sun.management.jmxremote.ssl=false",
	"-Djava.rmi.server.hostname=127.0.0.1"}

// JMX reads attributes of the MBeans matching object (a JMX object name
// pattern) from the broker's own metrics, with Kafka's JmxTool: each
// attribute summed over the matching MBeans.
func (b *Broker) JMX(object string, attrs ...string) (map[string]float64, error) {
	out, err := b.java("128m", "org.apache.kafka.tools.JmxTool", "--jmx-url",
		"service:jmx:rmi:///jndi/rmi://127.0.0.1:"+jmxPort+"/jmxrmi", "--object-name", object,
		"--attributes", strings.Join(attrs, ","), "--one-time", "true", "--report-format", "properties").Output()
	if err != nil {
		return nil, fmt.Errorf("JmxTool %s: %v\n%s", object, err, out)
	}
	// A line an attribute: "<mbean name>:<attribute>=<value>" (the MBean
	// name holds commas and '='s of its own).
	sums := map[string]float64{}
	for _, line := range strings.Split(string(out), "\n") {
		i := strings.LastIndexByte(line, ':')
		if i < 0 {
			continue
		}
		attr, v, ok := strings.Cut(line[i+1:], "=")
		if !ok || !slices.Contains(attrs, attr) {
			continue
		}
		if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			sums[attr] += x
		}
	}
	for _, a := range attrs {
		if _, ok := sums[a]; !ok {
			return nil, fmt.Errorf("JmxTool %s: no %s in %q", object, a, out)
		}
	}
	return sums, nil
}

// JavaArgv is the command line of a JVM on the Kafka class path: heap is
// its fixed heap (the machine has 2 cores and brokers beside it), logConf
// its log4j2 configuration, logDir where that may write.
func JavaArgv(libs, logConf, logDir, heap, main string, args ...string) []string {
	return jvmArgv(nil, libs, logConf, logDir, heap, main, args...)
}

// jvmArgv is JavaArgv with more JVM options.
func jvmArgv(opts []string, libs, logConf, logDir, heap, main string, args ...string) []string {
	argv := []string{"java", "-Xms" + heap, "-Xmx" + heap, "-XX:+UseG1GC", "-Djava.awt.headless=true",
		"-Dkafka.logs.dir=" + logDir, "-Dlog4j2.configurationFile=" + logConf}
	return slices.Concat(argv, opts, []string{"-cp", filepath.Join(libs, "*"), main}, args)
}

// ToolLog4j2 sends a Java tool's warnings to its stderr (the client's
// log); its report stays alone on stdout.
const ToolLog4j2 = `appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
`

// StartJava runs a Kafka Java tool (a main class of the pinned
// distribution: ProducerPerformance, ConsumerPerformance, ...) in the
// client namespace as a Client, its report kept (Output), its log in
// client-<name>.log. A 256 MiB heap: the tools hold a batch or a fetch.
func (w *World) StartJava(name, main string, args ...string) (*Client, error) {
	if w.Broker == nil {
		return nil, fmt.Errorf("%s: the world runs no real broker (Options.RealKafka)", name)
	}
	conf := filepath.Join(w.Dir, "tools-log4j2.properties")
	if err := os.WriteFile(conf, []byte(ToolLog4j2), 0o644); err != nil {
		return nil, err
	}
	return w.StartCommandOut(name, JavaArgv(w.Broker.Spec.Libs, conf, w.Dir, "256m", main, args...)...)
}

// waitReady probes the listener with ApiVersions until it answers (the
// broker opens it once it has caught up with the metadata log).
func (b *Broker) waitReady() error {
	deadline := time.Now().Add(b.Spec.Start)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-b.done:
			return fmt.Errorf("exited before it was ready (%v)", b.err)
		default:
		}
		if last = b.apiVersions(); last == nil {
			return nil
		}
		select {
		case <-b.done:
		case <-time.After(200 * time.Millisecond): // the next probe, bounded by the deadline
		}
	}
	return fmt.Errorf("no ApiVersions answer within %v: %v", b.Spec.Start, last)
}

// apiVersions sends one ApiVersions v0 request and reads its answer.
func (b *Broker) apiVersions() error {
	addr := b.Addr()
	if b.Spec.internal() {
		addr = InternalAddr // a TLS listener would want a handshake first
	}
	c, err := b.Spec.NS.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	const id = "sluice-probe"
	var req bytes.Buffer
	// size, api key 18 (ApiVersions), version 0, correlation id 7, client-id
	for _, v := range []any{int32(2 + 2 + 4 + 2 + len(id)), int16(18), int16(0), int32(7), int16(len(id))} {
		binary.Write(&req, binary.BigEndian, v)
	}
	req.WriteString(id)
	if _, err := c.Write(req.Bytes()); err != nil {
		return err
	}
	var head struct {
		Size, Correlation int32
		Error             int16
	}
	if err := binary.Read(c, binary.BigEndian, &head); err != nil {
		return err
	}
	if head.Correlation != 7 || head.Error != 0 {
		return fmt.Errorf("ApiVersions answered correlation %d, error %d", head.Correlation, head.Error)
	}
	return nil
}

// Stop ends the broker: SIGTERM (a controlled shutdown), SIGKILL after
// 20 s.
func (b *Broker) Stop() {
	if b.cmd == nil || b.cmd.Process == nil {
		return
	}
	select {
	case <-b.done:
		return
	default:
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		b.cmd.Process.Kill()
		<-b.done
	}
}

// Kill ends the broker at once (SIGKILL), as a crash would.
func (b *Broker) Kill() {
	if b.cmd == nil || b.cmd.Process == nil {
		return
	}
	b.cmd.Process.Kill()
	<-b.done
}

// LogTail is the last n lines of the broker's server.log (or of its
// stdout, if it wrote no log).
func (b *Broker) LogTail(n int) string {
	for _, f := range []string{"server.log", "stdout.log"} {
		data, err := os.ReadFile(filepath.Join(b.logDir(), f))
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		return f + " (last lines):\n" + strings.Join(lines, "\n")
	}
	return "(the broker wrote no log)"
}

// PartitionBytes is the size of a partition's log on the broker's disk:
// its segments' bytes, what the broker itself appended. A scenario judges
// per-partition rates by it, never by sluice.
func (b *Broker) PartitionBytes(topic string, partition int) (int64, error) {
	segs, err := filepath.Glob(filepath.Join(b.DataDir(), fmt.Sprintf("%s-%d", topic, partition), "*.log"))
	if err != nil {
		return 0, err
	}
	if len(segs) == 0 {
		return 0, fmt.Errorf("no log segment of %s-%d in %s", topic, partition, b.DataDir())
	}
	var n int64
	for _, s := range segs {
		fi, err := os.Stat(s)
		if err != nil {
			return 0, err
		}
		n += fi.Size()
	}
	return n, nil
}

// Admin is a franz-go client of the broker dialing from ns (the client
// host), for topics and quotas; the caller closes it.
func (b *Broker) Admin(ns *netns.NS) (*kadm.Client, error) {
	seed := b.Addr()
	if b.Spec.internal() {
		// Its client listener wants a login: the admin goes through the
		// broker host's PLAINTEXT loopback listener instead.
		seed, ns = InternalAddr, b.Spec.NS
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.ClientID("e2e-admin"),
		kgo.Dialer(func(_ context.Context, _, host string) (net.Conn, error) { return ns.Dial(host) }))
	if err != nil {
		return nil, err
	}
	return kadm.NewClient(cl), nil
}

// withAdmin runs f with an admin client of the broker (Admin) and a
// context that ends after timeout.
func (b *Broker) withAdmin(ns *netns.NS, timeout time.Duration, f func(context.Context, *kadm.Client) error) error {
	adm, err := b.Admin(ns)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return f(ctx, adm)
}

// Topic is a topic's metadata as the cluster answers it.
func (b *Broker) Topic(ns *netns.NS, topic string) (kadm.TopicDetail, error) {
	var td kadm.TopicDetail
	err := b.withAdmin(ns, 10*time.Second, func(ctx context.Context, adm *kadm.Client) error {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			td, err = md.Topics[topic], md.Topics[topic].Err
		}
		return err
	})
	return td, err
}

// CreateTopics creates topics of partitions each (replication factor rf)
// and waits until every partition has a leader.
func (b *Broker) CreateTopics(ns *netns.NS, partitions int32, rf int16, topics ...string) error {
	return b.withAdmin(ns, 30*time.Second, func(ctx context.Context, adm *kadm.Client) error {
		return createTopics(ctx, adm, partitions, rf, topics)
	})
}

func createTopics(ctx context.Context, adm *kadm.Client, partitions int32, rf int16, topics []string) error {
	res, err := adm.CreateTopics(ctx, partitions, rf, nil, topics...)
	if err != nil {
		return fmt.Errorf("create topics %v: %w", topics, err)
	}
	for _, r := range res.Sorted() {
		if r.Err != nil {
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	for {
		md, err := adm.Metadata(ctx, topics...)
		if err == nil && led(md, topics, partitions) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v: partitions without a leader after 30 s (%v)", topics, err)
		case <-time.After(100 * time.Millisecond): // polling the metadata, bounded by the context
		}
	}
}

func led(md kadm.Metadata, topics []string, partitions int32) bool {
	for _, t := range topics {
		td, ok := md.Topics[t]
		if !ok || td.Err != nil || int32(len(td.Partitions)) != partitions {
			return false
		}
		for _, p := range td.Partitions {
			if p.Leader < 0 || p.Err != nil {
				return false
			}
		}
	}
	return true
}

// SetClientQuota sets (rate > 0) or removes (rate 0) one of a client-id's
// quotas in the broker's quota store (key producer_byte_rate or
// consumer_byte_rate), as kafka-configs --alter does.
func (b *Broker) SetClientQuota(ns *netns.NS, clientID, key string, rate float64) error {
	err := b.withAdmin(ns, 10*time.Second, func(ctx context.Context, adm *kadm.Client) error {
		op := kadm.AlterClientQuotaOp{Key: key, Value: rate, Remove: rate == 0}
		res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{
			Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: &clientID}}, Ops: []kadm.AlterClientQuotaOp{op}}})
		if err == nil && len(res) == 1 {
			err = res[0].Err
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("alter client quota %s of %s: %w", key, clientID, err)
	}
	return nil
}

// Tool runs a Kafka command-line tool (its main class) on the broker's
// host against the broker's own listener (the loopback one when the client
// listener is not plain), as an operator would, and returns what it
// printed.
func (b *Broker) Tool(main string, args ...string) (string, error) {
	addr := b.Addr()
	if b.Spec.internal() {
		addr = InternalAddr
	}
	out, err := b.java("256m", main, append([]string{"--bootstrap-server", addr}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v\n%s", main, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Configs runs kafka-configs (ConfigCommand).
func (b *Broker) Configs(args ...string) (string, error) {
	return b.Tool("kafka.admin.ConfigCommand", args...)
}

// AddSCRAMUser creates a SCRAM-SHA-512 user with kafka-configs.
func (b *Broker) AddSCRAMUser(user, password string) error {
	_, err := b.Configs("--alter", "--entity-type", "users", "--entity-name", user,
		"--add-config", "SCRAM-SHA-512=[iterations=4096,password="+password+"]")
	return err
}

// TLSFiles are an SSL broker's key material: its PKCS12 keystore, the
// certificate in PEM (what the agent's metadata client and Go clients
// trust) and a PKCS12 truststore holding it (what Java clients trust).
type TLSFiles struct {
	Keystore, CertPEM, Truststore, Password string
}

// TLSFiles is where the broker's key material is.
func (b *Broker) TLSFiles() TLSFiles {
	d := filepath.Join(b.Spec.Dir, "tls")
	return TLSFiles{Keystore: filepath.Join(d, "broker.p12"), CertPEM: filepath.Join(d, "broker.pem"),
		Truststore: filepath.Join(d, "truststore.p12"), Password: "sluice-test-store"}
}

// makeKeystore makes the broker a self-signed key pair for its address
// with the JDK's keytool, exports its certificate and builds a truststore
// of it.
func (b *Broker) makeKeystore() error {
	tf := b.TLSFiles()
	if err := os.MkdirAll(filepath.Dir(tf.Keystore), 0o700); err != nil {
		return err
	}
	for _, argv := range [][]string{
		{"-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-validity", "2", "-dname", "CN=" + b.Spec.IP,
			"-ext", "SAN=ip:" + b.Spec.IP, "-keystore", tf.Keystore, "-storetype", "PKCS12", "-storepass", tf.Password, "-keypass", tf.Password},
		{"-exportcert", "-rfc", "-alias", "broker", "-keystore", tf.Keystore, "-storepass", tf.Password, "-file", tf.CertPEM},
		{"-importcert", "-noprompt", "-alias", "broker", "-file", tf.CertPEM, "-keystore", tf.Truststore, "-storetype", "PKCS12", "-storepass", tf.Password},
	} {
		if out, err := exec.Command("keytool", argv...).CombinedOutput(); err != nil {
			return fmt.Errorf("keytool %s: %v\n%s", argv[0], err, out)
		}
	}
	return nil
}
