package configfile

import (
	"errors"
	"fmt"
	"github.com/sluice-dev/sluice/agent/config"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const minimal = `
interfaces: [veth0]
listeners: [9092]
produce: {capacity: 100MiB}
fetch: {capacity: -1}
`

func TestExampleFileIsValid(t *testing.T) {
	cfg, err := Load("../../deploy/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Produce.Capacity != 1000*(1<<20) || cfg.Fetch.Capacity != 1200*(1<<20) || cfg.Fetch.SafetyRatio != 0.9 {
		t.Errorf("capacities %+v %+v", cfg.Produce, cfg.Fetch)
	}
	core := cfg.Entities.Clients["core-group"]
	if core.ConsumerByteReservation == nil || *core.ConsumerByteReservation != 100*(1<<20) || *core.ConsumerByteRate != 300*(1<<20) {
		t.Errorf("core-group %+v", core)
	}
	if w := cfg.Entities.Clients[config.DefaultKey].QuotaWeight; w == nil || *w != 0.1 {
		t.Errorf("default template weight %v", w)
	}
	// Its interfaces, capacities and exempt peers are placeholders: an
	// agent started on it unedited holds no one back.
	if cfg.Mode != config.ModeShadow {
		t.Errorf("the shipped file's mode is %s, want shadow", cfg.Mode)
	}
	if len(cfg.ExemptPeers) != 1 || cfg.ExemptPeers[0].String() != "10.0.0.0/24" {
		t.Errorf("exempt peers %v", cfg.ExemptPeers)
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	d := config.Default()
	if cfg.RefreshInterval != time.Second || cfg.StaleAfter != 10*time.Second || cfg.MaxEntities != config.MaxEntityIDs || cfg.MaxUnconfiguredEntities != config.MaxEntityIDs-4096 || cfg.NewEntitiesPerPeer != 50 ||
		cfg.EntityIdleTimeout != time.Hour || cfg.MetricsAddress != "127.0.0.1:7359" || cfg.Mode != config.ModeEnforce ||
		cfg.UpdateThreshold != d.UpdateThreshold || cfg.RateWindow != 11 || cfg.MaxQueueDelay != 200*time.Millisecond ||
		cfg.Bootstrap[0] != "127.0.0.1:9092" || !cfg.KeepAttachedOnExit || cfg.MaxConnections < 256*1024 || cfg.SampleBytes < 256 || cfg.SamplesPerSecond != 200 {
		t.Errorf("defaults not applied: %+v", cfg)
	}
	if cfg.Fetch.Enabled() || !cfg.Produce.Enabled() {
		t.Errorf("fetch capacity -1 must disable fetch: %+v", cfg.Fetch)
	}
}

func TestEntityNamesKeepCaseAndDots(t *testing.T) {
	cfg, err := Parse([]byte(minimal + `
entities:
  clients:
    Billing.Consumer-V2: {quota_weight: 3}
  topic-partitions:
    Orders.EU-12: {producer_byte_rate: 1MB}
`))
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := cfg.Entities.Clients["Billing.Consumer-V2"]; !ok || *q.QuotaWeight != 3 {
		t.Errorf("client names must keep case and dots: %v", cfg.Entities.Clients)
	}
	if q, ok := cfg.Entities.TopicPartitions["Orders.EU-12"]; !ok || *q.ProducerByteRate != 1e6 {
		t.Errorf("topic-partition names must keep case and dots: %v", cfg.Entities.TopicPartitions)
	}
}

func TestEnvironmentOverrides(t *testing.T) {
	t.Setenv("SLUICE_MODE", "shadow")
	t.Setenv("SLUICE_PRODUCE_CAPACITY", "2GiB")
	t.Setenv("SLUICE_LISTENERS", "9092, 9093")
	cfg, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != config.ModeShadow || cfg.Produce.Capacity != 2*(1<<30) || len(cfg.Listeners) != 2 || cfg.Listeners[1] != 9093 {
		t.Errorf("env overrides not applied: mode %v capacity %v listeners %v", cfg.Mode, cfg.Produce.Capacity, cfg.Listeners)
	}
	t.Setenv("SLUICE_MODE", "loud")
	if _, err := Parse([]byte(minimal)); err == nil || !strings.Contains(err.Error(), `mode: "loud" is not a mode`) {
		t.Errorf("bad env value: %v", err)
	}
}

func TestInvalidFilesNameEveryKey(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		want []string
	}{
		{"reservation above limit", minimal + `
entities:
  clients:
    core-group: {consumer_byte_reservation: 400MiB, consumer_byte_rate: 300MiB}`,
			[]string{"entities.clients.core-group: consumer_byte_reservation 400MiB exceeds consumer_byte_rate 300MiB"}},
		{"unknown keys with suggestions", minimal + `
refresh_intervall: 2s
produce_: 1
entities:
  clients:
    a: {quota_wieght: 2}`,
			[]string{"refresh_intervall: unknown key (did you mean refresh_interval?)", "entities.clients.a.quota_wieght: unknown key (did you mean quota_weight?)", "produce_: unknown key (did you mean produce?)"}},
		{"bad attach_position", minimal + `
attach_position: front`, []string{`attach_position: "front" is not a position (last, first)`}},
		{"nested unknown key", minimal + `
tls: {enabeld: true}`, []string{"tls.enabeld: unknown key (did you mean enabled?)"}},
		{"bad weight", minimal + `
entities: {clients: {a: {quota_weight: 0}, b: {quota_weight: -1}}}`,
			[]string{"entities.clients.a.quota_weight: 0 must be a number > 0", "entities.clients.b.quota_weight"}},
		{"malformed units", minimal + `
entities: {clients: {a: {consumer_byte_rate: 12 parsecs}}}`, []string{`entities.clients.a.consumer_byte_rate: "12 parsecs" is not a rate`}},
		{"bad capacity unit", `
interfaces: [eth0]
listeners: [9092]
produce: {capacity: 10XB}
fetch: {capacity: 0}`, []string{`produce.capacity: "10XB" is not a rate`, "fetch.capacity: must be -1 (disabled) or positive"}},
		{"rates out of range", `
interfaces: [eth0]
listeners: [9092]
produce: {capacity: 1e300TiB, min_limit: 2Tbit}
fetch: {capacity: 10Gbit, activity_threshold: 1e400}
entities: {clients: {a: {consumer_byte_rate: 126GB, producer_byte_reservation: 1e309}}}`, []string{
			`produce.capacity: "1e300TiB" is above the largest rate sluice takes, 1Tbit (125GB/s)`,
			`produce.min_limit: "2Tbit" is above the largest rate`,
			`fetch.activity_threshold: "1e400" is not a rate`,
			`entities.clients.a.consumer_byte_rate: "126GB" is above the largest rate`,
			`entities.clients.a.producer_byte_reservation: "1e309" is not a rate`}},
		{"paths", minimal + `
pin_path: /
socket: run/sluice.sock`, []string{`pin_path: "/" must be a clean absolute path`, `socket: "run/sluice.sock" must be a clean absolute path`}},
		{"unclean pin path", minimal + `
pin_path: /sys/fs/bpf/../../var/lib`, []string{`pin_path: "/sys/fs/bpf/../../var/lib" must be a clean absolute path`}},
		{"safety ratio", `
interfaces: [eth0]
listeners: [9092]
produce: {capacity: 1GiB}
fetch: {capacity: 1GiB, safety_ratio: 1.5}`, []string{"fetch.safety_ratio: 1.5 must be in (0, 1]"}},
		{"ports", `
interfaces: [eth0]
listeners: [0, 70000, http]
produce: {capacity: 1GiB}
fetch: {capacity: 1GiB}`, []string{"listeners[0]: 0 is not a TCP port", "listeners[1]: 70000 is not a TCP port", "listeners[2]: http is not a TCP port"}},
		{"cidrs", minimal + `
exempt_peers: [10.0.0.0/33, banana, 10.1.2.3]`, []string{`exempt_peers[0]: "10.0.0.0/33" is not a CIDR`, `exempt_peers[1]: "banana" is not a CIDR`}},
		{"kafka_quotas", minimal + `
kafka_quotas: imports`, []string{`kafka_quotas: "imports" is not off or import (did you mean import?)`}},
		{"mode", minimal + `
mode: enforcing`, []string{`mode: "enforcing" is not a mode (enforce or shadow) (did you mean enforce?)`}},
		{"shaper", minimal + `
shaper: tbf`, []string{`shaper: "tbf" is not a shaper`}},
		{"latency objective", minimal + `
entities:
  clients:
    core: {produce_latency_objective: {p99: 0s}, fetch_latency_objective: 50ms}`, []string{
			"entities.clients.core.fetch_latency_objective: must be {p99: DURATION}", "entities.clients.core.produce_latency_objective.p99: 0s: want a duration more than 0 and at most 60s"}},
		{"produce_shaper", minimal + `
produce_shaper: polic`, []string{`produce_shaper: "polic" is not a produce shaper (auto, police) (did you mean police?)`}},
		{"produce_shaper with edt", minimal + `
shaper: edt
produce_shaper: police`, []string{"produce_shaper: police goes with shaper htb or auto"}},
		{"attach", minimal + `
attach: tc`, []string{`attach: "tc" is not an attach mechanism (auto, tcx, clsact)`}},
		{"replace_root_qdisc", minimal + `
replace_root_qdisc: sometimes`, []string{`replace_root_qdisc`}},
		{"metrics.web_config_file", minimal + `
metrics: {web_config_file: /nonexistent/web.yml}`, []string{`metrics.web_config_file: /nonexistent/web.yml`}},
		{"durations", minimal + `
refresh_interval: soon
stale_after: 5ms`, []string{`refresh_interval: "soon" is not a duration`, "stale_after: 5ms is below the minimum 1s"}},
		{"stale below refresh", minimal + `
refresh_interval: 2s
stale_after: 2s`, []string{"stale_after: 2s must exceed refresh_interval 2s"}},
		{"topic-partition name", minimal + `
entities: {topic-partitions: {orders: {}, orders-x: {}}}`, []string{`entities.topic-partitions.orders: "orders" is not <topic>-<partition>`, `entities.topic-partitions.orders-x`}},
		{"missing required", `
produce: {capacity: 1GiB}`, []string{"interfaces: at least one interface", "listeners: at least one", "fetch.capacity: is required"}},
		{"both disabled", `
interfaces: [eth0]
listeners: [9092]
produce: {capacity: -1}
fetch: {capacity: -1}`, []string{"both directions are disabled"}},
		{"not yaml", "interfaces: [eth0\n", []string{"(file): not valid YAML"}},
		{"sasl", minimal + `
sasl: {mechanism: GSSAPI}`, []string{`sasl.mechanism: "GSSAPI" is not PLAIN`}},
		{"integers", minimal + `
max_entities: 0
sample_bytes: 10.5`, []string{"max_entities: 0 must be a whole number in [2, 65531]", "sample_bytes: 10.5 must be a whole number"}},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.doc))
		var problems config.Problems
		if !errors.As(err, &problems) || !errors.Is(err, config.ErrInvalid) {
			t.Errorf("%s: err %v, want config.Problems", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: missing %q in:\n%v", c.name, w, err)
			}
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, err := Load(t.TempDir() + "/none.yaml"); err == nil || !os.IsNotExist(errors.Unwrap(err)) {
		t.Errorf("missing file: %v", err)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"50MiB": 50 << 20, "1.5GB": 1.5e9, "800KiB/s": 800 << 10, "1000": 1000, "7B": 7, "2 MB": 2e6} {
		got, err := config.ParseRate(in)
		if err != nil || math.Abs(got-want) > 1e-6 {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for in, want := range map[string]float64{"10Gbit": 1.25e9, "100mbit": 12.5e6, "1Tbit": config.MaxRate, "125GB": config.MaxRate, "8bit": 1} {
		if got, err := config.ParseRate(in); err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-5MiB", "NaN", "Inf", "5 furlongs", "1e300TiB", "1e309", "125.1GB", "1.01Tbit", "10Gbps"} {
		if _, err := config.ParseRate(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
	if config.FormatRate(400<<20) != "400MiB" || config.FormatRate(512) != "512B" || config.FormatRate(math.Inf(1)) != "unlimited" {
		t.Errorf("FormatRate: %s %s", config.FormatRate(400<<20), config.FormatRate(512))
	}
}

// The floors default to Kafka's largest default request inside half its
// default request timeout; a floor larger than C is refused naming the key;
// a configured limit under the floor is a warning naming the entity's key.
func TestMinLimitDefaultsRefusalAndWarnings(t *testing.T) {
	cfg, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Produce.MinLimit != 128<<10 || cfg.Fetch.MinLimit != 4<<20 {
		t.Errorf("min_limit defaults produce %v fetch %v, want 128KiB and 4MiB", cfg.Produce.MinLimit, cfg.Fetch.MinLimit)
	}
	if took := float64(config.KafkaFetchMaxBytes) / config.DefaultFetchMinLimit; took > config.KafkaRequestTimeout.Seconds()/2 {
		t.Errorf("fetch.max.bytes at the default floor takes %v s, more than half of request.timeout.ms", took)
	}
	if took := float64(config.KafkaMaxRequestSize) / config.DefaultProduceMinLimit; took > config.KafkaRequestTimeout.Seconds()/2 {
		t.Errorf("max.request.size at the default floor takes %v s, more than half of request.timeout.ms", took)
	}
	_, err = Parse([]byte(strings.Replace(minimal, "{capacity: 100MiB}", "{capacity: 100MiB, safety_ratio: 0.5, min_limit: 60MiB}", 1)))
	if err == nil || !strings.Contains(err.Error(), "produce.min_limit: 60MiB exceeds") {
		t.Errorf("a floor above C must be refused naming produce.min_limit, got %v", err)
	}
	_, err = Parse([]byte(strings.Replace(minimal, "{capacity: 100MiB}", "{capacity: 2MiB}", 1)))
	if err != nil {
		t.Errorf("the default produce floor fits 2MiB: %v", err)
	}
	_, err = Parse([]byte(strings.Replace(minimal, "{capacity: 100MiB}", "{capacity: 100KiB}", 1)))
	if err == nil || !strings.Contains(err.Error(), "(the default;") {
		t.Errorf("the default floor above a tiny capacity must be refused saying it is the default, got %v", err)
	}
	cfg, err = Parse([]byte(`
interfaces: [veth0]
listeners: [9092]
exempt_peers: [10.0.0.0/24]
produce: {capacity: 100MiB}
fetch: {capacity: 100MiB}
entities:
  clients:
    slow: {consumer_byte_rate: 1MiB, producer_byte_rate: 1MiB}
    tiny: {producer_byte_rate: 64KiB}
`))
	if err != nil {
		t.Fatal(err)
	}
	w := cfg.Warnings()
	if len(w) != 2 || w[0].Key != "entities.clients.slow.consumer_byte_rate" || w[1].Key != "entities.clients.tiny.producer_byte_rate" ||
		!strings.Contains(w[0].Message, "takes 50s of its default 30s request timeout") {
		t.Errorf("warnings %+v", w)
	}
}

// The SASL password can live outside the YAML: in a file, or a systemd
// credential named through $CREDENTIALS_DIRECTORY; never both ways at once.
func TestSASLPasswordFile(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "sasl-password")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sasl := func(extra string) string {
		return minimal + "sasl: {mechanism: PLAIN, username: sluice, " + extra + "}\n"
	}
	cfg, err := Parse([]byte(sasl("password_file: " + secret)))
	if err != nil || cfg.SASL.Password != "s3cret" {
		t.Errorf("password_file: %q, %v; want s3cret", cfg.SASL.Password, err)
	}
	t.Setenv("CREDENTIALS_DIRECTORY", dir)
	cfg, err = Parse([]byte(sasl("password_file: $CREDENTIALS_DIRECTORY/sasl-password")))
	if err != nil || cfg.SASL.Password != "s3cret" {
		t.Errorf("systemd credential: %q, %v; want s3cret", cfg.SASL.Password, err)
	}
	for _, bad := range []string{"password: inline, password_file: " + secret, "password_file: " + filepath.Join(dir, "missing")} {
		if _, err := Parse([]byte(sasl(bad))); err == nil || !strings.Contains(err.Error(), "sasl.password_file") {
			t.Errorf("%s: %v, want an error naming sasl.password_file", bad, err)
		}
	}
}

func TestLogFormat(t *testing.T) {
	if cfg, err := Parse([]byte(minimal)); err != nil || cfg.LogFormat != config.LogText {
		t.Errorf("default log_format %q, %v; want text", cfg.LogFormat, err)
	}
	if cfg, err := Parse([]byte(minimal + "log_format: json\n")); err != nil || cfg.LogFormat != config.LogJSON {
		t.Errorf("log_format json: %q, %v", cfg.LogFormat, err)
	}
	if _, err := Parse([]byte(minimal + "log_format: xml\n")); err == nil || !strings.Contains(err.Error(), "log_format") {
		t.Errorf("log_format xml: %v, want an error naming the key", err)
	}
}

// Per-entity series default to configured entities only; bad values are
// refused naming the key.
func TestMetricsSection(t *testing.T) {
	cfg, err := Parse([]byte(minimal))
	if err != nil || cfg.Metrics != (config.Metrics{Entities: config.MetricsConfigured, MaxEntitySeries: 1000}) {
		t.Errorf("default metrics %+v, %v", cfg.Metrics, err)
	}
	if !strings.HasSuffix(cfg.MetricsAddress, ":"+config.DefaultMetricsPort) || config.DefaultMetricsPort == "9464" {
		t.Errorf("default metrics_address %s", cfg.MetricsAddress)
	}
	cfg, err = Parse([]byte(minimal + "metrics: {entities: all, max_entity_series: 50}\n"))
	if err != nil || cfg.Metrics != (config.Metrics{Entities: config.MetricsAll, MaxEntitySeries: 50}) {
		t.Errorf("metrics all/50: %+v, %v", cfg.Metrics, err)
	}
	for bad, key := range map[string]string{
		"metrics: {entities: every}\n":        "metrics.entities",
		"metrics: {max_entity_series: -1}\n":  "metrics.max_entity_series",
		"metrics: {max_entity_series: 1e9}\n": "metrics.max_entity_series",
		"metrics: {series: 10}\n":             "metrics.series",
	} {
		if _, err := Parse([]byte(minimal + bad)); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: %v, want an error naming %s", bad, err, key)
		}
	}
}

// The template is spelled as Kafka spells it; "default" is an ordinary
// client-id, configured like any other, with a warning for configurations
// written before the change.
func TestDefaultTemplateIsKafkasSpelling(t *testing.T) {
	cfg, err := Parse([]byte(`interfaces: [eth0]
listeners: [9092]
exempt_peers: [10.0.0.0/24]
produce: {capacity: -1}
fetch: {capacity: 100MB}
entities:
  clients:
    <default>: {quota_weight: 0.5}
    default:   {consumer_byte_rate: 20MB}
`))
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Entities.Clients["<default>"].QuotaWeight; w == nil || *w != 0.5 {
		t.Errorf("template weight %v", w)
	}
	if r := cfg.Entities.Clients["default"].ConsumerByteRate; r == nil || *r != 20e6 {
		t.Errorf("client default's limit %v", r)
	}
	if n := cfg.Entities.Configured(); n != 1 {
		t.Errorf("%d configured entities, want 1 (the client named default; the template is not one)", n)
	}
	w := cfg.Warnings()
	if len(w) != 1 || w[0].Key != "entities.clients.default" || !strings.Contains(w[0].Message, `"<default>"`) {
		t.Errorf("warnings %+v", w)
	}
	_, err = Parse([]byte("interfaces: [eth0]\nlisteners: [9092]\nproduce: {capacity: -1}\nfetch: {capacity: 100MB}\nentities:\n  topic-partitions:\n    default: {consumer_byte_rate: 2MB}\n"))
	if err == nil || !strings.Contains(err.Error(), "entities.topic-partitions.default") || !strings.Contains(err.Error(), `"<default>"`) {
		t.Errorf("topic-partitions.default: %v", err)
	}
}

// A malformed client-id pattern is refused naming its key; a good one
// is accepted as a clients entry like any other.
func TestClientPatternKeys(t *testing.T) {
	cfg, err := Parse([]byte(minimal + "entities: {clients: {'consumer-orders-*': {consumer_byte_rate: 1MiB}}}\n"))
	if err != nil || cfg.Entities.Clients["consumer-orders-*"].ConsumerByteRate == nil {
		t.Errorf("pattern entity: %+v, %v", cfg.Entities.Clients, err)
	}
	if !config.IsClientPattern("consumer-orders-*") || config.IsClientPattern("consumer-orders-1") {
		t.Error("config.IsClientPattern")
	}
	_, err = Parse([]byte(minimal + "entities: {clients: {'orders-[': {consumer_byte_rate: 1MiB}}}\n"))
	if err == nil || !strings.Contains(err.Error(), "entities.clients.orders-[") || !strings.Contains(err.Error(), "pattern") {
		t.Errorf("malformed pattern: %v, want an error naming the key", err)
	}
}

// Listeners take Kafka's protocol names ({port, protocol}; a bare port is
// PLAINTEXT), and users hold their own quota beside <user, client-id> ones.
func TestListenerProtocolsAndUsers(t *testing.T) {
	c, err := Parse([]byte(`
interfaces: [eth0]
listeners: [9092, {port: 9093, protocol: SASL_PLAINTEXT}, {port: 9094, protocol: SSL}]
produce: {capacity: -1}
fetch: {capacity: 1GiB}
entities:
  users:
    alice:
      consumer_byte_rate: 10MiB
      clients:
        reports: {consumer_byte_rate: 2MiB}
        '<default>': {quota_weight: 2}
    '<default>': {consumer_byte_rate: 5MiB}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{c.Protocol(9092), c.Protocol(9093), c.Protocol(9094), c.Protocol(1)}; fmt.Sprint(got) != "[PLAINTEXT SASL_PLAINTEXT SSL PLAINTEXT]" {
		t.Errorf("protocols %v", got)
	}
	if fmt.Sprint(c.Listeners) != "[9092 9093 9094]" {
		t.Errorf("listeners %v", c.Listeners)
	}
	alice := c.Entities.Users["alice"]
	if *alice.ConsumerByteRate != 10<<20 || *alice.Clients["reports"].ConsumerByteRate != 2<<20 || *alice.Clients[config.DefaultKey].QuotaWeight != 2 {
		t.Errorf("alice %+v", alice)
	}
	if n := c.Entities.Configured(); n != 3 {
		t.Errorf("configured %d, want 3 (alice, <alice, reports> and the SSL listener's entity; templates are not entities)", n)
	}
	warnings := fmt.Sprint(c.Warnings())
	if !strings.Contains(warnings, "listeners[2]: port 9094 is SSL: its requests are encrypted, so every connection on it shares the entity listener:9094") || strings.Contains(warnings, "entities.users") {
		t.Errorf("warnings %s: want the SSL listener's and none about users", warnings)
	}
	for _, bad := range []struct{ yaml, want string }{
		{`listeners: [{port: 9093, protocol: SASL_PLAINTXT}]`, `listeners[0].protocol: "SASL_PLAINTXT" is not a listener protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) (did you mean SASL_PLAINTEXT?)`},
		{`listeners: [{port: 9093, protocl: SSL}]`, `listeners[0].protocl: unknown key (did you mean protocol?)`},
		{`listeners: [9092, {port: 9092, protocol: SSL}]`, `listeners[1]: port 9092 is listed twice`},
		{"listeners: [9092]\nentities: {users: {bob: {clients: {app: {consumer_byte_rat: 1MiB}}}}}", `entities.users.bob.clients.app.consumer_byte_rat: unknown key (did you mean consumer_byte_rate?)`},
		{"listeners: [9092]\nentities: {users: {bob: {quota_weight: -1}}}", `entities.users.bob.quota_weight: -1 must be a number > 0`},
	} {
		_, err := Parse([]byte("interfaces: [eth0]\nproduce: {capacity: -1}\nfetch: {capacity: 1GiB}\n" + bad.yaml))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.yaml, err, bad.want)
		}
	}
}

// entities.peers takes CIDRs and addresses (canonical keys, one spelling
// per prefix); entities.listeners takes TLS listener ports, and every TLS
// listener has an entity whether configured or not.
func TestPeersAndListenerEntities(t *testing.T) {
	c, err := Parse([]byte(`
interfaces: [eth0]
listeners: [9092, {port: 9093, protocol: SSL}, {port: 9094, protocol: SASL_SSL}]
produce: {capacity: 100MB}
fetch: {capacity: 100MB}
entities:
  peers:
    198.18.1.7/24: {consumer_byte_rate: 4MB}
    198.18.2.9: {consumer_byte_rate: 6MB}
    2001:db8::/32: {quota_weight: 2}
    '<default>': {quota_weight: 0.5}
  listeners:
    9093: {consumer_byte_rate: 2MB}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(maps.Keys(c.Entities.Peers))
	if fmt.Sprint(got) != "[198.18.1.0/24 198.18.2.9/32 2001:db8::/32 <default>]" {
		t.Errorf("peer keys %v", got)
	}
	if *c.Entities.Peers["198.18.1.0/24"].ConsumerByteRate != 4e6 || *c.Entities.Listeners["9093"].ConsumerByteRate != 2e6 {
		t.Errorf("peers %+v listeners %+v", c.Entities.Peers, c.Entities.Listeners)
	}
	if q, ok := c.Entities.Listeners["9094"]; !ok || q != (config.Quota{}) {
		t.Errorf("the unconfigured SASL_SSL listener has no entity: %+v", c.Entities.Listeners)
	}
	if _, ok := c.Entities.Listeners["9092"]; ok {
		t.Error("a PLAINTEXT listener got a listener entity")
	}
	if n := c.Entities.Configured(); n != 5 {
		t.Errorf("configured %d, want 5 (three peers, two config.TLS listeners)", n)
	}
	if fmt.Sprint(c.TLSListeners()) != "[9093 9094]" {
		t.Errorf("config.TLS listeners %v", c.TLSListeners())
	}
	if w := fmt.Sprint(c.Warnings()); strings.Contains(w, "listeners[") {
		t.Errorf("warnings %s: peers are configured, so no config.TLS listener warning", w)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"entities: {peers: {198.18.300.0/24: {}}}", `entities.peers.198.18.300.0/24: "198.18.300.0/24" is not a CIDR or an address`},
		{"entities: {peers: {10.0.0.1/8: {}, 10.0.0.0/8: {}}}", `entities.peers.10.0.0.1/8: the same prefix as "10.0.0.0/8" (10.0.0.0/8)`},
		// An IPv4-mapped prefix and its IPv4 form: the data path and Go
		// picked different ones (issue #46).
		{"entities: {peers: {10.0.0.0/8: {}, '::ffff:10.0.0.0/104': {}}}", `entities.peers.::ffff:10.0.0.0/104: the same prefix as "10.0.0.0/8" (10.0.0.0/8)`},
		{"entities: {peers: {'::ffff:198.18.0.2': {}, 198.18.0.2/32: {}}}", `entities.peers.::ffff:198.18.0.2: the same prefix as "198.18.0.2/32" (198.18.0.2/32)`},
		{"entities: {peers: {10.0.0.0/8: {consumer_byte_rat: 1MB}}}", `entities.peers.10.0.0.0/8.consumer_byte_rat: unknown key`},
		{"entities: {listeners: {9092: {consumer_byte_rate: 1MB}}}", `entities.listeners.9092: listener 9092 is PLAINTEXT`},
		{"entities: {listeners: {9999: {}}}", `entities.listeners.9999: not a port in listeners`},
	} {
		_, err := Parse([]byte("interfaces: [eth0]\nlisteners: [9092, {port: 9093, protocol: SSL}]\nproduce: {capacity: -1}\nfetch: {capacity: 1GiB}\n" + bad.yaml))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.yaml, err, bad.want)
		}
	}
	// Peers without a TLS listener match nothing: said so.
	c, err = Parse([]byte(minimal + "entities: {peers: {10.0.0.0/8: {consumer_byte_rate: 1MB}}}\n"))
	if err != nil || !strings.Contains(fmt.Sprint(c.Warnings()), "entities.peers: peers attribute connections on SSL and SASL_SSL listeners only") {
		t.Errorf("%v, warnings %v", err, c.Warnings())
	}
}

// A value from the environment that is refused names the variable that
// set it, as well as the key.
func TestRefusedEnvironmentOverrideNamesItsVariable(t *testing.T) {
	t.Setenv("SLUICE_PRODUCE_CAPACITY", "1e300TiB")
	t.Setenv("SLUICE_EXEMPT_PEERS", "10.0.0.0/8,banana")
	_, err := Parse([]byte(minimal))
	for _, want := range []string{
		`produce.capacity: "1e300TiB" is above the largest rate sluice takes, 1Tbit (125GB/s) (from the environment: SLUICE_PRODUCE_CAPACITY)`,
		`exempt_peers[1]: "banana" is not a CIDR or an address (from the environment: SLUICE_EXEMPT_PEERS)`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to hold %q", err, want)
		}
	}
	// Keys the file set say nothing of the environment.
	os.Unsetenv("SLUICE_PRODUCE_CAPACITY")
	os.Unsetenv("SLUICE_EXEMPT_PEERS")
	_, err = Parse([]byte(minimal + "mode: enforcing\n"))
	if err == nil || strings.Contains(err.Error(), "environment") {
		t.Errorf("file key's error %v", err)
	}
	if EnvName("entities.clients.a.producer_byte_rate") != "" || EnvName("produce.min_limit") != "SLUICE_PRODUCE_MIN_LIMIT" {
		t.Errorf("EnvName: %q %q", EnvName("entities.clients.a.producer_byte_rate"), EnvName("produce.min_limit"))
	}
}

// Files the metadata client will read are read at parse, so check-config
// and a reload refuse what the client could not use, naming the key.
func TestFilesTheClientReadsAreCheckedAtParse(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600)
	for _, c := range []struct{ name, yaml, want string }{
		{"missing ca", "tls: {enabled: true, ca_file: " + filepath.Join(dir, "absent.pem") + "}", "tls.ca_file: open " + filepath.Join(dir, "absent.pem") + ": no such file"},
		{"ca not pem", "tls: {enabled: true, ca_file: " + notPEM + "}", "tls.ca_file: " + notPEM + " holds no PEM certificate"},
		{"bad key pair", "tls: {enabled: true, cert_file: " + notPEM + ", key_file: " + notPEM + "}", "tls.cert_file: tls: failed to find any PEM data"},
		{"password file is a directory", "sasl: {mechanism: PLAIN, username: u, password_file: " + dir + "}", "sasl.password_file: read " + dir + ": is a directory"},
	} {
		_, err := Parse([]byte(minimal + c.yaml + "\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// An enforcing configuration with no exempt peers governs replication:
// warned, naming the key; shadow (which holds nothing back) is not.
func TestEmptyExemptPeersIsWarned(t *testing.T) {
	for mode, want := range map[string]bool{"enforce": true, "shadow": false} {
		cfg, err := Parse([]byte(minimal + "mode: " + mode + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		got := slices.ContainsFunc(cfg.Warnings(), func(p config.Problem) bool { return p.Key == "exempt_peers" })
		if got != want {
			t.Errorf("mode %s: exempt_peers warned %v, want %v", mode, got, want)
		}
	}
}

// A latency objective reads as its p99 on the entity's quota.
func TestLatencyObjectiveReads(t *testing.T) {
	cfg, err := Parse([]byte(minimal + `
entities:
  clients:
    core: {producer_byte_reservation: 10MB, produce_latency_objective: {p99: 50ms}}
`))
	if err != nil {
		t.Fatal(err)
	}
	q := cfg.Entities.Clients["core"]
	if q.ProduceLatencyObjective == nil || *q.ProduceLatencyObjective != 50*time.Millisecond || q.FetchLatencyObjective != nil {
		t.Errorf("core's objectives: %v %v", q.ProduceLatencyObjective, q.FetchLatencyObjective)
	}
}

// attach_position: last unless the file says first (#48 item 5).
func TestAttachPosition(t *testing.T) {
	cfg, err := Parse([]byte(minimal))
	if err != nil || cfg.AttachPosition != config.AttachLast {
		t.Errorf("default attach_position %q, %v; want last", cfg.AttachPosition, err)
	}
	cfg, err = Parse([]byte(minimal + "attach_position: first\n"))
	if err != nil || cfg.AttachPosition != config.AttachFirst {
		t.Errorf("attach_position: first read as %q, %v", cfg.AttachPosition, err)
	}
}
