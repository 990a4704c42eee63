// Command deb builds sluice's Debian package with nfpm as a library
// (make deb): the binary in /usr/bin, the unit in /usr/lib/systemd/system,
// /etc/sluice/sluice.yaml as a conffile, the alert rules and dashboard
// under /usr/share/sluice, and maintainer scripts that reload systemd but
// never enable or start an agent nobody has configured.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
)

func main() {
	version := flag.String("version", "", "the version `git describe` gave (what sluice version prints)")
	binary := flag.String("binary", "bin/sluice", "the stamped binary (make build)")
	outDir := flag.String("out", "dist", "directory for sluice_<version>_amd64.deb")
	flag.Parse()
	path, err := build(*version, *binary, *outDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deb:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

// debVersion turns deploy/version.sh's version into a Debian version: a
// tag v1.2.3 gives 1.2.3, commits past it 1.2.3+4+gabc1234, and an
// untagged tree's 0.<commits>-gabc1234 gives 0.<commits>+gabc1234, which
// sorts by age. A bare hash (an older `git describe --always`) gives
// 0~gabc1234 (Debian versions start with a digit).
func debVersion(describe string) (string, error) {
	v := strings.TrimPrefix(strings.TrimSpace(describe), "v")
	if v == "" {
		return "", fmt.Errorf("empty version")
	}
	if !regexp.MustCompile(`^[0-9]+\.[0-9]`).MatchString(v) {
		v = "0~g" + v
	}
	v = strings.ReplaceAll(v, "-", "+")
	if !regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`).MatchString(v) {
		return "", fmt.Errorf("version %q does not make a Debian version", describe)
	}
	return v, nil
}

const unitPath = "/usr/lib/systemd/system/sluice.service"

func build(describe, binary, outDir string) (string, error) {
	version, err := debVersion(describe)
	if err != nil {
		return "", err
	}
	unit, err := os.ReadFile("deploy/sluice.service")
	if err != nil {
		return "", err
	}
	// The unit names the binary where the package puts it.
	unit = []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/sluice", "/usr/bin/sluice"))
	scratch, err := os.MkdirTemp("", "sluice-deb")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(scratch)
	write := func(name, text string) string {
		p := filepath.Join(scratch, name)
		if err == nil {
			err = os.WriteFile(p, []byte(text), 0o755)
		}
		return p
	}
	unitFile := write("sluice.service", string(unit))
	postinst := write("postinst", postinstScript)
	prerm := write("prerm", prermScript)
	postrm := write("postrm", postrmScript)
	if err != nil {
		return "", err
	}
	file := func(src, dst string, mode os.FileMode) *files.Content {
		return &files.Content{Source: src, Destination: dst, FileInfo: &files.ContentFileInfo{Mode: mode}}
	}
	config := file("deploy/sluice.yaml", "/etc/sluice/sluice.yaml", 0o640)
	config.Type = files.TypeConfigNoReplace
	info := &nfpm.Info{
		Name: "sluice", Arch: "amd64", Platform: "linux", Version: version, VersionSchema: "none",
		Section: "net", Priority: "optional", Maintainer: "sluice developers <sluice@localhost>",
		Description: "Elastic bandwidth quotas for Kafka broker hosts, enforced at the NIC with eBPF.\n" +
			"Reservations that are never throttled, weights for sharing idle capacity and\n" +
			"hard limits per client-id and topic-partition, with no change to brokers or clients.",
		License: "proprietary",
		Overridables: nfpm.Overridables{
			Contents: files.Contents{
				file(binary, "/usr/bin/sluice", 0o755),
				file(unitFile, unitPath, 0o644),
				config,
				file("deploy/prometheus/sluice-rules.yaml", "/usr/share/sluice/prometheus/sluice-rules.yaml", 0o644),
				file("deploy/prometheus/sluice-rules.test.yaml", "/usr/share/sluice/prometheus/sluice-rules.test.yaml", 0o644),
				file("deploy/grafana/sluice-dashboard.json", "/usr/share/sluice/grafana/sluice-dashboard.json", 0o644),
				file("README.md", "/usr/share/doc/sluice/README.md", 0o644),
				file("docs/runbook.md", "/usr/share/doc/sluice/runbook.md", 0o644),
			},
			Scripts: nfpm.Scripts{PostInstall: postinst, PreRemove: prerm, PostRemove: postrm},
		},
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", err
	}
	if err := nfpm.Validate(info); err != nil {
		return "", err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(outDir, deb.Default.ConventionalFileName(info))
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	if err := deb.Default.Package(info, f); err != nil {
		f.Close()
		os.Remove(out)
		return "", err
	}
	return out, f.Close()
}

// The maintainer scripts. systemd is told about the unit, never asked to
// enable or start it: an agent attaches to the broker's NIC, and the
// shipped /etc/sluice/sluice.yaml must be edited first (interfaces,
// listeners, capacities). On removal the agent is stopped and what it
// left attached (keep_attached_on_exit) is unloaded, as make uninstall does.
const postinstScript = `#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
if [ "$1" = configure ] && [ -z "$2" ]; then
	echo "sluice: edit /etc/sluice/sluice.yaml, check it with 'sluice check-config', then 'systemctl enable --now sluice'"
fi
# An upgrade restarts a running agent on the new binary (it keeps the data
# path attached across the restart and re-adopts it); one that is not
# running stays stopped.
if [ "$1" = configure ] && [ -n "$2" ] && [ -d /run/systemd/system ]; then
	systemctl try-restart sluice.service || true
fi
`

const prermScript = `#!/bin/sh
set -e
if [ "$1" = remove ] || [ "$1" = deconfigure ]; then
	if [ -d /run/systemd/system ]; then
		systemctl disable --now sluice.service || true
	fi
	if [ -e /etc/sluice/sluice.yaml ]; then
		/usr/bin/sluice unload --config /etc/sluice/sluice.yaml || echo "sluice: unload failed; run 'sluice unload' by hand" >&2
	fi
fi
`

const postrmScript = `#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
if [ "$1" = purge ]; then
	rmdir /etc/sluice 2>/dev/null || true
fi
`
