package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/sluice-dev/sluice/agent/config"
	"github.com/sluice-dev/sluice/agent/status"
)

// runReload: `sluice reload [--socket PATH]`, systemd's ExecReload. It asks
// the running agent to reload its file and waits for the verdict, so
// `systemctl reload sluice` fails, with the reason, when the file is
// refused (the running configuration stays).
func runReload(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("reload", stderr)
	socket := fs.String("socket", config.Default().Socket, "the agent's status socket")
	output := outputFlag(fs)
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if err := output.check(); err != nil {
		return err
	}
	r, err := status.RequestReload(*socket)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	if output.json() {
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
	if !output.json() {
		fmt.Fprintf(stdout, "configuration reloaded at %s\n", r.At.Format(time.RFC3339))
	}
	return nil
}
