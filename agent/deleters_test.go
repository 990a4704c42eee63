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
		"QdiscDel": {"agent/shaper/htbroot.go", "agent/attach/legacy.go"},
	}
	call := regexp.MustCompile(`\.(LinkDel|FilterDel|QdiscDel)\(`)
	found := map[string]int{}
	for _, root := range []string{"../agent", "../daemon", "../cmd", "../maps", "../internal"} {
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

// Pins (bpffs files of sluice's maps and their directories) have one
// deleter too: removePin and removeOwnPinTree in maps/pindir.go, which
// Unpin, the retired pins' removal and the loads' clean-ups all go
// through; Unpin spares what is not sluice's.
func TestOneDeleterOfPins(t *testing.T) {
	call := regexp.MustCompile(`os\.(Remove|RemoveAll)\(`)
	entries, err := os.ReadDir("../maps")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		data, err := os.ReadFile(filepath.Join("../maps", name))
		if err != nil {
			t.Fatal(err)
		}
		n := len(call.FindAllString(string(data), -1))
		if name == "pindir.go" {
			seen = n
		} else if n > 0 {
			t.Errorf("maps/%s removes files %d times: pins are deleted only by maps/pindir.go's removePin and removeOwnPinTree", name, n)
		}
	}
	if seen == 0 {
		t.Error("no removal found in maps/pindir.go: the scan no longer sees the pins' deleter")
	}
}
