package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeAgent answers one status-socket request per connection with reply.
func fakeAgent(t *testing.T, reply string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "status.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			if strings.Contains(line, `"cmd":"reload"`) {
				c.Write([]byte(reply + "\n"))
			}
			c.Close()
		}
	}()
	return sock
}

// `sluice reload` (ExecReload) exits 0 when the agent applied the file, 2
// with the agent's reason when it refused it, and 1 when there is no agent
// to ask or it could not reload.
func TestReloadCommandReportsTheVerdict(t *testing.T) {
	var ue usageError
	applied := fakeAgent(t, `{"at":"2026-12-04T01:00:00Z","why":"sluice reload","applied":true}`)
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"reload", "--socket", applied}, &stdout, &stderr); err != nil || !strings.Contains(stdout.String(), "configuration reloaded") {
		t.Errorf("applied: %v, stdout %q", err, stdout.String())
	}
	refused := fakeAgent(t, `{"at":"2026-12-04T01:00:00Z","why":"sluice reload","applied":false,"error":"produce.capacity: \"1e300TiB\" is above the largest rate"}`)
	err := run(context.Background(), []string{"reload", "--socket", refused}, &stdout, &stderr)
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "reload refused, the running configuration stays: produce.capacity") {
		t.Errorf("refused: %v, want a usage error (exit 2) with the reason", err)
	}
	partly := fakeAgent(t, `{"at":"2026-12-04T01:00:00Z","why":"sluice reload","applied":false,"partly_applied":true,"error":"exempt peers: x; undo failed"}`)
	err = run(context.Background(), []string{"reload", "--socket", partly}, &stdout, &stderr)
	if exitStatus(err) != 1 || !strings.Contains(err.Error(), "not all of it could be undone") {
		t.Errorf("partly applied: %v (exit %d), want exit 1 saying it could not be undone", err, exitStatus(err))
	}
	stopping := fakeAgent(t, `{"error":"the agent is stopping"}`)
	err = run(context.Background(), []string{"reload", "--socket", stopping}, &stdout, &stderr)
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "the agent is stopping") {
		t.Errorf("stopping: %v, want a failure (exit 1) saying why", err)
	}
	err = run(context.Background(), []string{"reload", "--socket", filepath.Join(t.TempDir(), "none.sock")}, &stdout, &stderr)
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "is the agent running") {
		t.Errorf("no agent: %v, want a failure (exit 1)", err)
	}
}

// ExecReload passes --config: an agent started with a socket: of its own
// is asked there (before, `sluice reload` asked only the default path and
// `systemctl reload` failed with "is the agent running" while it ran). A
// file that does not load is still the agent's to refuse: it is asked at
// the default socket; with none there, the error names both.
func TestReloadFindsTheSocketInTheFile(t *testing.T) {
	const minimalConfig = "interfaces: [eth0]\nlisteners: [9092]\nproduce: {capacity: 100MB}\nfetch: {capacity: 100MB}\n"
	sock := fakeAgent(t, `{"at":"2026-12-04T01:00:00Z","why":"sluice reload","applied":true}`)
	dir := t.TempDir()
	file := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(file, []byte(minimalConfig+"socket: "+sock+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"reload", "--config", file}, &stdout, &stderr); err != nil || !strings.Contains(stdout.String(), "configuration reloaded") {
		t.Errorf("socket from the file: %v, stdout %q", err, stdout.String())
	}
	// --socket wins over the file.
	none := filepath.Join(dir, "none.sock")
	if err := run(context.Background(), []string{"reload", "--config", file, "--socket", none}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), none) {
		t.Errorf("--socket given: %v, want the given socket asked", err)
	}
	broken := filepath.Join(dir, "broken.yaml")
	if err := os.WriteFile(broken, []byte("interfaces: [eth0]\nlisteners: [9092]\nsocket: "+sock+"\nproduce: {capacity: lots}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// (The default socket is this test's own: an agent running on the
	// host must not answer it.)
	_, err := socketOfFile(broken, none)
	if err == nil || !strings.Contains(err.Error(), "does not load") || !strings.Contains(err.Error(), "no agent answers at the default") {
		t.Errorf("broken file, no agent at the default socket: %v", err)
	}
	if got, err := socketOfFile(broken, sock); err != nil || got != sock {
		t.Errorf("broken file, an agent at the default socket: %q %v, want it asked (it refuses the file with its reasons)", got, err)
	}
}
