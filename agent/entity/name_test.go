package entity

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestSafeNameKeepsOrdinaryNames(t *testing.T) {
	for _, name := range []string{"core-group", "consumer-orders-1", "façade", "日本語", "", strings.Repeat("a", MaxNameBytes)} {
		if got := SafeName(name); got != name {
			t.Errorf("SafeName(%q) = %q, want it unchanged", name, got)
		}
	}
}

func TestSafeNameRewritesHostileNames(t *testing.T) {
	hostile := []string{"\xff", "a\x00b", "\x1b[31mred\x1b[0m", strings.Repeat("x", 32<<10), strings.Repeat("\xfe", 32<<10),
		"a\\x00b", "new\nline", strings.Repeat("é", 150)}
	seen := map[string]string{}
	for _, raw := range hostile {
		got := SafeName(raw)
		if !utf8.ValidString(got) || len(got) > MaxNameBytes {
			t.Errorf("SafeName(%q): %q is not valid UTF-8 within %d bytes", raw[:min(len(raw), 20)], got, MaxNameBytes)
		}
		for _, r := range got {
			if !unicode.IsPrint(r) {
				t.Errorf("SafeName(%q): %q keeps a non-printable %U", raw[:min(len(raw), 20)], got, r)
			}
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%q and %q share the name %q", other[:min(len(other), 20)], raw[:min(len(raw), 20)], got)
		}
		seen[got] = raw
	}
	// A printable name that looks like an escape stays apart from the
	// bytes it spells.
	if SafeName("a\\x00b") == SafeName("a\x00b") {
		t.Error("a literal backslash sequence met the escaped NUL")
	}
}

func FuzzSafeName(f *testing.F) {
	for _, s := range []string{"core", "\xff", "a\x00", strings.Repeat("\\", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got := SafeName(raw)
		if !utf8.ValidString(got) || len(got) > MaxNameBytes {
			t.Fatalf("SafeName(%q) = %q", raw, got)
		}
		if SafeName(got) != got {
			t.Fatalf("SafeName is not stable on its own output: %q -> %q", got, SafeName(got))
		}
	})
}
