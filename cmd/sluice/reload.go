package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/agent/status"
)

// newReloadCmd: `sluice reload [--socket PATH]`, systemd's ExecReload. It
// asks the running agent to reload its file and waits for the verdict, so
// `systemctl reload sluice` fails, with the reason, when the file is
// refused (the running configuration stays).
func newReloadCmd() *cobra.Command {
	c := &cobra.Command{
		Use:         "reload [--socket PATH] [-o text|json]",
		Short:       "make the running agent reload its configuration file and report the verdict (systemctl reload)",
		Args:        noArgs,
		Annotations: annotations(nil, "sluice check-config --config /etc/sluice/sluice.yaml && sluice reload"),
	}
	socket := addSocketFlag(c)
	output := addOutputFlag(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		return runReload(*socket, output.json(), c.OutOrStdout())
	}
	return c
}

// runReload: exit status 0 applied, 2 refused (the file is invalid input),
// 1 refused and not fully undone, or no verdict.
func runReload(socket string, asJSON bool, stdout io.Writer) error {
	r, err := status.RequestReload(socket)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	if asJSON {
		// The verdict as the agent gave it; the exit status says it too.
		if err := json.NewEncoder(stdout).Encode(r); err != nil {
			return err
		}
	}
	if r.PartlyApplied {
		// Exit status 1: the host is not as it was; the operator must act.
		return fmt.Errorf("reload refused, and not all of it could be undone: %s", r.Error)
	}
	if !r.Applied {
		// Exit status 2: the configuration file is invalid input.
		return usageError{fmt.Errorf("reload refused, the running configuration stays: %s", r.Error)}
	}
	if !asJSON {
		fmt.Fprintf(stdout, "configuration reloaded at %s\n", r.At.Format(time.RFC3339))
	}
	return nil
}
