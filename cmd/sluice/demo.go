package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/allocator/scenario"
)

// newDemoCmd: `sluice demo` plays the embedded worked examples of
// docs/design.md §4 through the control loop and prints each cycle as a
// table. It needs no Kafka cluster, no root and no files.
func newDemoCmd() *cobra.Command {
	return &cobra.Command{
		Use:         "demo",
		Short:       "show the control loop on the worked examples of the design",
		Args:        noArgs,
		Annotations: annotations(nil, "sluice demo"),
		RunE:        func(c *cobra.Command, _ []string) error { return runDemo(c.OutOrStdout()) },
	}
}

func runDemo(stdout io.Writer) error {
	fmt.Fprintln(stdout, "sluice control loop on the worked examples of docs/design.md §4 (rate units per second)")
	for _, ex := range scenario.Examples() {
		fmt.Fprintf(stdout, "\n== %s\n", ex.Name)
		for _, line := range strings.Split(string(ex.Data), "\n") {
			if strings.HasPrefix(line, "#") {
				fmt.Fprintln(stdout, line)
			}
		}
		s, err := scenario.Parse(ex.Name, ex.Data)
		if err != nil {
			return err
		}
		res, err := scenario.Run(s)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout)
		if err := res.WriteTable(stdout); err != nil {
			return err
		}
	}
	return nil
}
