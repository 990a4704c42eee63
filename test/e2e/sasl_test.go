package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/test/harness"
)

// SASL users on a SASL_PLAINTEXT listener: alice logs in with PLAIN from
// two client-ids that share her user quota; bob logs in with
// SCRAM-SHA-512 and has his own. kfake authenticates every connection (the
// agent's metadata client too) and enforces no quota. Rates from the
// broker sockets' tcp_info. Afterwards every file the agent wrote and
// everything it serves (log, status socket, /metrics) is searched for the
// users' passwords and must not hold them.
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
	alice1 := client(t, w, harness.ClientSpec{Name: "alice-1", Lib: "franz", Mode: "consume", ClientID: "alice-app-1", Topic: "orders",
		Args: login("PLAIN", "alice", alicePassword)})
	alice2 := client(t, w, harness.ClientSpec{Name: "alice-2", Lib: "franz", Mode: "consume", ClientID: "alice-app-2", Topic: "orders",
		Args: login("PLAIN", "alice", alicePassword)})
	bob := client(t, w, harness.ClientSpec{Name: "bob", Lib: "franz", Mode: "consume", ClientID: "bob-app", Topic: "orders",
		Args: login("SCRAM-SHA-512", "bob", bobPassword)})
	kernel, own := metered(t, w, 1, []*harness.Client{alice1, alice2, bob},
		[]harness.Ref{{Kind: "user", Name: "alice"}, {Kind: "user", Name: "bob"}})
	aliceTogether := kernel[0] + kernel[1]

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
	errs, ok := noErrors(alice1, alice2, bob)
	record(t, Result{
		Name: "sasl-users",
		Pass: within(aliceTogether, aliceLimit, 0.10) && within(kernel[2], bobLimit, 0.10) && len(found) == 0 && ok &&
			bytes.Contains(served.Bytes(), []byte(`"name":"alice"`)),
		Measured: map[string]any{"alice_together_bps": aliceTogether, "alice_each_bps": kernel[:2], "bob_bps": kernel[2],
			"measured_at": meteredAt, "client_errors": errs, "sluice_vs_kernel": differences([]float64{aliceTogether, kernel[2]}, own),
			"secret_scan": map[string]any{"sources": scanned, "bytes": served.Len(), "passwords_found": len(found)}},
		Expected: map[string]any{"alice_together_bps": aliceLimit, "bob_bps": bobLimit, "tolerance": 0.10, "client_errors": 0,
			"passwords_found": 0},
	})
}
