// Package notices writes THIRD_PARTY_NOTICES, the license and notice texts
// of everything sluice's binary contains that sluice did not write: the Go
// modules it links, the Go standard library, and the libbpf headers its
// embedded BPF object is compiled with. deploy/pkg calls it for every
// package build, so the file always matches the binary being packaged.
// The texts come from the module cache (`go list` downloads what is
// missing through GOPROXY), never from anywhere else.
package notices

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// FileName is the notices' name in the packages (/usr/share/doc/sluice/).
const FileName = "THIRD_PARTY_NOTICES"

// licenseFile matches the names of files that carry license terms or
// notices Apache-2.0 §4(d) asks to pass on: LICENSE, LICENSE.txt,
// LICENSE.md, LICENSE.libyaml, COPYING, NOTICE, PATENTS.
var licenseFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying|notice|patents)([._-].*)?$`)

// IsLicenseFile reports whether a file of this name is passed on.
func IsLicenseFile(name string) bool { return licenseFile.MatchString(name) }

// Component is one part of the binary under its own license.
type Component struct {
	// Name and Version: a module path and version, "Go standard library"
	// and the toolchain's version, or what the BPF object embeds.
	Name, Version string
	// Files: the license and notice files, each named by its path under
	// the component's root.
	Files []File
}

// File is one license or notice text.
type File struct {
	Name, Text string
}

// SPDX is the licenses the component's files show, by their SPDX
// identifiers (see Classify), sorted.
func (c Component) SPDX() []string {
	seen := map[string]bool{}
	for _, f := range c.Files {
		for _, id := range Classify(f.Name, f.Text) {
			seen[id] = true
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Classify names the licenses a license file's text is, by SPDX
// identifier; nil for NOTICE and PATENTS files and for texts it does not
// recognise (the notices then say "see the text below"). It knows the
// licenses sluice's dependencies use; deploy/notices' tests fail when a
// dependency brings one it does not know, so that the packages' license
// field is reviewed.
func Classify(name, text string) []string {
	base := strings.ToUpper(path.Base(name))
	if strings.HasPrefix(base, "NOTICE") || strings.HasPrefix(base, "PATENTS") {
		return nil
	}
	t := strings.ToLower(strings.Join(strings.Fields(text), " "))
	var ids []string
	if strings.Contains(t, "apache license") && strings.Contains(t, "version 2.0") {
		ids = append(ids, "Apache-2.0")
	}
	if strings.Contains(t, "permission is hereby granted, free of charge, to any person obtaining a copy") {
		ids = append(ids, "MIT")
	}
	if strings.Contains(t, "redistribution and use in source and binary forms") {
		if strings.Contains(t, "neither the name") || strings.Contains(t, "may be used to endorse or promote products") {
			ids = append(ids, "BSD-3-Clause")
		} else {
			ids = append(ids, "BSD-2-Clause")
		}
	}
	return ids
}

// Linked lists the components of the binary `go build ./cmd/sluice` makes
// in the module at root for each of arches, built as make packages builds
// the release binaries (GOWORK=off, CGO_ENABLED=0, GOOS=linux): every
// module that provides a linked package, with the license files of its
// root and of every directory between a linked package and the root (a
// module may carry code under another license in a subdirectory); the Go
// standard library; and the libbpf headers in root/bpf/include. It fails
// when a component has no license file: the packages must not ship
// without its terms.
func Linked(root string, arches []string) ([]Component, error) {
	type module struct {
		path, version, dir string
		dirs               map[string]bool // directories of linked packages
	}
	mods := map[string]*module{}
	std := false
	for _, arch := range arches {
		pkgs, err := listDeps(root, arch)
		if err != nil {
			return nil, err
		}
		for _, p := range pkgs {
			if p.Standard {
				std = true
				continue
			}
			m := p.Module
			if m == nil || m.Main {
				continue // sluice's own packages: LICENSE and NOTICE
			}
			version, dir := m.Version, m.Dir
			if r := m.Replace; r != nil {
				version = m.Version + " => " + r.Path + " " + r.Version
				dir = r.Dir
			}
			if dir == "" {
				return nil, fmt.Errorf("module %s %s is not in the module cache (go mod download)", m.Path, version)
			}
			key := m.Path + " " + version
			if mods[key] == nil {
				mods[key] = &module{path: m.Path, version: version, dir: dir, dirs: map[string]bool{}}
			}
			mods[key].dirs[p.Dir] = true
		}
	}
	var out []Component
	keys := make([]string, 0, len(mods))
	for k := range mods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		m := mods[k]
		c := Component{Name: m.path, Version: m.version}
		// The module root, then each directory from a linked package up to it.
		dirs := map[string]bool{m.dir: true}
		for d := range m.dirs {
			for ; strings.HasPrefix(d, m.dir+string(filepath.Separator)); d = filepath.Dir(d) {
				dirs[d] = true
			}
		}
		files, err := licenseFiles(m.dir, dirs)
		if err != nil {
			return nil, fmt.Errorf("module %s: %w", k, err)
		}
		c.Files = files
		out = append(out, c)
	}
	if std {
		c, err := stdlib(root)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	libbpf := filepath.Join(root, "bpf", "include")
	files, err := licenseFiles(libbpf, map[string]bool{libbpf: true})
	if err != nil {
		return nil, fmt.Errorf("the libbpf headers: %w", err)
	}
	out = append(out, Component{Name: "libbpf headers (bpf/include), compiled into the embedded BPF object", Files: files})
	for _, c := range out {
		if !slices.ContainsFunc(c.Files, func(f File) bool { return licenseTerms.MatchString(path.Base(f.Name)) }) {
			return nil, fmt.Errorf("%s %s: no LICENSE or COPYING file, only notices", c.Name, c.Version)
		}
	}
	return out, nil
}

// licenseTerms matches the files that state terms (not NOTICE, PATENTS).
var licenseTerms = regexp.MustCompile(`(?i)^(licen[cs]e|copying)([._-].*)?$`)

// licenseFiles reads the license files directly in each of dirs, named by
// their path under root, sorted by it. None found is an error.
func licenseFiles(root string, dirs map[string]bool) ([]File, error) {
	var out []File
	for d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if !e.Type().IsRegular() || !IsLicenseFile(e.Name()) {
				continue
			}
			data, err := os.ReadFile(filepath.Join(d, e.Name()))
			if err != nil {
				return nil, err
			}
			rel, err := filepath.Rel(root, filepath.Join(d, e.Name()))
			if err != nil {
				return nil, err
			}
			out = append(out, File{Name: filepath.ToSlash(rel), Text: string(data)})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no LICENSE, COPYING, NOTICE or PATENTS file in %s", root)
	}
	// The root's own files first, then subdirectories', each by name.
	sort.Slice(out, func(i, j int) bool {
		di, dj := strings.Count(out[i].Name, "/"), strings.Count(out[j].Name, "/")
		if (di == 0) != (dj == 0) {
			return di == 0
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// stdlib is the Go standard library of the toolchain that builds root's
// module (GOTOOLCHAIN may select another than the one on PATH).
func stdlib(root string) (Component, error) {
	out, err := goCmd(root, "", "env", "GOROOT", "GOVERSION")
	if err != nil {
		return Component{}, err
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return Component{}, fmt.Errorf("go env GOROOT GOVERSION: %q", out)
	}
	files, err := licenseFiles(f[0], map[string]bool{f[0]: true})
	if err != nil {
		return Component{}, fmt.Errorf("the Go standard library: %w", err)
	}
	return Component{Name: "Go standard library", Version: f[1], Files: files}, nil
}

type listedPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	Module     *listedModule
}

type listedModule struct {
	Path, Version, Dir string
	Main               bool
	Replace            *listedModule
}

// listDeps is `go list -deps ./cmd/sluice` for linux/arch, as the release
// builds it.
func listDeps(root, arch string) ([]listedPackage, error) {
	out, err := goCmd(root, arch, "list", "-deps", "-json=ImportPath,Dir,Standard,Module", "./cmd/sluice")
	if err != nil {
		return nil, err
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list -deps: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("go list -deps ./cmd/sluice listed nothing")
	}
	return pkgs, nil
}

// goCmd runs the go command in root with the release builds' environment.
func goCmd(root, arch string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0", "GOOS=linux")
	if arch != "" {
		cmd.Env = append(cmd.Env, "GOARCH="+arch)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s (GOARCH=%s): %w\n%s", strings.Join(args, " "), arch, err, stderr.Bytes())
	}
	return out, nil
}

const rule = "================================================================================"

// Render writes the notices: a summary of the components with their
// licenses, then each component's files in full.
func Render(components []Component, arches []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `Third-party notices for sluice

/usr/bin/sluice is a static Go binary (linux/%s). Besides sluice's own code
(Apache-2.0; its BPF programs MIT OR GPL-2.0-only: /usr/share/doc/sluice/LICENSE,
NOTICE and LICENSES/), it contains the components below, each under its own
license, whose texts follow in full.

Generated by deploy/notices from `+"`go list -deps ./cmd/sluice`"+` and the Go module
cache when the package was built. Do not edit.

`, strings.Join(arches, ", linux/"))
	for _, c := range components {
		ids := c.SPDX()
		lic := strings.Join(ids, " AND ")
		if len(ids) == 0 {
			lic = "see the text below"
		}
		fmt.Fprintf(&b, "  %s\n      %s\n", strings.TrimSpace(c.Name+" "+c.Version), lic)
	}
	for _, c := range components {
		fmt.Fprintf(&b, "\n%s\n%s\n%s\n", rule, strings.TrimSpace(c.Name+" "+c.Version), rule)
		for _, f := range c.Files {
			fmt.Fprintf(&b, "\n--- %s\n\n%s", f.Name, f.Text)
			if !strings.HasSuffix(f.Text, "\n") {
				b.WriteByte('\n')
			}
		}
	}
	return b.Bytes()
}

// Generate is Linked then Render: the notices for the binary built from
// the module at root for arches.
func Generate(root string, arches []string) ([]byte, error) {
	c, err := Linked(root, arches)
	if err != nil {
		return nil, err
	}
	return Render(c, arches), nil
}
