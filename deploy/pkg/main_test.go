package main

import (
	"os/exec"
	"strings"
	"testing"
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
