package agent

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The import graph's layers (#47): the pure packages know nothing of the
// agent, the features plug a stage of the cycle without reaching into
// Agent, the agent knows nothing of the daemon that owns the process, and
// nothing below cmd/ knows the CLI. Read from the sources' import lines
// (non-test files), so a new arrow against a layer fails here, naming it.
func TestImportLayers(t *testing.T) {
	const mod = "github.com/sluice-dev/sluice/"
	forbidden := map[string][]string{
		// pure: deterministic, no side effects, no agent
		"allocator": {"agent", "cluster", "maps", "cmd"},
		"cluster":   {"agent", "maps", "cmd"},
		"latency":   {"agent", "cluster", "maps", "cmd"},
		// features and stages behind the pipeline: never Agent, the daemon or the CLI
		"agent/clusterbudget": {"agent", "daemon", "cmd"},
		"agent/objectives":    {"agent", "daemon", "cmd"},
		"agent/kafkaquotas":   {"agent", "daemon", "cmd"},
		"agent/limits":        {"agent", "daemon", "cmd"},
		"agent/apply":         {"agent", "daemon", "cmd"},
		"agent/entity":        {"agent", "daemon", "cmd"},
		"agent/status":        {"agent", "daemon", "cmd", "maps"},
		"agent/config":        {"agent", "daemon", "cmd"},
		"agent/shaper":        {"agent", "daemon", "cmd"},
		"agent/attach":        {"agent", "daemon", "cmd"},
		"maps":                {"agent", "cmd"},
		// the agent: not the process's owner, not the CLI
		"agent":  {"daemon", "cmd"},
		"daemon": {"cmd"},
	}
	for pkg, bans := range forbidden {
		imports, err := importsOf(filepath.Join("..", pkg))
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		if len(imports) == 0 {
			t.Fatalf("%s: no imports read; the scan no longer sees the package", pkg)
		}
		for imp, file := range imports {
			rel, ok := strings.CutPrefix(imp, mod)
			if !ok {
				continue
			}
			for _, ban := range bans {
				if rel == ban || strings.HasPrefix(rel, ban+"/") && !allowedBelow(pkg, ban) {
					t.Errorf("%s imports %s (%s): the layer may not import %s", pkg, rel, file, ban)
				}
			}
		}
	}
}

// allowedBelow says whether pkg may import a package below a banned
// prefix: for a package of the agent's own, a ban on "agent" is a ban on
// the root package (Agent), not on its siblings; for any other, on all of
// it.
func allowedBelow(pkg, ban string) bool {
	return ban == "agent" && strings.HasPrefix(pkg, "agent/")
}

// importsOf maps each module import of a directory's non-test Go files to
// the first file that has it.
func importsOf(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ImportsOnly)
		if err != nil {
			return nil, err
		}
		for _, s := range f.Imports {
			p, err := strconv.Unquote(s.Path.Value)
			if err != nil {
				return nil, err
			}
			if _, seen := out[p]; !seen {
				out[p] = name
			}
		}
	}
	return out, nil
}
