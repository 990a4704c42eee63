package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// newVersionCmd: `sluice version` (and `sluice --version`).
func newVersionCmd() *cobra.Command {
	c := &cobra.Command{
		Use:         "version [-o text|json]",
		Short:       "print the version and the revision it was built from (also --version)",
		Args:        noArgs,
		Annotations: annotations(nil, "sluice version", "sluice --version", "sluice version -o json"),
	}
	output := addOutputFlag(c)
	c.RunE = func(c *cobra.Command, _ []string) error { return runVersion(output.json(), c.OutOrStdout()) }
	return c
}

func runVersion(asJSON bool, stdout io.Writer) error {
	if asJSON {
		version, revision, modified := buildVersion()
		return json.NewEncoder(stdout).Encode(struct {
			Version  string `json:"version"`
			Revision string `json:"revision"`
			Modified bool   `json:"modified"`
		}{version, revision, modified})
	}
	fmt.Fprintln(stdout, versionString())
	return nil
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
