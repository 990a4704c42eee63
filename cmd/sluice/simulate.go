package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sluice-dev/sluice/allocator/scenario"
)

// runSimulate: `sluice simulate --scenario FILE [-o text|json]` (--format
// json|table is the older spelling).
// Invalid input exits 2 with the field path on stderr and nothing on stdout.
func runSimulate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("simulate", stderr)
	file := fs.String("scenario", "", "scenario file (.yaml, .yml or .json)")
	format := fs.String("format", "json", "output format: json or table (-o is the same: -o text is the table)")
	o := fs.String("o", "", "output format: text (a table) or json (the default)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	switch *o {
	case "":
	case "text":
		*format = "table"
	case "json":
		*format = "json"
	default:
		return usageError{fmt.Errorf("-o %q: use text or json", *o)}
	}
	if *file == "" {
		return usageError{errors.New("simulate: --scenario FILE is required")}
	}
	if *format != "json" && *format != "table" {
		return usageError{fmt.Errorf("simulate: --format: %q is not json or table", *format)}
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return usageError{fmt.Errorf("simulate: %w", err)}
	}
	s, err := scenario.Parse(*file, data)
	if err != nil {
		return usageError{err}
	}
	res, err := scenario.Run(s)
	if err != nil {
		return usageError{err}
	}
	if *format == "table" {
		return res.WriteTable(stdout)
	}
	enc := json.NewEncoder(stdout)
	return enc.Encode(res)
}
