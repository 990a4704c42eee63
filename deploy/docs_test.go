package deploy_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The operator's documents, checked like code: the README's layout table
// names every Go package, every design section the code cites exists,
// and every relative link in the README and docs/ leads somewhere.

const repoRoot = ".." // deploy/ is one level below the repository's root

// packageDirs are the repository's directories holding Go files (every
// module's), as slash paths from the root.
func packageDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".go") {
			rel, err := filepath.Rel(repoRoot, filepath.Dir(path))
			if err != nil {
				return err
			}
			if rel = filepath.ToSlash(rel); !slices.Contains(dirs, rel) {
				dirs = append(dirs, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// section is a README section's text: from its "## " heading to the next.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	start := strings.Index(doc, "\n## "+heading+"\n")
	if start < 0 {
		t.Fatalf("README has no section %q", heading)
	}
	body := doc[start+len("\n## "+heading+"\n"):]
	if end := strings.Index(body, "\n## "); end >= 0 {
		body = body[:end]
	}
	return body
}

// layoutRows reads the README's layout table: one unbroken table (no
// paragraph inside it, no row after it), each row's first cell naming
// one or more directories in backquotes. It returns the directories the
// rows name and what is wrong with the table.
func layoutRows(t *testing.T, readme string) (named map[string]bool, problems []string) {
	t.Helper()
	lines := strings.Split(section(t, readme, "Layout"), "\n")
	first := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "|") })
	if first < 0 || first+2 > len(lines) {
		return nil, []string{"the Layout section has no table"}
	}
	named = map[string]bool{}
	end := first
	for end < len(lines) && strings.HasPrefix(lines[end], "|") {
		end++
	}
	for _, l := range lines[end:] {
		if strings.HasPrefix(strings.TrimSpace(l), "|") {
			problems = append(problems, fmt.Sprintf("the table is broken: a row after the text that ends it: %q", l))
		}
	}
	dir := regexp.MustCompile("`([^`]+)`")
	for _, row := range lines[first+2 : end] { // past the header and its rule
		cells := strings.Split(row, "|")
		if len(cells) < 4 {
			problems = append(problems, fmt.Sprintf("a row without two cells: %q", row))
			continue
		}
		for _, m := range dir.FindAllStringSubmatch(cells[1], -1) {
			named[strings.TrimSuffix(m[1], "/")] = true
		}
	}
	return named, problems
}

// Every directory holding Go code has a row of its own in the README's
// layout table (a row may name several, each in backquotes), so a new
// package is described where operators and contributors look for it.
func TestReadmeLayoutNamesEveryPackage(t *testing.T) {
	named, problems := layoutRows(t, readFile(t, repoRoot+"/README.md"))
	for _, p := range problems {
		t.Errorf("README's layout table: %s", p)
	}
	dirs := packageDirs(t)
	if len(dirs) < 30 || !slices.Contains(dirs, "agent") || !slices.Contains(dirs, "deploy/grafana") {
		t.Fatalf("found %d package directories (%v); the walk is broken", len(dirs), dirs)
	}
	for _, d := range dirs {
		if !named[d] {
			t.Errorf("README: the layout table has no row naming `%s/`", d)
		}
	}
	for d := range named {
		if _, err := os.Stat(filepath.Join(repoRoot, d)); err != nil {
			t.Errorf("README: the layout table names `%s`, which does not exist", d)
		}
	}
}

// The check catches a package without a row and a table a paragraph breaks.
func TestLayoutCheckCatchesGaps(t *testing.T) {
	readme := "# x\n\n## Layout\n\n| directory | what |\n|---|---|\n| `agent/` | the daemon |\n\nA paragraph.\n| `cmd/sluice/` | the binary |\n\n## Next\n"
	named, problems := layoutRows(t, readme)
	if len(problems) != 1 {
		t.Error("a row after a paragraph was not caught")
	}
	if named["cmd/sluice"] || !named["agent"] {
		t.Errorf("rows read %v, want agent only (the row after the paragraph is not in the table)", named)
	}
}

var (
	// A citation of docs/design.md's sections: "docs/design.md §N",
	// "design.md §N.M", "[design §N](docs/design.md)".
	designCite = regexp.MustCompile(`design(?:\.md)?\]?\s*(?:\([^)]*\)\s*)?§\s*(\d+(?:\.\d+)?)`)
	designHead = regexp.MustCompile(`(?m)^#{2,3} (\d+(?:\.\d+)?)\. `)
)

// citingFiles are the Go files and Markdown documents of the repository.
func citingFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md")) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Every "design.md §N" the code and the documents cite is a section of
// docs/design.md ("## N. …", or "### N.M. …" for §N.M), and nothing
// cites the file by its old name at the root, which moved to docs/.
func TestDesignSectionsCitedExist(t *testing.T) {
	const oldName = "DESIGN" + ".md"
	sections := map[string]bool{}
	for _, m := range designHead.FindAllStringSubmatch(readFile(t, repoRoot+"/docs/design.md"), -1) {
		sections[m[1]] = true
	}
	if !sections["4"] || !sections["5"] {
		t.Fatalf("docs/design.md's sections read as %v; the heading pattern is broken", sections)
	}
	cites := 0
	for _, f := range citingFiles(t) {
		data := readFile(t, f)
		rel, _ := filepath.Rel(repoRoot, f)
		for i, line := range strings.Split(data, "\n") {
			if strings.Contains(line, oldName) {
				t.Errorf("%s:%d cites %s, which is docs/design.md now", rel, i+1, oldName)
			}
			for _, m := range designCite.FindAllStringSubmatch(line, -1) {
				cites++
				if !sections[m[1]] {
					t.Errorf("%s:%d cites design.md §%s, which docs/design.md does not have (its sections: %v)", rel, i+1, m[1], keys(sections))
				}
			}
		}
	}
	if cites < 20 {
		t.Errorf("found %d citations of docs/design.md; the pattern is broken", cites)
	}
	// The pattern reads each way the files cite (written apart here, so
	// that this file cites nothing itself).
	for cite, want := range map[string]string{"docs/design.md &§4": "4", "(design.md &§3.7, 10 s)": "3.7",
		"[design &§5](docs/design.md#5-attribution)": "5", "docs/design.md &§9, docs/latency.md": "9"} {
		if m := designCite.FindStringSubmatch(strings.ReplaceAll(cite, "&", "")); m == nil || m[1] != want {
			t.Errorf("%q read as %v, want §%s", cite, m, want)
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	codeFence = regexp.MustCompile("(?s)```.*?```")
)

// anchor is the fragment GitHub gives a heading: lower case, punctuation
// other than hyphens and underscores dropped, spaces made hyphens.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && !strings.ContainsRune("§—–…·×≤≥→←Σ", r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Every relative link in the README and docs/ names a file that exists
// and, with a fragment, a heading of that Markdown file.
func TestDocumentLinksResolve(t *testing.T) {
	docs, _ := filepath.Glob(repoRoot + "/docs/*.md")
	docs = append(docs, repoRoot+"/README.md")
	links := 0
	for _, doc := range docs {
		text := codeFence.ReplaceAllString(readFile(t, doc), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, frag, _ := strings.Cut(target, "#")
			path := doc
			if file != "" {
				path = filepath.Join(filepath.Dir(doc), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links %s: no such file", filepath.Base(doc), target)
				continue
			}
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			var anchors []string
			for _, h := range mdHeading.FindAllStringSubmatch(codeFence.ReplaceAllString(readFile(t, path), ""), -1) {
				anchors = append(anchors, anchor(h[1]))
			}
			if !slices.Contains(anchors, frag) {
				t.Errorf("%s links %s: %s has no heading with that anchor (%v)", filepath.Base(doc), target, filepath.Base(path), anchors)
			}
		}
	}
	if links < 10 {
		t.Errorf("found %d relative links; the pattern is broken", links)
	}
	for h, want := range map[string]string{"5. Attribution": "5-attribution", "On Apache Kafka": "on-apache-kafka",
		"Cluster budgets: one limit across all brokers": "cluster-budgets-one-limit-across-all-brokers",
		"Metrics, alerts and the dashboard":             "metrics-alerts-and-the-dashboard"} {
		if got := anchor(h); got != want {
			t.Errorf("anchor(%q) = %q, want %q", h, got, want)
		}
	}
}

// What an operator follows from the README: a released package installed
// with the package manager (which resolves dependencies; dpkg -i and
// rpm -i do not), one scrape configuration, the limitations as they are.
func TestReadmeQuickStart(t *testing.T) {
	readme := readFile(t, repoRoot+"/README.md")
	quick := section(t, readme, "Quick start on a broker")
	for _, want := range []string{"apt install ./sluice_", "_amd64.deb", "dnf install ./sluice-", ".x86_64.rpm", "sha256sum"} {
		if !strings.Contains(quick, want) {
			t.Errorf("README's quick start does not say %q", want)
		}
	}
	for _, bad := range []string{"dpkg -i", "rpm -i", "make packages", "make build"} {
		if strings.Contains(quick, bad) {
			t.Errorf("README's quick start says %q: a broker installs a released package with its package manager", bad)
		}
	}
	if n := strings.Count(readme, "scrape_configs:"); n != 1 {
		t.Errorf("README has %d scrape configurations, want one", n)
	}
	if strings.Contains(strings.ToLower(section(t, readme, "Limitations")), "budgets are per host") {
		t.Error("README's limitations say budgets are per host, which cluster budgets contradict")
	}
}
