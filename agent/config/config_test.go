package config

import (
	"errors"
	"math"
	"os"
	"path/filepath"
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
	if w := cfg.Entities.Clients[DefaultKey].QuotaWeight; w == nil || *w != 0.1 {
		t.Errorf("default template weight %v", w)
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
	d := Default()
	if cfg.RefreshInterval != time.Second || cfg.StaleAfter != 10*time.Second || cfg.MaxEntities != MaxEntityIDs || cfg.MaxUnconfiguredEntities != MaxEntityIDs-4096 || cfg.NewEntitiesPerPeer != 50 ||
		cfg.EntityIdleTimeout != time.Hour || cfg.MetricsAddress != "127.0.0.1:7359" || cfg.Mode != ModeEnforce ||
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
	if cfg.Mode != ModeShadow || cfg.Produce.Capacity != 2*(1<<30) || len(cfg.Listeners) != 2 || cfg.Listeners[1] != 9093 {
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
		{"mode", minimal + `
mode: enforcing`, []string{`mode: "enforcing" is not a mode (enforce or shadow) (did you mean enforce?)`}},
		{"shaper", minimal + `
shaper: tbf`, []string{`shaper: "tbf" is not a shaper`}},
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
		var problems Problems
		if !errors.As(err, &problems) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want Problems", c.name, err)
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
		got, err := ParseRate(in)
		if err != nil || math.Abs(got-want) > 1e-6 {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-5MiB", "NaN", "Inf", "5 furlongs"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
	if FormatRate(400<<20) != "400MiB" || FormatRate(512) != "512B" || FormatRate(math.Inf(1)) != "unlimited" {
		t.Errorf("FormatRate: %s %s", FormatRate(400<<20), FormatRate(512))
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
	if took := float64(KafkaFetchMaxBytes) / DefaultFetchMinLimit; took > KafkaRequestTimeout.Seconds()/2 {
		t.Errorf("fetch.max.bytes at the default floor takes %v s, more than half of request.timeout.ms", took)
	}
	if took := float64(KafkaMaxRequestSize) / DefaultProduceMinLimit; took > KafkaRequestTimeout.Seconds()/2 {
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
	if cfg, err := Parse([]byte(minimal)); err != nil || cfg.LogFormat != LogText {
		t.Errorf("default log_format %q, %v; want text", cfg.LogFormat, err)
	}
	if cfg, err := Parse([]byte(minimal + "log_format: json\n")); err != nil || cfg.LogFormat != LogJSON {
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
	if err != nil || cfg.Metrics != (Metrics{Entities: MetricsConfigured, MaxEntitySeries: 1000}) {
		t.Errorf("default metrics %+v, %v", cfg.Metrics, err)
	}
	if !strings.HasSuffix(cfg.MetricsAddress, ":"+DefaultMetricsPort) || DefaultMetricsPort == "9464" {
		t.Errorf("default metrics_address %s", cfg.MetricsAddress)
	}
	cfg, err = Parse([]byte(minimal + "metrics: {entities: all, max_entity_series: 50}\n"))
	if err != nil || cfg.Metrics != (Metrics{Entities: MetricsAll, MaxEntitySeries: 50}) {
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
	if !IsClientPattern("consumer-orders-*") || IsClientPattern("consumer-orders-1") {
		t.Error("IsClientPattern")
	}
	_, err = Parse([]byte(minimal + "entities: {clients: {'orders-[': {consumer_byte_rate: 1MiB}}}\n"))
	if err == nil || !strings.Contains(err.Error(), "entities.clients.orders-[") || !strings.Contains(err.Error(), "pattern") {
		t.Errorf("malformed pattern: %v, want an error naming the key", err)
	}
}
