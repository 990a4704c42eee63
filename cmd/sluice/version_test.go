package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/agent/status"
)

// `sluice version` prints this binary's version, then the running agent's
// as its status socket reports it, saying when it is another build (an
// upgrade the agent was not restarted for), and why there is none when no
// agent answers; --client and --version print this binary's only. -o json
// carries the same.
func TestVersionShowsTheRunningAgent(t *testing.T) {
	version, revision, _ := buildVersion()
	this := version + " revision " + revision
	snap := func(v string) *status.Snapshot { return &status.Snapshot{Cycle: 1, Time: time.Now(), AgentVersion: v} }
	same := serveStatus(t, snap(this))
	older := serveStatus(t, snap("v0.9.0 revision 0123abc"))
	unversioned := serveStatus(t, snap(""))
	absent := filepath.Join(t.TempDir(), "none.sock")
	for _, c := range []struct {
		args []string
		want []string // the lines, in order
	}{
		{[]string{"version", "--socket", same}, []string{versionString(), "running agent: sluice " + this}},
		{[]string{"version", "--socket", older}, []string{versionString(),
			"running agent: sluice v0.9.0 revision 0123abc (not this binary's: restart the agent to run this one, systemctl restart sluice)"}},
		{[]string{"version", "--socket", unversioned}, []string{versionString(),
			"running agent: unknown (the agent answers but does not report its version (a release before sluice status carried it))"}},
		{[]string{"version", "--socket", absent}, []string{versionString(), "running agent: unknown (is the agent running? dial unix " + absent}},
		{[]string{"version", "--client", "--socket", same}, []string{versionString()}},
		{[]string{"--version"}, []string{versionString()}},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), c.args, &stdout, &stderr); err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
		ok := len(lines) == len(c.want)
		for i := 0; ok && i < len(lines); i++ {
			ok = strings.HasPrefix(lines[i], c.want[i])
		}
		if !ok {
			t.Errorf("%v printed:\n%s\nwant lines starting:\n%s", c.args, stdout.String(), strings.Join(c.want, "\n"))
		}
	}
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"version", "-o", "json", "--socket", older}, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Version string
		Agent   *agentVersion
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil || got.Version != version || got.Agent == nil ||
		got.Agent.Version != "v0.9.0 revision 0123abc" || got.Agent.Socket != older {
		t.Errorf("version -o json: %v %s", err, stdout.String())
	}
}

// `sluice status` heads its text with the running agent's version, and
// warns when that is not this binary's.
func TestStatusShowsTheAgentVersion(t *testing.T) {
	version, revision, _ := buildVersion()
	for v, want := range map[string][]string{
		version + " revision " + revision: {"sluice " + version + " revision " + revision + "  cycle 1 at "},
		"v0.9.0 revision 0123abc": {"sluice v0.9.0 revision 0123abc  cycle 1 at ",
			"WARNING this agent is sluice v0.9.0 revision 0123abc (not this binary's: restart the agent to run this one, systemctl restart sluice)"},
		"": {"sluice  cycle 1 at "}, // an agent from before the field
	} {
		sock := serveStatus(t, &status.Snapshot{Cycle: 1, Time: time.Now(), AgentVersion: v})
		var stdout bytes.Buffer
		if err := run(context.Background(), []string{"status", "--socket", sock}, &stdout, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(stdout.String(), "\n")
		for i, w := range want {
			if len(lines) <= i || !strings.HasPrefix(lines[i], w) {
				t.Errorf("agent %q: status line %d is not %q:\n%s", v, i+1, w, stdout.String())
			}
		}
		if len(want) == 1 && strings.Contains(stdout.String(), "WARNING this agent") {
			t.Errorf("agent %q: a version warning for this binary's own version:\n%s", v, stdout.String())
		}
	}
}
