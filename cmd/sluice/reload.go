package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/agent/configfile"
	"github.com/sluice-dev/sluice/agent/status"
)

// newReloadCmd: `sluice reload [--config FILE] [--socket PATH]`, systemd's
// ExecReload. It asks the running agent to reload its file and waits for
// the verdict, so `systemctl reload sluice` fails, with the reason, when
// the file is refused (the running configuration stays). The unit passes
// --config: an agent started with a socket: of its own listens there, not
// at the default path, and ExecReload cannot know it otherwise.
func newReloadCmd() *cobra.Command {
	c := &cobra.Command{
		Use:         "reload [--config FILE] [--socket PATH] [-o text|json]",
		Short:       "make the running agent reload its configuration file and report the verdict (systemctl reload)",
		Args:        noArgs,
		Annotations: annotations(nil, "sluice check-config --config /etc/sluice/sluice.yaml && sluice reload"),
	}
	socket := addSocketFlag(c)
	path := c.Flags().String("config", "", "the agent's configuration `file`: without --socket, its socket: key names the socket to ask")
	c.MarkFlagFilename("config", "yaml", "yml")
	output := addOutputFlag(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		s := *socket
		if *path != "" && !c.Flags().Changed("socket") {
			var err error
			if s, err = socketOfFile(*path, s); err != nil {
				return err
			}
		}
		return runReload(s, output.json(), c.OutOrStdout())
	}
	return c
}

// socketOfFile is the status socket the configuration file names. A file
// that does not load is the agent's to refuse, with its reasons: it is
// asked at the default socket, and when none answers there the error says
// both why the file did not load and where no agent was found.
func socketOfFile(path, fallback string) (string, error) {
	cfg, err := configfile.Load(path)
	if err == nil {
		return cfg.Socket, nil
	}
	c, derr := net.Dial("unix", fallback)
	if derr != nil {
		return "", fmt.Errorf("reload: %s does not load, so its socket: is unknown (%v); no agent answers at the default %s either: %w", path, err, fallback, derr)
	}
	c.Close()
	return fallback, nil
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
