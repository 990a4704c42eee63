package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/deploy/notices"
)

// Both packages carry the license texts and the third-party notices of
// the binaries they were built for, fresh from this build, and the rpm
// declares the license expression of deploy/nfpm.yaml. Built from stand-in
// binaries: what is checked is the packaging, not the agent.
func TestPackagesCarryLicensesAndNotices(t *testing.T) {
	for _, tool := range []string{"dpkg-deb", "rpm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to read the packages (make deps installs it): %v", tool, err)
		}
	}
	t.Chdir("../..") // deploy/pkg runs from the repository's root (make packages)
	dist := t.TempDir()
	const describe = "v9.9.9"
	if err := os.WriteFile(filepath.Join(dist, "sluice_"+describe+"_linux_amd64"), []byte("stand-in binary\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A native binary that writes one man page and the completion scripts.
	native := filepath.Join(t.TempDir(), "sluice")
	script := "#!/bin/sh\ncase \"$1\" in\nman) mkdir -p \"$3\" && echo '.TH SLUICE 1' > \"$3/sluice.1\" ;;\ncompletion) echo \"# $2 completion\" ;;\nesac\n"
	if err := os.WriteFile(native, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	paths, err := build(describe, dist, native, []string{"amd64"}, []string{"deb", "rpm"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := notices.Generate(".", []string{"amd64"})
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string][]byte{"LICENSE": nil, "NOTICE": nil, "LICENSES/MIT.txt": nil, "LICENSES/GPL-2.0-only.txt": nil, "copyright": nil, notices.FileName: want}
	for name := range docs {
		if docs[name] == nil {
			src := name
			if name == "copyright" {
				src = "deploy/packaging/copyright"
			}
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			docs[name] = data
		}
	}
	var deb, rpm string
	for _, p := range paths {
		switch filepath.Ext(p) {
		case ".deb":
			deb = p
		case ".rpm":
			rpm = p
		}
	}
	if deb == "" || rpm == "" {
		t.Fatalf("build wrote %v, want a .deb and an .rpm", paths)
	}
	dump, err := exec.Command("rpm", "-qp", "--dump", rpm).Output()
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range docs {
		path := "./usr/share/doc/sluice/" + name
		got, err := exec.Command("sh", "-c", "dpkg-deb --fsys-tarfile \"$1\" | tar -xO \"$2\"", "-", deb, path).Output()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %s is not the repository's (or this build's) text (%v, %d bytes, want %d)", deb, path, err, len(got), len(data))
		}
		// rpm --dump: path size mtime sha256 mode owner group …
		sum := sha256.Sum256(data)
		found := false
		for _, line := range strings.Split(string(dump), "\n") {
			f := strings.Fields(line)
			found = found || len(f) > 3 && f[0] == path[1:] && f[1] == fmt.Sprint(len(data)) && f[3] == hex.EncodeToString(sum[:])
		}
		if !found {
			t.Errorf("%s: no %s of %d bytes with sha256 %x in\n%s", rpm, path[1:], len(data), sum, dump)
		}
	}
	lic, err := exec.Command("rpm", "-qp", "--qf", "%{LICENSE}", rpm).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(lic), "Apache-2.0 AND (MIT OR GPL-2.0-only)") || strings.Contains(strings.ToLower(string(lic)), "proprietary") {
		t.Errorf("%s: License %q", rpm, lic)
	}
}
