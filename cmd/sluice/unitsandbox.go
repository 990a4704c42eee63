package main

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// unitDirs are where systemd finds sluice.service and its drop-ins, most
// precedent first; tests point them elsewhere.
var unitDirs = []string{"/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}

// unitSandbox is what the installed sluice.service lets the agent write.
type unitSandbox struct {
	// Unit is the unit file read.
	Unit string
	// Strict: ProtectSystem=strict, so every directory but Writable (and
	// the private /tmp of PrivateTmp=) is read-only to the agent.
	Strict bool
	// Writable are RuntimeDirectory= (under /run), StateDirectory= (under
	// /var/lib) and ReadWritePaths=.
	Writable []string
	// PrivateTmp: /tmp and /var/tmp are the unit's own, out of reach of
	// every other process (sluice status among them).
	PrivateTmp bool
}

// installedSandbox reads sluice.service and its drop-ins as systemd would
// (the first unit file found, then every sluice.service.d/*.conf by name,
// a name in a more precedent directory masking the same name in a later
// one; a later assignment overrides, an empty one resets a list). ok is
// false when no unit is installed here.
func installedSandbox() (sb unitSandbox, ok bool) {
	var files []string
	for _, dir := range unitDirs {
		if p := filepath.Join(dir, "sluice.service"); fileExists(p) {
			files = append(files, p)
			break
		}
	}
	if len(files) == 0 {
		return sb, false
	}
	sb.Unit = files[0]
	dropIns := map[string]string{}
	for _, dir := range unitDirs {
		matches, _ := filepath.Glob(filepath.Join(dir, "sluice.service.d", "*.conf"))
		for _, m := range matches {
			if _, seen := dropIns[filepath.Base(m)]; !seen {
				dropIns[filepath.Base(m)] = m
			}
		}
	}
	names := make([]string, 0, len(dropIns))
	for n := range dropIns {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		files = append(files, dropIns[n])
	}
	lists := map[string][]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		section := ""
		s := bufio.NewScanner(strings.NewReader(string(data)))
		for s.Scan() {
			line := strings.TrimSpace(s.Text())
			switch {
			case line == "" || line[0] == '#' || line[0] == ';':
				continue
			case line[0] == '[':
				section = line
				continue
			}
			key, value, found := strings.Cut(line, "=")
			if !found || section != "[Service]" {
				continue
			}
			key, value = strings.TrimSpace(key), strings.TrimSpace(value)
			switch key {
			case "ProtectSystem":
				sb.Strict = value == "strict"
			case "PrivateTmp":
				sb.PrivateTmp = value == "yes" || value == "true" || value == "on" || value == "1"
			case "RuntimeDirectory", "StateDirectory", "ReadWritePaths":
				if value == "" {
					lists[key] = nil
				}
				lists[key] = append(lists[key], strings.Fields(value)...)
			}
		}
	}
	for key, base := range map[string]string{"RuntimeDirectory": "/run", "StateDirectory": "/var/lib", "ReadWritePaths": "/"} {
		for _, p := range lists[key] {
			sb.Writable = append(sb.Writable, filepath.Join(base, strings.TrimLeft(p, "-+")))
		}
	}
	slices.Sort(sb.Writable)
	return sb, true
}

// allows reports whether the unit lets the agent create a socket at path.
func (sb unitSandbox) allows(path string) bool {
	if !sb.Strict {
		return true
	}
	real := resolveExisting(filepath.Dir(path))
	for _, w := range sb.Writable {
		if real == w || strings.HasPrefix(real, strings.TrimSuffix(w, "/")+"/") {
			return true
		}
	}
	// PrivateTmp's /tmp is writable, but private: allows says yes, and
	// reachable says the rest.
	return sb.PrivateTmp && inTmp(real)
}

// reachable reports whether a socket the agent makes at path is one other
// processes can reach (not in the unit's private /tmp).
func (sb unitSandbox) reachable(path string) bool {
	return !sb.PrivateTmp || !inTmp(resolveExisting(filepath.Dir(path)))
}

func inTmp(p string) bool {
	for _, t := range []string{"/tmp", "/var/tmp"} {
		if p == t || strings.HasPrefix(p, t+"/") {
			return true
		}
	}
	return false
}

// resolveExisting resolves the symbolic links of the part of p that exists
// (/var/run → /run) and keeps the rest as written.
func resolveExisting(p string) string {
	var rest []string
	for dir := p; ; dir = filepath.Dir(dir) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(append([]string{real}, rest...)...)
		}
		if dir == "/" || dir == "." {
			return p
		}
		rest = append([]string{filepath.Base(dir)}, rest...)
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
