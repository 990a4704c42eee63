package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func events(t *testing.T, es ...event) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, e := range es {
		line, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func TestDigestRepeatsTheFailedLeafsLines(t *testing.T) {
	const pkg = "example/e2e"
	in := events(t,
		event{Action: "run", Package: pkg, Test: "TestA"},
		event{Action: "output", Package: pkg, Test: "TestA/one", Output: "    a_test.go:10: the producer ran at 6.1 MB/s\n"},
		event{Action: "output", Package: pkg, Test: "TestA/two", Output: "    a_test.go:20: fine\n"},
		event{Action: "fail", Package: pkg, Test: "TestA/one"},
		event{Action: "pass", Package: pkg, Test: "TestA/two"},
		event{Action: "output", Package: pkg, Test: "TestA", Output: "--- FAIL: TestA (1.00s)\n"},
		event{Action: "fail", Package: pkg, Test: "TestA"},
		event{Action: "fail", Package: pkg},
	)
	in = append(in, []byte("# a line that is not an event\n")...)
	var out bytes.Buffer
	d := newDigest()
	if err := d.follow(bytes.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	live := out.String()
	if !strings.Contains(live, "a_test.go:20: fine") || !strings.Contains(live, "# a line that is not an event") {
		t.Errorf("the live output lost lines:\n%s", live)
	}
	out.Reset()
	d.write(&out)
	got := out.String()
	if !strings.Contains(got, "1 failed test(s)") || !strings.Contains(got, "--- "+pkg+" TestA/one\n    a_test.go:10: the producer ran at 6.1 MB/s") {
		t.Errorf("digest:\n%s", got)
	}
	if strings.Contains(got, "fine") || strings.Contains(got, "--- "+pkg+" TestA\n") {
		t.Errorf("the digest names a passed test or the failed leaf's parent:\n%s", got)
	}
}

func TestDigestKeepsTheLastLinesCut(t *testing.T) {
	d := newDigest()
	var es []event
	for i := range 3 * keptLines {
		es = append(es, event{Action: "output", Test: "TestB", Output: strings.Repeat("x", i) + "\n"})
	}
	es = append(es, event{Action: "output", Test: "TestB", Output: strings.Repeat("y", 2*lineCap) + "\n"}, event{Action: "fail", Test: "TestB"})
	if err := d.follow(bytes.NewReader(events(t, es...)), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	d.write(&out)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if n := len(lines) - 2; n != keptLines { // the heading and the test's name
		t.Fatalf("%d lines kept, want %d:\n%s", n, keptLines, out.String())
	}
	if last := strings.TrimSpace(lines[len(lines)-1]); len(last) != lineCap+len(" […]") {
		t.Errorf("the long line kept %d characters, want %d and a mark", len(last), lineCap)
	}
}

func TestDigestSaysNothingWhenAllPassed(t *testing.T) {
	d := newDigest()
	d.follow(bytes.NewReader(events(t, event{Action: "output", Test: "TestC", Output: "ok\n"}, event{Action: "pass", Test: "TestC"})), &bytes.Buffer{})
	var out bytes.Buffer
	d.write(&out)
	if out.Len() != 0 {
		t.Errorf("a passing run printed a digest: %q", out.String())
	}
}
