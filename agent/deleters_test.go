package agent

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// One deleter per kind of kernel object (issue #47): each checks that the
// object is sluice's before it deletes it, so a second call site would be a
// way around the check. This fails if any non-test file of the daemon's
// packages deletes a link, a filter or a qdisc anywhere but in its one
// deleter.
func TestOneDeleterPerKernelObject(t *testing.T) {
	allowed := map[string][]string{
		"LinkDel":   {"agent/shaper/ifb.go"},       // deleteIFB: sluice's IFBs (and its probe)
		"FilterDel": {"agent/attach/filterdel.go"}, // deleteFilter: sluice's filters
		// deleteRoot (sluice's htb tree or fq), ReplaceForeignRoot (what
		// replace_root_qdisc: true asks for), deleteClsact (a clsact
		// sluice recorded adding, with no filter left).
		"QdiscDel": {"agent/shaper/htb.go", "agent/attach/attach.go"},
	}
	call := regexp.MustCompile(`\.(LinkDel|FilterDel|QdiscDel)\(`)
	found := map[string]int{}
	for _, root := range []string{"../agent", "../cmd", "../maps", "../internal"} {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel := strings.TrimPrefix(filepath.ToSlash(path), "../")
			for _, m := range call.FindAllStringSubmatch(string(data), -1) {
				found[m[1]]++
				ok := false
				for _, f := range allowed[m[1]] {
					ok = ok || f == rel
				}
				if !ok {
					t.Errorf("%s calls %s: kernel objects of that kind are deleted only by %v, which check they are sluice's", rel, m[1], allowed[m[1]])
				}
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	for kind := range allowed {
		if found[kind] == 0 {
			t.Errorf("no call to %s found: the scan no longer sees the deleters", kind)
		}
	}
}
