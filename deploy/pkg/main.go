// Command pkg builds sluice's packages, .deb and .rpm for each
// architecture, from the declarative deploy/nfpm.yaml with nfpm as a
// library (make packages). The static binaries come from make packages
// (dist/sluice_<version>_linux_<arch>); a binary this machine runs writes
// the man pages and completion scripts from its own command tree, so the
// packages document the commands they ship; deploy/notices writes
// THIRD_PARTY_NOTICES from the modules those binaries link, so the
// packages pass on the license of everything they contain.
package main

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
	"github.com/goreleaser/nfpm/v2/rpm"
	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/deploy/notices"
)

func main() {
	version := flag.String("version", "", "the version deploy/version.sh gave (what sluice version prints)")
	dist := flag.String("dist", "dist", "directory of the static binaries sluice_<version>_linux_<arch>; the packages are written there")
	native := flag.String("native", "bin/sluice", "a sluice binary this machine runs: it writes the man pages and completion scripts")
	arches := flag.String("arch", "amd64,arm64", "architectures to package")
	formats := flag.String("formats", "deb,rpm", "package formats")
	printVersion := flag.String("print-version", "", "print the package version of FORMAT (deb or rpm) for the version argument, and exit")
	flag.Parse()
	if *printVersion != "" {
		v, err := debVersion(flag.Arg(0))
		if *printVersion == "rpm" {
			v, err = rpmVersion(flag.Arg(0))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "pkg:", err)
			os.Exit(1)
		}
		fmt.Println(v)
		return
	}
	paths, err := build(*version, *dist, *native, strings.Split(*arches, ","), strings.Split(*formats, ","))
	if err != nil {
		fmt.Fprintln(os.Stderr, "pkg:", err)
		os.Exit(1)
	}
	for _, p := range paths {
		fmt.Println(p)
	}
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

// rpmVersion is the Debian version with its + as dots: rpm versions take
// no + before rpm 4.15, and rpmvercmp orders 0.202.gabc before
// 0.203.gdef, and 1.2.3 before 1.2.3.4.gabc, as dpkg orders theirs.
func rpmVersion(describe string) (string, error) {
	v, err := debVersion(describe)
	return strings.ReplaceAll(v, "+", "."), err
}

func build(describe, dist, native string, arches, formats []string) ([]string, error) {
	generated, err := os.MkdirTemp("", "sluice-pkg")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(generated)
	if err := generate(generated, native, arches); err != nil {
		return nil, err
	}
	maintainer, err := readMaintainer()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, format := range formats {
		version, err := debVersion(describe)
		if format == "rpm" {
			version, err = rpmVersion(describe)
		}
		if err != nil {
			return nil, err
		}
		changelog, err := writeChangelog(generated, format, version, maintainer)
		if err != nil {
			return nil, err
		}
		for _, arch := range arches {
			binary := filepath.Join(dist, fmt.Sprintf("sluice_%s_linux_%s", describe, arch))
			if _, err := os.Stat(binary); err != nil {
				return nil, fmt.Errorf("the %s binary: %w (make packages builds it)", arch, err)
			}
			env := map[string]string{"VERSION": version, "ARCH": arch, "BINARY": binary, "GENERATED": generated, "CHANGELOG": changelog}
			path, err := pack(format, env, dist)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", format, arch, err)
			}
			out = append(out, path)
		}
	}
	return out, nil
}

func pack(format string, env map[string]string, dist string) (string, error) {
	config, err := nfpm.ParseFileWithEnvMapping("deploy/nfpm.yaml", func(k string) string { return env[k] })
	if err != nil {
		return "", err
	}
	info, err := config.Get(format)
	if err != nil {
		return "", err
	}
	if info.Contents, err = expandDocGlobs(info.Contents); err != nil {
		return "", err
	}
	if format == "rpm" {
		// The rpm's %changelog names version-release; the deb's
		// changelog is a file in its contents (changelog.gz).
		info.Release = rpmRelease
		info.Changelog = env["CHANGELOG"]
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return "", err
	}
	if err := nfpm.Validate(info); err != nil {
		return "", err
	}
	var packager nfpm.Packager = deb.Default
	if format == "rpm" {
		packager = rpm.DefaultRPM
	} else if format != "deb" {
		return "", fmt.Errorf("unknown package format %q (deb, rpm)", format)
	}
	out := filepath.Join(dist, packager.ConventionalFileName(info))
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	if err := packager.Package(info, f); err != nil {
		f.Close()
		os.Remove(out)
		return "", err
	}
	return out, f.Close()
}

// expandDocGlobs expands the globs of %doc and %license entries (the
// rpm's man pages), which nfpm expands only for plain files: one entry a
// match, in the directory the entry's dst names.
func expandDocGlobs(contents files.Contents) (files.Contents, error) {
	var out files.Contents
	for _, c := range contents {
		isDoc := c.Type == files.TypeRPMDoc || c.Type == files.TypeRPMLicense || c.Type == files.TypeRPMLicence
		if !isDoc || !strings.ContainsAny(c.Source, "*?[") {
			out = append(out, c)
			continue
		}
		if !strings.HasSuffix(c.Destination, "/") {
			return nil, fmt.Errorf("contents: %s is a glob, so its dst %s must be a directory (end in /)", c.Source, c.Destination)
		}
		matches, err := filepath.Glob(c.Source)
		if err != nil || len(matches) == 0 {
			return nil, fmt.Errorf("contents: %s matches nothing (%v)", c.Source, err)
		}
		for _, m := range matches {
			one := *c
			one.Source = m
			one.Destination = c.Destination + filepath.Base(m)
			out = append(out, &one)
		}
	}
	return out, nil
}

const unitPath = "/usr/lib/systemd/system/sluice.service"

// rpmRelease is the rpm's Release: the packaging of one version is built
// once, from the same tree.
const rpmRelease = "1"

// generate writes what the packages carry that is made, not kept: the
// unit naming the packaged binary, the man pages (gzipped) and the
// completion scripts, the last two by the native binary from its tree,
// and the third-party notices of what the binaries for arches link.
func generate(dir, native string, arches []string) error {
	third, err := notices.Generate(".", arches)
	if err != nil {
		return fmt.Errorf("third-party notices: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, notices.FileName), third, 0o644); err != nil {
		return err
	}
	unit, err := os.ReadFile("deploy/sluice.service")
	if err != nil {
		return err
	}
	// The unit names the binary where the package puts it.
	unit = []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/sluice", "/usr/bin/sluice"))
	if err := os.WriteFile(filepath.Join(dir, "sluice.service"), unit, 0o644); err != nil {
		return err
	}
	man := filepath.Join(dir, "man")
	if out, err := exec.Command(native, "man", "--out", man).CombinedOutput(); err != nil {
		return fmt.Errorf("%s man: %v\n%s", native, err, out)
	}
	pages, _ := filepath.Glob(filepath.Join(man, "*.1"))
	if len(pages) == 0 {
		return fmt.Errorf("%s man wrote no pages", native)
	}
	for _, p := range pages {
		if err := gzipFile(p); err != nil {
			return err
		}
	}
	for shell, name := range map[string]string{"bash": "sluice.bash", "zsh": "_sluice", "fish": "sluice.fish"} {
		script, err := exec.Command(native, "completion", shell).Output()
		if err != nil {
			return fmt.Errorf("%s completion %s: %w", native, shell, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), script, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// gzipFile replaces p with p.gz, with no name or time in the header, so
// that the same page makes the same bytes.
func gzipFile(p string) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	w.Write(data)
	if err := w.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(p+".gz", buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Remove(p)
}

// changelogEntry is one entry of chglog's format (what nfpm reads).
type changelogEntry struct {
	Semver   string    `yaml:"semver"`
	Date     time.Time `yaml:"date"`
	Packager string    `yaml:"packager"`
	Changes  []struct {
		Note string `yaml:"note"`
	} `yaml:"changes,omitempty"`
}

// readMaintainer returns deploy/nfpm.yaml's maintainer, whom the
// changelogs name for the version being packaged.
func readMaintainer() (string, error) {
	data, err := os.ReadFile("deploy/nfpm.yaml")
	if err != nil {
		return "", err
	}
	var config struct {
		Maintainer string `yaml:"maintainer"`
	}
	if err := yaml.Unmarshal(data, &config); err != nil {
		return "", fmt.Errorf("deploy/nfpm.yaml: %w", err)
	}
	if !regexp.MustCompile(`^[^<>]+ <[^<>@ ]+@[^<>@ ]+\.[^<>@ ]+>$`).MatchString(config.Maintainer) {
		return "", fmt.Errorf("deploy/nfpm.yaml: maintainer %q is not \"Name <address>\"", config.Maintainer)
	}
	return config.Maintainer, nil
}

// writeChangelog writes deploy/packaging/changelog.yaml under an entry for
// the version being packaged (dated by SOURCE_DATE_EPOCH when set), in
// maintainer's name. For the rpm it is chglog's YAML, which nfpm makes the
// %changelog of, the version there being version-release as rpmlint
// wants; for the deb it is changelog.gz, a Debian changelog (see
// debianChangelog), and the path returned is empty: nfpm would write its
// own, which dpkg-parsechangelog rejects, as changelog.Debian.gz, the name
// for a package whose version has a Debian revision (this one has none).
func writeChangelog(dir, format, version, maintainer string) (string, error) {
	data, err := os.ReadFile("deploy/packaging/changelog.yaml")
	if err != nil {
		return "", err
	}
	var kept []changelogEntry
	if err := yaml.Unmarshal(data, &kept); err != nil {
		return "", fmt.Errorf("deploy/packaging/changelog.yaml: %w", err)
	}
	date := time.Now().UTC().Truncate(time.Second)
	if epoch := os.Getenv("SOURCE_DATE_EPOCH"); epoch != "" {
		var secs int64
		if _, err := fmt.Sscan(epoch, &secs); err == nil {
			date = time.Unix(secs, 0).UTC()
		}
	}
	top := changelogEntry{Semver: version, Date: date, Packager: maintainer}
	top.Changes = append(top.Changes, struct {
		Note string `yaml:"note"`
	}{"this build; the README and docs/ under /usr/share/doc/sluice say what it does"})
	all := append([]changelogEntry{top}, kept...)
	switch format {
	case "deb":
		text, err := debianChangelog("sluice", all)
		if err != nil {
			return "", err
		}
		path := filepath.Join(dir, "changelog")
		if err := os.WriteFile(path, text, 0o644); err != nil {
			return "", err
		}
		return "", gzipFile(path)
	case "rpm":
		all[0].Semver += "-" + rpmRelease
	}
	out, err := yaml.Marshal(all)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "changelog-"+format+".yaml")
	return path, os.WriteFile(path, out, 0o644)
}

// debianChangelog formats entries, newest first, as deb-changelog(5) has
// it, which dpkg-parsechangelog and lintian read: a heading naming the
// version, distribution and urgency, the changes as "  * " items wrapped
// to 80 columns, and the trailer naming who and when (RFC 2822).
func debianChangelog(pkg string, entries []changelogEntry) ([]byte, error) {
	var b bytes.Buffer
	for i, e := range entries {
		if !regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`).MatchString(e.Semver) {
			return nil, fmt.Errorf("changelog entry %q: not a Debian version", e.Semver)
		}
		if len(e.Changes) == 0 {
			return nil, fmt.Errorf("changelog entry %s: no changes", e.Semver)
		}
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s (%s) unstable; urgency=medium\n\n", pkg, e.Semver)
		for _, c := range e.Changes {
			for j, line := range wrap(c.Note, 80-4) {
				prefix := "  * "
				if j > 0 {
					prefix = "    "
				}
				b.WriteString(prefix + line + "\n")
			}
		}
		fmt.Fprintf(&b, "\n -- %s  %s\n", e.Packager, e.Date.UTC().Format("Mon, 02 Jan 2006 15:04:05 -0700"))
	}
	return b.Bytes(), nil
}

// wrap breaks text into lines of at most width columns at spaces (a word
// longer than width has a line of its own).
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}
