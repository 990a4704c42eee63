package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
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
