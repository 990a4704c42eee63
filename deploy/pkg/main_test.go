package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestDebVersion(t *testing.T) {
	for describe, want := range map[string]string{
		"v1.2.3":                  "1.2.3",
		"v1.2.3-4-gabc1234":       "1.2.3+4+gabc1234",
		"v1.2.3-4-gabc1234-dirty": "1.2.3+4+gabc1234+dirty",
		"abc1234":                 "0~gabc1234",
		"0.151-gdbbeff0":          "0.151+gdbbeff0",
		"0.151-gdbbeff0-dirty":    "0.151+gdbbeff0+dirty",
		"9902619-dirty":           "0~g9902619+dirty",
	} {
		if got, err := debVersion(describe); err != nil || got != want {
			t.Errorf("debVersion(%q) = %q, %v; want %q", describe, got, err, want)
		}
	}
	for _, bad := range []string{"", "v1.2 3", "x;rm"} {
		if got, err := debVersion(bad); err == nil {
			t.Errorf("debVersion(%q) = %q, want an error", bad, got)
		}
	}
}

// olderNewer are versions deploy/version.sh gives, each pair older first.
var olderNewer = [][2]string{
	{"0.151-gffff000", "0.152-g0000aaa"}, // hashes in the wrong order
	{"0.99-gabc", "0.100-gabc"},
	{"0.152-gabc", "0.152-gabc-dirty"},
	{"0.500-gabc", "v1.0.0"},
	{"v1.0.0", "v1.0.0-1-gabc"},
}

// Packages built from later commits sort as newer, by dpkg's own rules.
func TestDebVersionsSortByAge(t *testing.T) {
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Fatalf("dpkg is needed to compare versions as apt does: %v", err)
	}
	for _, pair := range olderNewer {
		older, _ := debVersion(pair[0])
		newer, _ := debVersion(pair[1])
		if err := exec.Command(dpkg, "--compare-versions", older, "lt", newer).Run(); err != nil {
			t.Errorf("%s (from %s) does not sort before %s (from %s)", older, pair[0], newer, pair[1])
		}
	}
}

// rpm versions sort by age as rpm itself compares them.
func TestRPMVersionsSortByAge(t *testing.T) {
	rpm, err := exec.LookPath("rpm")
	if err != nil {
		t.Fatalf("rpm is needed to compare versions as it does (make deps installs it): %v", err)
	}
	for _, pair := range olderNewer {
		older, err1 := rpmVersion(pair[0])
		newer, err2 := rpmVersion(pair[1])
		if err1 != nil || err2 != nil || strings.Contains(older+newer, "+") {
			t.Fatalf("rpmVersion(%q, %q) = %q, %q (%v, %v)", pair[0], pair[1], older, newer, err1, err2)
		}
		out, err := exec.Command(rpm, "--eval", "%{lua: print(rpm.vercmp('"+older+"', '"+newer+"'))}").Output()
		if err != nil || strings.TrimSpace(string(out)) != "-1" {
			t.Errorf("rpm does not sort %s (from %s) before %s (from %s): %q %v", older, pair[0], newer, pair[1], out, err)
		}
	}
}

// The deb's changelog is one dpkg-parsechangelog reads: each entry's
// heading with a distribution and urgency, its changes wrapped to 80
// columns, and the maintainer's trailer with an RFC 2822 date.
func TestDebianChangelogParses(t *testing.T) {
	parse, err := exec.LookPath("dpkg-parsechangelog")
	if err != nil {
		t.Fatalf("dpkg-parsechangelog (dpkg-dev) is needed to read the changelog as dpkg does: %v", err)
	}
	t.Chdir("../..") // deploy/pkg runs from the repository's root (make packages)
	t.Setenv("SOURCE_DATE_EPOCH", "1796461479")
	dir := t.TempDir()
	const maintainer = "A Fork <fork@example.org>"
	if path, err := writeChangelog(dir, "deb", "0.289+g9d50b08", maintainer); err != nil || path != "" {
		t.Fatalf("writeChangelog(deb) = %q, %v; want the deb's written to changelog.gz", path, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "changelog.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	text, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(text), "\n") {
		if len(line) > 80 && !strings.HasPrefix(line, " -- ") {
			t.Errorf("line %d is %d columns: %q", i+1, len(line), line)
		}
	}
	plain := filepath.Join(dir, "changelog")
	if err := os.WriteFile(plain, text, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(parse, "-l", plain, "--all").CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-parsechangelog: %v\n%s\n%s", err, out, text)
	}
	for _, want := range []string{"Version: 0.289+g9d50b08", "Distribution: unstable", "Urgency: medium",
		"Maintainer: " + maintainer, "Date: Sat, 05 Dec 2026 09:04:39 +0000"} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("dpkg-parsechangelog does not give %q:\n%s", want, out)
		}
	}
	// The kept entries follow, in order.
	if n := strings.Count(string(text), ") unstable; urgency=medium\n"); n < 2 {
		t.Errorf("%d entries, want this build's and deploy/packaging/changelog.yaml's:\n%s", n, text)
	}
}

// The rpm's newest %changelog entry names version-release, as rpmlint's
// incoherent-version-in-changelog check wants.
func TestRPMChangelogNamesRelease(t *testing.T) {
	t.Chdir("../..")
	path, err := writeChangelog(t.TempDir(), "rpm", "0.289.g9d50b08", "A Fork <fork@example.org>")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var entries []changelogEntry
	if err := yaml.Unmarshal(data, &entries); err != nil {
		t.Fatal(err)
	}
	if len(entries) < 2 || entries[0].Semver != "0.289.g9d50b08-"+rpmRelease || entries[0].Packager != "A Fork <fork@example.org>" {
		t.Errorf("newest entry %+v of %d, want 0.289.g9d50b08-%s by A Fork", entries[0], len(entries), rpmRelease)
	}
}
