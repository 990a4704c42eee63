package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluice-dev/sluice/allocator/scenario"
)

// newSimulateCmd: `sluice simulate --scenario FILE [-o text|json]`
// (--format json|table is the older spelling). Invalid input exits 2 with
// the field path on stderr and nothing on stdout.
func newSimulateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:         "simulate --scenario FILE [-o text|json]",
		Short:       "play a scenario file through the control loop and print each cycle as JSON",
		Args:        noArgs,
		Annotations: annotations(nil, "sluice simulate --scenario allocator/scenario/examples/4-paper-overcommit.yaml --format table"),
	}
	file := c.Flags().String("scenario", "", "scenario `file` (.yaml, .yml or .json)")
	format := c.Flags().String("format", "json", "output `format`: json or table (-o is the same: -o text is the table)")
	o := &outputFormat{formats: []string{"text", "json"}}
	c.Flags().VarP(o, "output", "o", "output format: text (a table) or json (the default)")
	c.MarkFlagFilename("scenario", "yaml", "yml", "json")
	c.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"json", "table"}, cobra.ShellCompDirectiveNoFileComp))
	c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(o.formats, cobra.ShellCompDirectiveNoFileComp))
	c.RunE = func(c *cobra.Command, _ []string) error {
		switch o.value {
		case "text":
			*format = "table"
		case "json":
			*format = "json"
		}
		return runSimulate(*file, *format, c.OutOrStdout())
	}
	return c
}

func runSimulate(file, format string, stdout io.Writer) error {
	if file == "" {
		return usageError{errors.New("simulate: --scenario FILE is required")}
	}
	if format != "json" && format != "table" {
		return usageError{fmt.Errorf("simulate: --format: %q is not json or table", format)}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return usageError{fmt.Errorf("simulate: %w", err)}
	}
	s, err := scenario.Parse(file, data)
	if err != nil {
		return usageError{err}
	}
	res, err := scenario.Run(s)
	if err != nil {
		return usageError{err}
	}
	if format == "table" {
		return res.WriteTable(stdout)
	}
	enc := json.NewEncoder(stdout)
	return enc.Encode(res)
}
