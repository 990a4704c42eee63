package scenario

import (
	"embed"
	"io/fs"
	"path"
)

//go:embed examples/*.yaml
var examples embed.FS

// Example is one of the worked examples of docs/design.md §4, embedded so that
// `sluice demo` and `sluice simulate` need no files on disk.
type Example struct {
	Name string // file name, e.g. "1-normal-allocation.yaml"
	Data []byte
}

// Examples returns the worked examples in order.
func Examples() []Example {
	entries, err := fs.ReadDir(examples, "examples")
	if err != nil {
		panic(err) // embedded at build time: cannot fail
	}
	out := make([]Example, 0, len(entries))
	for _, e := range entries {
		data, err := examples.ReadFile(path.Join("examples", e.Name()))
		if err != nil {
			panic(err)
		}
		out = append(out, Example{Name: e.Name(), Data: data})
	}
	return out
}
