package main

import "testing"

func TestDebVersion(t *testing.T) {
	for describe, want := range map[string]string{
		"v1.2.3":                  "1.2.3",
		"v1.2.3-4-gabc1234":       "1.2.3+4+gabc1234",
		"v1.2.3-4-gabc1234-dirty": "1.2.3+4+gabc1234+dirty",
		"abc1234":                 "0~gabc1234",
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
