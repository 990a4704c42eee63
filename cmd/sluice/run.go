package main

import (
	"context"
	"io"

	"github.com/sluice-dev/sluice/agent"
	"github.com/sluice-dev/sluice/agent/daemon"
)

const defaultConfigPath = "/etc/sluice/sluice.yaml"

// runAgent: `sluice run --config FILE [--ready-file FILE]`. The lifecycle
// (attach, adopt, reload, detach) is daemon.RunDaemon's.
func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	path := fs.String("config", defaultConfigPath, "configuration file")
	readyFile := fs.String("ready-file", "", "write this file once the agent is attached and has run its first cycle")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	version, revision, _ := buildVersion()
	return daemon.RunDaemon(ctx, *path, *readyFile, agent.BuildInfo{Version: version, Revision: revision}, stderr)
}
