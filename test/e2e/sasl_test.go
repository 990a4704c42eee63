package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/test/harness"
)

// SASL users on a SASL_PLAINTEXT listener, with two client libraries:
// alice logs in with PLAIN from franz-go and from kcat (librdkafka), under
// two client-ids that share her user quota; bob logs in with SCRAM-SHA-512
// from kcat and from franz-go, under two client-ids sharing his. kfake
// authenticates every connection (the agent's metadata client too) and
// enforces no quota. Rates from the broker sockets' tcp_info, per process.
// Afterwards every file the agent wrote and everything it serves (log,
// status socket, /metrics) is searched for the users' passwords and must
// not hold them.
func TestScenarioSASLUsers(t *testing.T) {
	const (
		alicePassword = "alice-Pw-7f3c91"
		bobPassword   = "bob-Pw-4e2a08"
		agentPassword = "sluice-Pw-0b77"
		aliceLimit    = 8e6
		bobLimit      = 6e6
	)
	w := world(t, harness.Options{Topics: []string{"orders"}, SASL: []harness.SASLUser{
		{Mechanism: "PLAIN", User: "alice", Password: alicePassword},
		{Mechanism: "SCRAM-SHA-512", User: "bob", Password: bobPassword},
		{Mechanism: "PLAIN", User: "sluice", Password: agentPassword},
	}})
	a := start(t, w, harness.Config{FetchCapacity: "40MB", Listeners: "[{port: 9092, protocol: SASL_PLAINTEXT}]",
		Extra: "sasl: {mechanism: PLAIN, username: sluice, password: " + agentPassword + "}\n" +
			"entities:\n  users:\n    alice: {consumer_byte_rate: " + itoa(aliceLimit) + "}\n" +
			"    bob: {consumer_byte_rate: " + itoa(bobLimit) + "}\n"})
	defer a.Stop()
	login := func(mechanism, user, password string) []string {
		return []string{"-sasl-mechanism", mechanism, "-sasl-user", user, "-sasl-password", password}
	}
	aliceFranz := client(t, w, harness.ClientSpec{Name: "alice-franz", Lib: "franz", Mode: "consume", ClientID: "alice-app-1", Topic: "orders",
		Args: login("PLAIN", "alice", alicePassword)})
	aliceKcat := kcatConsumer(t, w, "alice-kcat", "alice-app-2", "orders", "PLAIN", "alice", alicePassword)
	bobKcat := kcatConsumer(t, w, "bob-kcat", "bob-app-1", "orders", "SCRAM-SHA-512", "bob", bobPassword)
	bobFranz := client(t, w, harness.ClientSpec{Name: "bob-franz", Lib: "franz", Mode: "consume", ClientID: "bob-app-2", Topic: "orders",
		Args: login("SCRAM-SHA-512", "bob", bobPassword)})
	clients := []*harness.Client{aliceFranz, aliceKcat, bobKcat, bobFranz}
	kernel, own := metered(t, w, 1, clients, []harness.Ref{{Kind: "user", Name: "alice"}, {Kind: "user", Name: "bob"}})
	aliceTogether, bobTogether := kernel[0]+kernel[1], kernel[2]+kernel[3]

	// Everything the agent wrote or serves.
	var found []string
	var served bytes.Buffer
	if s, err := w.Status(); err == nil {
		json.NewEncoder(&served).Encode(s)
	} else {
		t.Errorf("status: %v", err)
	}
	if m, err := w.ScrapeMetrics(); err == nil {
		served.Write(m)
	} else {
		t.Errorf("metrics: %v", err)
	}
	logData, _ := os.ReadFile(a.Log)
	served.Write(logData)
	written, _ := filepath.Glob(filepath.Join(w.Dir, "*"))
	scanned := 3
	for _, f := range written {
		if filepath.Ext(f) == ".yaml" { // the configuration holds the agent's own password, by design
			continue
		}
		if data, err := os.ReadFile(f); err == nil {
			served.Write(data)
			scanned++
		}
	}
	for _, secret := range []string{alicePassword, bobPassword} {
		if bytes.Contains(served.Bytes(), []byte(secret)) {
			found = append(found, secret)
		}
	}
	errs, ok := noErrors(clients...)
	var gaveUp []string
	for _, c := range clients {
		if c.ExitedEarly() {
			gaveUp = append(gaveUp, c.Name)
		}
	}
	// Both libraries really consumed (a client that never logged in would
	// leave the other alone under the user's limit).
	eachMoved := kernel[0] >= 0.1*aliceLimit && kernel[1] >= 0.1*aliceLimit && kernel[2] >= 0.1*bobLimit && kernel[3] >= 0.1*bobLimit
	record(t, Result{
		Name: "sasl-users",
		Pass: within(aliceTogether, aliceLimit, 0.10) && within(bobTogether, bobLimit, 0.10) && eachMoved && len(found) == 0 && ok && len(gaveUp) == 0 &&
			bytes.Contains(served.Bytes(), []byte(`"name":"alice"`)),
		Measured: map[string]any{"alice_together_bps": aliceTogether, "alice_franz_kcat_bps": kernel[:2], "bob_together_bps": bobTogether, "bob_kcat_franz_bps": kernel[2:],
			"clients_that_exited": gaveUp,
			"measured_at":         meteredAt, "client_errors": errs, "sluice_vs_kernel": differences([]float64{aliceTogether, bobTogether}, own),
			"secret_scan": map[string]any{"sources": scanned, "bytes": served.Len(), "passwords_found": len(found)}},
		Expected: map[string]any{"alice_together_bps": aliceLimit, "bob_together_bps": bobLimit, "tolerance": 0.10, "client_errors": 0,
			"each_client_at_least": "10 % of its user's limit", "passwords_found": 0},
	})
}

// kcatConsumer runs kcat (librdkafka) as a consumer of partition 0 from its
// beginning, logged in with SASL on the world's SASL_PLAINTEXT listener. It
// prints only each record's offset, which is discarded: the judge is the
// broker sockets' tcp_info for its pid.
func kcatConsumer(t *testing.T, w *harness.World, name, clientID, topic, mechanism, user, password string) *harness.Client {
	t.Helper()
	c, err := w.StartCommand(name, "kcat", "-C", "-b", w.Bootstrap(), "-t", topic, "-p", "0", "-o", "beginning", "-q", "-f", `%o\n`,
		"-X", "client.id="+clientID, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms="+mechanism,
		"-X", "sasl.username="+user, "-X", "sasl.password="+password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}
