package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-dev/sluice/allocator/scenario"
)

// runDemo plays the embedded worked examples of docs/design.md §4 through the
// control loop and prints each cycle as a table. It needs no Kafka cluster,
// no root and no files.
func runDemo(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
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
