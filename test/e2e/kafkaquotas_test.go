package e2e

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/sluice-dev/sluice/agent/status"
	"github.com/sluice-dev/sluice/test/harness"
)

// Kafka's quota store as a source (kafka_quotas: import): a consumer runs
// unquota'd, then an administrator sets its consumer_byte_rate through the
// admin API (what kafka-configs.sh --alter --entity-type clients does).
// Within one metadata_refresh (2 s in these worlds) plus one control cycle
// the broker's sockets show the consumer held to the new quota; kfake
// stores quotas and never enforces them, so only sluice can hold it.
func TestScenarioKafkaQuotaImport(t *testing.T) {
	w := world(t, harness.Options{Topics: []string{"orders"}})
	const limit = 8e6
	a := start(t, w, harness.Config{FetchCapacity: "40MB", Extra: "kafka_quotas: import\n"})
	defer a.Stop()
	consumer := client(t, w, harness.ClientSpec{Name: "orders-franz", Lib: "franz", Mode: "consume", ClientID: "orders-app", Topic: "orders"})
	before, _ := metered(t, w, 1, []*harness.Client{consumer}, nil)

	trace := w.TraceClient(1, 100*time.Millisecond, consumer)
	altered := alterConsumerQuota(t, w, "orders-app", limit)
	// One import (metadata_refresh) and one cycle (refresh_interval), then a
	// second in which to measure.
	deadline := altered.Add(2*time.Second + time.Second)
	time.Sleep(time.Until(deadline.Add(time.Second)))
	points, err := trace.Stop()
	if err != nil {
		t.Fatal(err)
	}
	inTime := harness.TraceRate(points, deadline, deadline.Add(time.Second))
	// For the record: when the consumer first ran at the quota (a 500 ms
	// window at most 10 % above it), counted from the alter.
	heldAfter := -1.0
	for _, p := range points {
		if p.At.After(altered) && harness.TraceRate(points, p.At, p.At.Add(500*time.Millisecond)) <= 1.10*limit {
			heldAfter = p.At.Sub(altered).Seconds()
			break
		}
	}
	held, _ := metered(t, w, 1, []*harness.Client{consumer}, []harness.Ref{{Kind: "client", Name: "orders-app"}})
	var sources status.SourcesView
	var imports uint64
	if s, err := w.Status(); err == nil {
		for _, e := range s.Find("client:orders-app") {
			sources = e.Sources
		}
		if s.KafkaQuotas != nil {
			imports = s.KafkaQuotas.Imports
		}
	}
	errs, ok := noErrors(consumer)
	record(t, Result{
		Name: "kafka-quota-import",
		Pass: before[0] >= 2*limit && inTime <= 1.10*limit && within(held[0], limit, 0.10) && ok,
		Measured: map[string]any{"before_bps": before[0], "second_after_deadline_bps": inTime, "held_bps": held[0],
			"deadline_after_alter_s": deadline.Sub(altered).Seconds(), "held_from_s_after_alter": heldAfter, "measured_at": meteredAt, "client_errors": errs,
			"explain_sources": sources, "imports": imports},
		Expected: map[string]any{"before_min_bps": 2 * limit, "second_after_deadline_max_bps": 1.10 * limit,
			"held_bps": limit, "tolerance": 0.10, "client_errors": 0},
	})
}

// alterConsumerQuota sets a client-id's consumer_byte_rate through the
// broker's admin API from the client namespace, and returns when it did.
func alterConsumerQuota(t *testing.T, w *harness.World, clientID string, rate float64) time.Time {
	t.Helper()
	return alterQuota(t, w, kadm.ClientQuotaEntity{{Type: "client-id", Name: &clientID}}, rate)
}

// alterQuota sets an entity's consumer_byte_rate (what kafka-configs.sh
// --alter --add-config consumer_byte_rate=… does), logging in with opts.
func alterQuota(t *testing.T, w *harness.World, e kadm.ClientQuotaEntity, rate float64, opts ...kgo.Opt) time.Time {
	t.Helper()
	if err := harness.AlterClientQuota(w.Pair.Client.Dial, []string{w.Bootstrap()}, e, "consumer_byte_rate", rate, opts...); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// User quotas kept in Kafka (kafka-configs.sh --entity-type users) are
// imported too: with nothing about users in the file, carol's quota set
// through the admin API holds her two client-ids together on a
// SASL_PLAINTEXT listener, and dave, whom only Kafka's users <default>
// names, is held to that. Judged from the broker sockets' tcp_info.
func TestScenarioKafkaUserQuotaImport(t *testing.T) {
	const (
		carolLimit   = 7e6
		defaultLimit = 5e6
		password     = "carol-Pw-91d2"
		agentPw      = "sluice-Pw-55e1"
	)
	w := world(t, harness.Options{Topics: []string{"orders"}, SASL: []harness.SASLUser{
		{Mechanism: "PLAIN", User: "carol", Password: password},
		{Mechanism: "PLAIN", User: "dave", Password: password},
		{Mechanism: "PLAIN", User: "sluice", Password: agentPw},
	}})
	admin := kgo.SASL(plain.Auth{User: "sluice", Pass: agentPw}.AsMechanism())
	carol := "carol"
	alterQuota(t, w, kadm.ClientQuotaEntity{{Type: "user", Name: &carol}}, carolLimit, admin)
	alterQuota(t, w, kadm.ClientQuotaEntity{{Type: "user"}}, defaultLimit, admin) // --entity-default
	a := start(t, w, harness.Config{FetchCapacity: "40MB", Listeners: "[{port: 9092, protocol: SASL_PLAINTEXT}]",
		Extra: "kafka_quotas: import\nsasl: {mechanism: PLAIN, username: sluice, password: " + agentPw + "}\n"})
	defer a.Stop()
	consumer := func(name, user, clientID string, more ...string) *harness.Client {
		return client(t, w, harness.ClientSpec{Name: name, Lib: "franz", Mode: "consume", ClientID: clientID, Topic: "orders",
			Args: append([]string{"-sasl-mechanism", "PLAIN", "-sasl-user", user, "-sasl-password", password}, more...)})
	}
	c1, c2 := consumer("carol-1", "carol", "carol-app-1"), consumer("carol-2", "carol", "carol-app-2")
	d := consumer("dave", "dave", "dave-app", twoReaders...)
	kernel, own := metered(t, w, 1, []*harness.Client{c1, c2, d}, []harness.Ref{{Kind: "user", Name: "carol"}, {Kind: "user", Name: "dave"}})
	carolTogether := kernel[0] + kernel[1]
	var sources map[string]status.SourcesView
	if s, err := w.Status(); err == nil {
		sources = map[string]status.SourcesView{}
		for _, name := range []string{"user:carol", "user:dave"} {
			for _, e := range s.Find(name) {
				sources[name] = e.Sources
			}
		}
	}
	errs, ok := noErrors(c1, c2, d)
	record(t, Result{
		Name: "kafka-user-quota-import",
		Pass: within(carolTogether, carolLimit, 0.05) && within(kernel[2], defaultLimit, 0.05) && ok,
		Measured: map[string]any{"carol_together_bps": carolTogether, "carol_each_bps": kernel[:2], "dave_bps": kernel[2],
			"client_errors": errs, "measured_at": meteredAt, "explain_sources": sources,
			"sluice_vs_kernel": differences([]float64{carolTogether, kernel[2]}, own)},
		Expected: map[string]any{"carol_together_bps": carolLimit, "dave_bps": defaultLimit, "tolerance": 0.05, "client_errors": 0},
	})
}
