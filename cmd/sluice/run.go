package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/agent"
	"github.com/sluice-dev/sluice/daemon"
)

const defaultConfigPath = "/etc/sluice/sluice.yaml"

// newRunCmd: `sluice run --config FILE [--ready-file FILE]`. The lifecycle
// (attach, adopt, reload, detach) is daemon.RunDaemon's.
func newRunCmd() *cobra.Command {
	c := &cobra.Command{
		Use:         "run [--config FILE] [--ready-file FILE]",
		Short:       "run the agent: attach, learn, allocate and shape (root)",
		Args:        noArgs,
		Annotations: annotations(nil, "sluice run --config /etc/sluice/sluice.yaml   # what the systemd unit runs"),
	}
	path := c.Flags().String("config", defaultConfigPath, "configuration `file`")
	readyFile := c.Flags().String("ready-file", "", "write this `file` once the agent is attached and has run its first cycle")
	c.MarkFlagFilename("config", "yaml", "yml")
	c.MarkFlagFilename("ready-file")
	c.RunE = func(c *cobra.Command, _ []string) error {
		return runAgent(c.Context(), *path, *readyFile, c.ErrOrStderr())
	}
	return c
}

func runAgent(ctx context.Context, path, readyFile string, stderr io.Writer) error {
	version, revision, _ := buildVersion()
	return daemon.RunDaemon(ctx, path, readyFile, agent.BuildInfo{Version: version, Revision: revision}, stderr)
}
