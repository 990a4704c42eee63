package agent_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Signals at the edges of the agent's life: a SIGHUP while it loads and
// attaches (systemd's reload can come at any time) must not kill it, and
// is applied as a reload once it runs; file changes while it stops start
// no reload on the closing agent, and the stop leaves nothing attached.
func TestAgentIntegrationSignalsDuringSetupAndStop(t *testing.T) {
	w := newWorld(t)
	cfgPath := config(w, false)
	a, err := w.LaunchAgent(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	logHas := func(s string) bool { data, _ := os.ReadFile(a.Log); return strings.Contains(string(data), s) }

	// From the agent's first log line (configuration read, setup about to
	// start) until it is ready, a SIGHUP every 2 ms: loading the data path
	// alone takes longer, so many land in setup.
	deadline := time.Now().Add(30 * time.Second)
	for !logHas(`msg="setting up"`) {
		select {
		case <-a.Exited():
			data, _ := os.ReadFile(a.Log)
			t.Fatalf("agent exited before setup:\n%s", data)
		case <-time.After(time.Millisecond): // polling its log, bounded by the deadline
		}
		if time.Now().After(deadline) {
			t.Fatal("agent never logged its setup")
		}
	}
	sent := 0
	for {
		if _, err := os.Stat(a.ReadyFile); err == nil {
			break
		}
		select {
		case <-a.Exited():
			data, _ := os.ReadFile(a.Log)
			t.Fatalf("agent died after %d SIGHUPs during setup:\n%s", sent, data)
		case <-time.After(2 * time.Millisecond):
		}
		if a.Cmd.Process.Signal(syscall.SIGHUP) == nil {
			sent++
		}
		if time.Now().After(deadline) {
			t.Fatal("agent not ready after 30 s")
		}
	}
	if err := a.WaitReady(); err != nil {
		t.Fatal(err)
	}
	// A SIGHUP received during setup is a reload once the agent runs.
	for !logHas(`msg="reloading configuration" why=SIGHUP`) {
		if time.Now().After(deadline) {
			t.Fatalf("%d SIGHUPs during setup, no reload once running", sent)
		}
		time.Sleep(20 * time.Millisecond) // polling the agent's log, bounded by the deadline
	}
	t.Logf("%d SIGHUPs sent during setup; the agent survived and reloaded", sent)

	// Stop while the file keeps changing: SIGTERM, then a change every
	// 10 ms until the agent has exited.
	data, _ := os.ReadFile(cfgPath)
	edits := []string{strings.Replace(string(data), "producer_byte_rate: 2MB", "producer_byte_rate: 3MB", 1), string(data)}
	os.WriteFile(cfgPath, []byte(edits[0]), 0o600)
	if err := a.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i := 1; ; i++ {
		select {
		case <-a.Exited():
		case <-time.After(10 * time.Millisecond):
			os.WriteFile(cfgPath, []byte(edits[i%2]), 0o600)
			continue
		}
		break
	}
	if err := a.Stop(); err != nil {
		t.Fatalf("agent's exit: %v", err)
	}
	logData, _ := os.ReadFile(a.Log)
	log := string(logData)
	stopping := strings.Index(log, `msg=stopping`)
	if stopping < 0 {
		t.Fatalf("agent never logged its stop:\n%s", log)
	}
	if after := log[stopping:]; strings.Contains(after, "reloading configuration") || strings.Contains(after, "level=ERROR") {
		t.Errorf("after the stop began:\n%s", after)
	}
	assertRestored(t, w)
}
