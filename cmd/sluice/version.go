package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/agent/status"
)

// newVersionCmd: `sluice version` (and `sluice --version`, this binary's
// only): this binary's version, and the running agent's, asked on the
// status socket. They differ after an upgrade the agent was not restarted
// for.
func newVersionCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "version [--client] [--socket PATH] [-o text|json]",
		Short: "print the version and revision of this binary and of the running agent (--version: this binary's)",
		Args:  noArgs,
		Annotations: annotations(nil, "sluice version", "sluice version --client   # this binary only, as sluice --version",
			"sluice version -o json"),
	}
	socket := addSocketFlag(c)
	client := c.Flags().Bool("client", false, "print this binary's version only; ask no agent")
	output := addOutputFlag(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		if *client {
			return runVersion(output.json(), "", c.OutOrStdout())
		}
		return runVersion(output.json(), *socket, c.OutOrStdout())
	}
	return c
}

// agentVersion is what the running agent at socket says of its version.
type agentVersion struct {
	Socket string `json:"socket"`
	// Version: as this binary's line prints it after "sluice " ("" when
	// the agent did not answer, or predates the field).
	Version string `json:"version,omitempty"`
	// Error: why there is no version (no agent, no permission, an older
	// agent).
	Error string `json:"error,omitempty"`
}

// queryAgentVersion asks the agent at socket.
func queryAgentVersion(socket string) agentVersion {
	v := agentVersion{Socket: socket}
	s, err := status.Query(socket)
	switch {
	case err != nil:
		v.Error = err.Error()
	case s.AgentVersion == "":
		v.Error = "the agent answers but does not report its version (a release before sluice status carried it)"
	default:
		v.Version = s.AgentVersion
	}
	return v
}

// runVersion prints this binary's version, and with a socket the running
// agent's (a line saying why there is none when it does not answer: the
// command still succeeds, this binary's version being known).
func runVersion(asJSON bool, socket string, stdout io.Writer) error {
	version, revision, modified := buildVersion()
	var agent *agentVersion
	if socket != "" {
		a := queryAgentVersion(socket)
		agent = &a
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			Version  string        `json:"version"`
			Revision string        `json:"revision"`
			Modified bool          `json:"modified"`
			Agent    *agentVersion `json:"agent,omitempty"`
		}{version, revision, modified, agent})
	}
	fmt.Fprintln(stdout, versionString())
	if agent == nil {
		return nil
	}
	if agent.Version == "" {
		fmt.Fprintf(stdout, "running agent: unknown (%s)\n", agent.Error)
		return nil
	}
	fmt.Fprintf(stdout, "running agent: sluice %s%s\n", agent.Version, versionDiffers(agent.Version))
	return nil
}

// versionDiffers says, after an agent's version, that it is not this
// binary's ("" when it is): the agent runs what was installed when it
// started.
func versionDiffers(agent string) string {
	version, revision, _ := buildVersion()
	if agent == version+" revision "+revision {
		return ""
	}
	return " (not this binary's: restart the agent to run this one, systemctl restart sluice)"
}

// Set by `make build` (-ldflags -X): deploy/version.sh and the commit.
var stampedVersion, stampedRevision string

// versionString is the version and the VCS revision the binary was built
// from: what `make build` stamped, else what the Go toolchain recorded
// ("devel" and "unknown" for a plain go build with -buildvcs=false).
func versionString() string {
	version, revision, modified := buildVersion()
	if modified {
		return fmt.Sprintf("sluice %s revision %s (modified)", version, revision)
	}
	return fmt.Sprintf("sluice %s revision %s", version, revision)
}

// buildVersion is the version and revision versionString prints (and
// sluice_agent_info exports); modified: built from a changed work tree.
func buildVersion() (version, revision string, modified bool) {
	if stampedVersion != "" && stampedRevision != "" {
		return stampedVersion, stampedRevision, false
	}
	version, revision = "devel", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				revision = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				modified = true
			}
		}
	}
	return version, revision, modified
}
