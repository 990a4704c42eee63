package apply_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// shaperWrites are the shaper methods that change what the data path
// enforces.
var shaperWrites = map[string]bool{"SetRates": true, "SetCapacity": true, "Remove": true}

// allowed are the directories whose code may call them: this package, the
// shaper backends themselves (a composite backend forwards to its parts),
// and the measurement tools under test/ that drive a shaper with no agent.
func allowed(dir string) bool {
	return dir == "agent/apply" || dir == "agent/shaper" || strings.HasPrefix(dir, "agent/shaper/") ||
		dir == "agent/shaping" || strings.HasPrefix(dir, "test/")
}

// TestOnlyWriter fails when code outside the apply stage writes rates,
// capacities or removals to a shaper: the Writer's record of what is in
// force would no longer be the truth. Calls on values whose static type
// is not known from syntax alone are matched by method name; a false
// match names the line, which is where to look.
func TestOnlyWriter(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var offenders []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || allowed(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !shaperWrites[sel.Sel.Name] || !looksLikeShaper(sel.X) {
				return true
			}
			offenders = append(offenders, fset.Position(call.Pos()).String())
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offenders {
		t.Errorf("%s writes to a shaper outside agent/apply", o)
	}
}

// looksLikeShaper: the receiver expression names a shaper (Shaper,
// shaper, c.Shaper, deps.Shaper, …). Other Remove calls (maps, files) do
// not match.
func looksLikeShaper(x ast.Expr) bool {
	name := ""
	switch e := x.(type) {
	case *ast.Ident:
		name = e.Name
	case *ast.SelectorExpr:
		name = e.Sel.Name
	case *ast.CallExpr:
		if s, ok := e.Fun.(*ast.SelectorExpr); ok {
			name = s.Sel.Name
		}
	}
	return strings.Contains(strings.ToLower(name), "shaper")
}
