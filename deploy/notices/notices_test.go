package notices_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/deploy/notices"
)

// root is the agent's module, whose ./cmd/sluice the packages ship.
const root = "../.."

// releaseArches reads RELEASE_ARCHES from the Makefile: the binaries make
// packages builds, whose modules the notices must cover.
func releaseArches(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RELEASE_ARCHES\s*:=\s*(.+)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("no RELEASE_ARCHES in the Makefile")
	}
	return strings.Fields(string(m[1]))
}

// goOut runs the go command in dir as the release builds do.
func goOut(t *testing.T, dir, arch string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0", "GOOS=linux")
	if arch != "" {
		cmd.Env = append(cmd.Env, "GOARCH="+arch)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out)
}

// sections splits rendered notices into each component's part, by its
// heading ("path version").
func sections(text string) map[string]string {
	const rule = "================================================================================"
	out := map[string]string{}
	parts := strings.Split(text, "\n"+rule+"\n")
	// parts: summary, heading, body, heading, body…
	for i := 1; i+1 < len(parts); i += 2 {
		out[strings.TrimSpace(parts[i])] = parts[i+1]
	}
	return out
}

// isLicense names license and notice files, as the reviewer of a
// module's tree would look for them (kept apart from the package's own
// pattern on purpose).
func isLicense(name string) bool {
	n := strings.ToUpper(name)
	for _, p := range []string{"LICENSE", "LICENCE", "COPYING", "NOTICE", "PATENTS"} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// missing lists what text lacks: every module `go list -deps` links into
// ./cmd/sluice for arches, each with every license and notice file of its
// root and of the directories from a linked package up to it, verbatim;
// and the Go standard library with its LICENSE. It computes the list
// itself, as the issue states it, not through the package under test.
func missing(t *testing.T, text string, arches []string) []string {
	t.Helper()
	got := sections(text)
	var miss []string
	// module "path version" → its directory; linked package directories.
	modDir := map[string]string{}
	pkgDirs := map[string]map[string]bool{}
	for _, arch := range arches {
		list := goOut(t, root, arch, "list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}", "./cmd/sluice")
		dirs := goOut(t, root, arch, "list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}}\t{{.Dir}}\t{{$.Dir}}{{end}}", "./cmd/sluice")
		linked := map[string]bool{}
		for _, l := range strings.Split(list, "\n") {
			if f := strings.Fields(l); len(f) == 2 { // the main module has no version
				linked[l] = true
			}
		}
		if len(linked) < 10 {
			t.Fatalf("go list -deps (GOARCH=%s) listed %d modules: %q", arch, len(linked), list)
		}
		for _, l := range strings.Split(dirs, "\n") {
			f := strings.Split(l, "\t")
			if len(f) != 3 || !linked[f[0]] {
				continue
			}
			modDir[f[0]] = f[1]
			if pkgDirs[f[0]] == nil {
				pkgDirs[f[0]] = map[string]bool{}
			}
			pkgDirs[f[0]][f[2]] = true
		}
		for m := range linked {
			if modDir[m] == "" {
				t.Fatalf("%s: no directory in the module cache", m)
			}
		}
	}
	for mod, dir := range modDir {
		body, ok := got[mod]
		for heading, b := range got {
			if strings.HasPrefix(heading, mod+" => ") { // a replaced module
				body, ok = b, true
			}
		}
		if !ok {
			miss = append(miss, mod+": no section")
			continue
		}
		seen := map[string]bool{}
		terms := 0
		for d := range pkgDirs[mod] {
			for ; ; d = filepath.Dir(d) {
				if seen[d] {
					break
				}
				seen[d] = true
				entries, err := os.ReadDir(d)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range entries {
					if e.IsDir() || !isLicense(e.Name()) {
						continue
					}
					data, err := os.ReadFile(filepath.Join(d, e.Name()))
					if err != nil {
						t.Fatal(err)
					}
					rel, _ := filepath.Rel(dir, filepath.Join(d, e.Name()))
					if !strings.Contains(body, "--- "+filepath.ToSlash(rel)+"\n\n"+string(data)) {
						miss = append(miss, mod+": "+rel)
					}
					if u := strings.ToUpper(e.Name()); strings.HasPrefix(u, "LICEN") || strings.HasPrefix(u, "COPYING") {
						terms++
					}
				}
				if d == dir || !strings.HasPrefix(d, dir) {
					break
				}
			}
		}
		if terms == 0 {
			miss = append(miss, mod+": no license file in the module")
		}
	}
	env := strings.Fields(goOut(t, root, "", "env", "GOROOT", "GOVERSION"))
	license, err := os.ReadFile(filepath.Join(env[0], "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got["Go standard library "+env[1]], "--- LICENSE\n\n"+string(license)) {
		miss = append(miss, "Go standard library "+env[1])
	}
	return miss
}

// Every module linked into the packaged binaries appears in the notices
// with its license texts, and so does the standard library.
func TestNoticesCoverEveryLinkedModule(t *testing.T) {
	arches := releaseArches(t)
	text, err := notices.Generate(root, arches)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missing(t, string(text), arches) {
		t.Errorf("THIRD_PARTY_NOTICES lacks %s", m)
	}
	if !strings.Contains(string(text), "libbpf headers") || !strings.Contains(string(text), "Copyright (c) 2015 The Libbpf Authors") {
		t.Error("THIRD_PARTY_NOTICES lacks the libbpf headers' license (bpf/include)")
	}

	// The check catches a module left out, and a license text cut short.
	s := sections(string(text))
	for heading, body := range s {
		if !strings.HasPrefix(heading, "github.com/prometheus/client_golang ") {
			continue
		}
		cut := strings.Replace(string(text), body, "", 1)
		if m := missing(t, cut, arches); len(m) == 0 {
			t.Errorf("notices without %s pass the check", heading)
		}
		short := strings.Replace(string(text), "Apache License", "Apache Licence", 1)
		if m := missing(t, short, arches); len(m) == 0 {
			t.Error("notices with an altered license text pass the check")
		}
		return
	}
	t.Error("github.com/prometheus/client_golang has no section; the split is broken")
}

// The packages' license field names every license the notices find, and
// each component's license is one the classifier knows (a new one must be
// reviewed and named in deploy/nfpm.yaml).
func TestPackageLicenseNamesEveryLicense(t *testing.T) {
	var cfg struct {
		License string `yaml:"license"`
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "nfpm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, tok := range regexp.MustCompile(`[A-Za-z0-9.+-]+`).FindAllString(cfg.License, -1) {
		ids[tok] = true
	}
	for _, own := range []string{"Apache-2.0", "MIT", "GPL-2.0-only"} {
		if !ids[own] {
			t.Errorf("deploy/nfpm.yaml license %q lacks %s (sluice's own: LICENSE, NOTICE)", cfg.License, own)
		}
	}
	if !strings.HasPrefix(cfg.License, "Apache-2.0 AND (MIT OR GPL-2.0-only)") {
		t.Errorf("deploy/nfpm.yaml license %q does not start with sluice's own terms", cfg.License)
	}
	components, err := notices.Linked(root, releaseArches(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range components {
		spdx := c.SPDX()
		if len(spdx) == 0 {
			t.Errorf("%s %s: license not recognised; review it and name it in deploy/nfpm.yaml", c.Name, c.Version)
		}
		for _, id := range spdx {
			if !ids[id] {
				t.Errorf("%s %s is %s, which deploy/nfpm.yaml's license %q does not name", c.Name, c.Version, id, cfg.License)
			}
		}
	}
}

// The repository carries the texts NOTICE and the license field name.
func TestRepositoryLicenseFiles(t *testing.T) {
	for file, want := range map[string]string{
		"LICENSE":                   "Apache License\n                           Version 2.0, January 2004",
		"LICENSES/MIT.txt":          "Permission is hereby granted, free of charge",
		"LICENSES/GPL-2.0-only.txt": "GNU GENERAL PUBLIC LICENSE\n                       Version 2, June 1991",
		"NOTICE":                    "MIT OR GPL-2.0-only",
	} {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Error(err)
			continue
		}
		if !strings.Contains(string(data), want) {
			t.Errorf("%s does not contain %q", file, want)
		}
	}
	// The BPF object's declaration is the one NOTICE describes.
	tc, err := os.ReadFile(filepath.Join(root, "bpf", "tc.c"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tc), `char LICENSE[] SEC("license") = "Dual MIT/GPL";`) {
		t.Error(`bpf/tc.c no longer declares "Dual MIT/GPL": update NOTICE, deploy/nfpm.yaml's license and deploy/packaging/copyright`)
	}
}

// A linked module without a license file fails the build of the notices
// instead of shipping without its terms; with one, its section names the
// replacement it came from.
func TestLinkedRefusesAModuleWithoutLicense(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/app\n\ngo 1.22\n\nrequire example.com/dep v1.0.0\n\nreplace example.com/dep => ./dep\n")
	write("cmd/sluice/main.go", "package main\n\nimport \"example.com/dep\"\n\nfunc main() { dep.F() }\n")
	write("dep/go.mod", "module example.com/dep\n\ngo 1.22\n")
	write("dep/dep.go", "package dep\n\nfunc F() {}\n")
	write("dep/NOTICE", "a notice is not a license\n")
	write("bpf/include/LICENSE.BSD-2-Clause", "Redistribution and use in source and binary forms\n")
	_, err := notices.Linked(dir, []string{"amd64"})
	if err == nil || !strings.Contains(err.Error(), "example.com/dep") {
		t.Fatalf("Linked with an unlicensed module: %v, want an error naming it", err)
	}
	write("dep/LICENSE", "Permission is hereby granted, free of charge, to any person obtaining a copy\n")
	c, err := notices.Linked(dir, []string{"amd64"})
	if err != nil {
		t.Fatal(err)
	}
	text := string(notices.Render(c, []string{"amd64"}))
	if !strings.Contains(text, "example.com/dep v1.0.0 => ./dep") || !strings.Contains(text, "--- NOTICE\n\na notice is not a license\n") {
		t.Errorf("notices:\n%s", text)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		name, text, want string
	}{
		{"LICENSE", "Apache License\n Version 2.0, January 2004", "Apache-2.0"},
		{"LICENSE.md", "# MIT License\nPermission is hereby granted, free of charge, to any person obtaining a copy", "MIT"},
		{"LICENSE", "Redistribution and use in source and binary forms ... * Neither the name of Google Inc. nor", "BSD-3-Clause"},
		{"LICENSE", "Redistribution and use in source and binary forms ... 2. Redistributions in binary form", "BSD-2-Clause"},
		{"NOTICE", "Apache License Version 2.0", ""},
		{"PATENTS", "Additional IP Rights Grant (Patents)", ""},
		{"LICENSE", "Do what you want.", ""},
	} {
		if got := strings.Join(notices.Classify(c.name, c.text), " AND "); got != c.want {
			t.Errorf("Classify(%s, %q) = %q, want %q", c.name, c.text, got, c.want)
		}
	}
}
