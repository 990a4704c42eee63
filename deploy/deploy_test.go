// Package deploy_test checks what deploy/ ships against the agent: the
// alert and recording rules (promtool's own checks and unit tests) and
// the Grafana dashboard (generated from code, committed), whose every
// query must parse as PromQL and name only metrics the agent exports.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/deploy/grafana"
)

const (
	rulesFile     = "prometheus/sluice-rules.yaml"
	rulesTests    = "prometheus/sluice-rules.test.yaml"
	dashboardFile = "grafana/sluice-dashboard.json"
	// The committed list of families a running agent exports (held to it
	// by agent's TestMetricsMatchTheCommittedList).
	metricsList = "../agent/testdata/metrics.txt"
	// runbookBase is where the rules' runbook_url point by default: the
	// project's published runbook. docs/runbook.md says how to rewrite it.
	runbookBase = "https://github.com/sluice-dev/sluice/blob/main/docs/runbook.md"
)

// promtool is Prometheus' own checker (Debian's prometheus package, which
// make deps installs). Missing, the test fails: it must run, not skip.
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: run `make deps` (Debian's prometheus package)")
	}
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestAlertRulesPassPromtool(t *testing.T) {
	promtool(t, "check", "rules", rulesFile)
	out := promtool(t, "test", "rules", rulesTests)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
	// Every alert has a unit test that fires it and one that keeps it quiet.
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, rulesTests)), &tests); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, alert := range ruleNames(t, "alert") {
		if !fires[alert] {
			t.Errorf("alert %s: no case in %s fires it", alert, rulesTests)
		}
		if !quiet[alert] {
			t.Errorf("alert %s: no case in %s keeps it quiet (exp_alerts: [])", alert, rulesTests)
		}
	}
}

// Moving the runbook (a fork, a pinned release, an internal wiki) is one
// substitution of the base in the rules and their tests alike, as
// docs/runbook.md tells operators; the rewritten pair still passes
// promtool, with every runbook_url under the new base.
func TestRunbookBaseRewrites(t *testing.T) {
	runbook := readFile(t, "../docs/runbook.md")
	for _, want := range []string{runbookBase, "sluice-rules.yaml", "sluice-rules.test.yaml", "sed "} {
		if !strings.Contains(runbook, want) {
			t.Errorf("docs/runbook.md does not say how to rewrite the runbook base: no %q", want)
		}
	}
	const moved = "https://wiki.example.com/ops/sluice-runbook"
	dir := t.TempDir()
	for _, f := range []string{rulesFile, rulesTests} {
		data := strings.ReplaceAll(readFile(t, f), runbookBase, moved)
		if strings.Contains(data, "github.com/sluice-dev") {
			t.Errorf("%s: a link the base rewrite misses", f)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	promtool(t, "check", "rules", filepath.Join(dir, filepath.Base(rulesFile)))
	if out := promtool(t, "test", "rules", filepath.Join(dir, filepath.Base(rulesTests))); !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules after the rewrite:\n%s", out)
	}
	if n := strings.Count(readFile(t, filepath.Join(dir, filepath.Base(rulesFile))), `runbook_url: "`+moved+"#"); n != len(ruleNames(t, "alert")) {
		t.Errorf("%d runbook_url under the new base, want one per alert (%d)", n, len(ruleNames(t, "alert")))
	}
}

func TestDashboardIsGeneratedFromCode(t *testing.T) {
	data, err := grafana.Dashboard()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, []byte(readFile(t, dashboardFile))) {
		t.Errorf("%s is not what deploy/grafana generates: run make dashboard and commit", dashboardFile)
	}
}

// Every expression the dashboard and the rules hold names only exported
// metrics (or the rules' own records) and parses as PromQL: promtool
// checks them as recording rules, with the dashboard's variables filled.
func TestQueriesNameExportedMetricsAndParse(t *testing.T) {
	exported := exportedNames(t)
	for _, r := range ruleNames(t, "record") {
		exported[r] = true
	}
	exprs := map[string]string{} // expression → where it is
	for _, e := range ruleExprs(t) {
		exprs[e] = rulesFile
	}
	var dash any
	if err := json.Unmarshal([]byte(readFile(t, dashboardFile)), &dash); err != nil {
		t.Fatal(err)
	}
	dashboardExprs := collectQueries(dash, nil)
	if len(dashboardExprs) < 20 {
		t.Fatalf("found %d queries in the dashboard; the walk is broken", len(dashboardExprs))
	}
	for _, e := range dashboardExprs {
		exprs[e] = dashboardFile
	}
	name := regexp.MustCompile(`\b(?:sluice[_:]|go_|process_)[a-zA-Z0-9_:]*`)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: queries\n    rules:\n")
	i := 0
	for e, where := range exprs {
		for _, m := range name.FindAllString(e, -1) {
			if !exported[m] {
				t.Errorf("%s: %q names %s, which the agent does not export", where, e, m)
			}
		}
		i++
		fmt.Fprintf(&rules, "      - record: query:%d\n        expr: %s\n", i, quote(fillVariables(e)))
	}
	path := filepath.Join(t.TempDir(), "queries.yaml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, "check", "rules", path)

	// The check itself catches a bad query and an unknown name.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("groups:\n  - name: q\n    rules:\n      - record: q:1\n        expr: 'rate(sluice_entity_bytes_total[5m'\n"), 0o644)
	if out, err := exec.Command("promtool", "check", "rules", bad).CombinedOutput(); err == nil {
		t.Errorf("promtool accepted an unclosed bracket:\n%s", out)
	}
	if exported["sluice_entity_rate_bytes"] {
		t.Error("the exported list holds a retired name")
	}
}

// exportedNames reads the committed family list; histograms add their
// _bucket, _sum and _count series. Go's and the process's collectors are
// standard (client_golang's).
func exportedNames(t *testing.T) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, metricsList)), "\n") {
		f := strings.Fields(line)
		names[f[0]] = true
		if f[1] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f[0]+s] = true
			}
		}
	}
	for _, n := range []string{"process_resident_memory_bytes", "go_memstats_heap_inuse_bytes", "process_start_time_seconds"} {
		names[n] = true
	}
	return names
}

// fillVariables gives Grafana's variables values PromQL accepts.
func fillVariables(e string) string {
	return strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$instance", ".*", "$direction", ".*", "$entity", ".*", "$cluster", ".*", "$job", ".*").Replace(e)
}

func quote(s string) string {
	b, _ := json.Marshal(s) // a JSON string is a YAML double-quoted scalar
	return string(b)
}

// labelValues is a query variable's label_values(SELECTOR, label).
var labelValues = regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`)

// collectQueries walks the dashboard model for panel targets' "expr" and
// query variables' "query".
func collectQueries(v any, out []string) []string {
	switch v := v.(type) {
	case map[string]any:
		if e, ok := v["expr"].(string); ok {
			out = append(out, e)
		}
		if v["type"] == "query" {
			if q, ok := v["query"].(string); ok {
				if m := labelValues.FindStringSubmatch(q); m != nil {
					out = append(out, m[1])
				}
			}
		}
		for _, c := range v {
			out = collectQueries(c, out)
		}
	case []any:
		for _, c := range v {
			out = collectQueries(c, out)
		}
	}
	return out
}

type ruleFile struct {
	Groups []struct {
		Rules []map[string]any `yaml:"rules"`
	} `yaml:"groups"`
}

func rules(t *testing.T) ruleFile {
	var f ruleFile
	if err := yaml.Unmarshal([]byte(readFile(t, rulesFile)), &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// Every alert says what to do: a description, and an absolute runbook_url
// (Alertmanager and pagers cannot open a path) naming a section of
// docs/runbook.md that exists, by the anchor GitHub gives its heading.
func TestAlertsHaveDescriptionsAndRunbooks(t *testing.T) {
	runbook := readFile(t, "../docs/runbook.md")
	for _, g := range rules(t).Groups {
		for _, r := range g.Rules {
			name, ok := r["alert"].(string)
			if !ok {
				continue
			}
			ann, _ := r["annotations"].(map[string]any)
			if d, _ := ann["description"].(string); len(d) < 20 {
				t.Errorf("alert %s: no description", name)
			}
			url, _ := ann["runbook_url"].(string)
			if want := runbookBase + "#" + strings.ToLower(name); url != want {
				t.Errorf("alert %s: runbook_url %q, want %s", name, url, want)
			}
			if !strings.Contains(runbook, "\n## "+name+"\n") {
				t.Errorf("alert %s: no section \"## %s\" in docs/runbook.md", name, name)
			}
		}
	}
}

// The agent exports a latency objective's breaker state as one 0/1 series
// per state; the panels showing it fold them into one number and map that
// back to a name and a colour. Each panel's query, run by promtool on each
// state in turn, gives the number its mapping names after that state.
func TestObjectiveStatePanelsNameTheStateTheyShow(t *testing.T) {
	var d struct {
		Panels []struct {
			Title       string
			FieldConfig struct {
				Defaults struct {
					Mappings []struct {
						Type    string
						Options map[string]struct{ Text, Color string }
					}
				}
			} `json:"fieldConfig"`
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readFile(t, dashboardFile)), &d); err != nil {
		t.Fatal(err)
	}
	colour := map[string]string{"closed": "green", "half_open": "orange", "open": "red", "ineffective": "purple"}
	states := []string{"closed", "open", "half_open", "ineffective"} // the agent's order (agent/metrics.go)
	found := 0
	for _, p := range d.Panels {
		if len(p.Targets) != 1 || !strings.Contains(p.Targets[0].Expr, "sluice_latency_objective_state") {
			continue
		}
		found++
		value := map[string]string{} // state → the number mapped to it
		for _, m := range p.FieldConfig.Defaults.Mappings {
			for v, r := range m.Options {
				if m.Type == "value" && colour[r.Text] != "" {
					value[r.Text] = v
					if r.Color != colour[r.Text] {
						t.Errorf("%s: %s is %s, want %s", p.Title, r.Text, r.Color, colour[r.Text])
					}
				}
			}
		}
		if len(value) != len(states) {
			t.Errorf("%s: mappings name %v, want every state of %v", p.Title, value, states)
			continue
		}
		// One minute per state: the series of the state in force is 1.
		var series, cases strings.Builder
		for _, st := range states {
			values := make([]string, len(states))
			for i, now := range states {
				values[i] = "0"
				if now == st {
					values[i] = "1"
				}
			}
			fmt.Fprintf(&series, "      - series: 'sluice_latency_objective_state{instance=\"a\", direction=\"produce\", entity_type=\"client\", entity=\"core\", state=\"%s\"}'\n        values: '%s'\n",
				st, strings.Join(values, " "))
		}
		for i, st := range states {
			fmt.Fprintf(&cases, "      - {expr: 'objective:state', eval_time: %dm, exp_samples: [{labels: 'objective:state{instance=\"a\", direction=\"produce\", entity_type=\"client\", entity=\"core\"}', value: %s}]}\n", i, value[st])
		}
		dir := t.TempDir()
		rulesPath := filepath.Join(dir, "rules.yaml")
		os.WriteFile(rulesPath, []byte("groups:\n  - name: q\n    rules:\n      - record: objective:state\n        expr: "+quote(fillVariables(p.Targets[0].Expr))+"\n"), 0o644)
		testPath := filepath.Join(dir, "test.yaml")
		os.WriteFile(testPath, []byte("rule_files: ["+quote(rulesPath)+"]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n"+
			series.String()+"    promql_expr_test:\n"+cases.String()), 0o644)
		if out := promtool(t, "test", "rules", testPath); !strings.Contains(out, "SUCCESS") {
			t.Errorf("%s: promtool test rules:\n%s", p.Title, out)
		}
	}
	if found < 2 {
		t.Errorf("%d panels show the latency objectives' state, want the state now and its timeline", found)
	}
}

func ruleNames(t *testing.T, kind string) []string {
	var out []string
	for _, g := range rules(t).Groups {
		for _, r := range g.Rules {
			if n, ok := r[kind].(string); ok {
				out = append(out, n)
			}
		}
	}
	return out
}

func ruleExprs(t *testing.T) []string {
	var out []string
	for _, g := range rules(t).Groups {
		for _, r := range g.Rules {
			out = append(out, fmt.Sprint(r["expr"]))
		}
	}
	return out
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// What an operator reads the dashboard by: one shared tooltip, a table
// legend (last, max, mean) and a multi-series tooltip on every time
// series (a legend and that tooltip on every state timeline), thresholds
// on every stat whose every step shows (the refresh age against
// stale_after), the table of entities held back now, and cluster and job
// selectors.
func TestDashboardReadability(t *testing.T) {
	var d struct {
		GraphTooltip int `json:"graphTooltip"`
		Templating   struct {
			List []struct{ Name string } `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Type, Title string
			Options     struct {
				Legend *struct {
					DisplayMode string `json:"displayMode"`
					ShowLegend  bool   `json:"showLegend"`
					Calcs       []string
				} `json:"legend"`
				Tooltip *struct{ Mode string } `json:"tooltip"`
			} `json:"options"`
			FieldConfig struct {
				Defaults struct {
					Thresholds *struct {
						Steps []struct {
							Value *float64
							Color string
						}
					} `json:"thresholds"`
				} `json:"defaults"`
			} `json:"fieldConfig"`
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readFile(t, dashboardFile)), &d); err != nil {
		t.Fatal(err)
	}
	if d.GraphTooltip != 2 {
		t.Errorf("graphTooltip %d, want 2 (a shared tooltip)", d.GraphTooltip)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"cluster", "job", "instance", "direction", "entity"} {
		if !vars[v] {
			t.Errorf("no %s selector", v)
		}
	}
	held := false
	for _, p := range d.Panels {
		switch p.Type {
		case "timeseries":
			if l := p.Options.Legend; l == nil || !l.ShowLegend || l.DisplayMode != "table" || len(l.Calcs) == 0 {
				t.Errorf("%s: legend %+v, want a table with calculations", p.Title, l)
			}
			if p.Options.Tooltip == nil || p.Options.Tooltip.Mode != "multi" {
				t.Errorf("%s: tooltip %+v, want multi", p.Title, p.Options.Tooltip)
			}
		case "state-timeline":
			if l := p.Options.Legend; l == nil || !l.ShowLegend {
				t.Errorf("%s: legend %+v, want one", p.Title, l)
			}
			if p.Options.Tooltip == nil || p.Options.Tooltip.Mode != "multi" {
				t.Errorf("%s: tooltip %+v, want multi", p.Title, p.Options.Tooltip)
			}
		case "stat":
			if th := p.FieldConfig.Defaults.Thresholds; th == nil || len(th.Steps) < 2 {
				t.Errorf("%s: no thresholds", p.Title)
			}
		case "table":
			for _, q := range p.Targets {
				held = held || strings.Contains(q.Expr, "sluice_entity_throttled")
			}
		}
		// Every threshold step can be reached and changes the colour: the
		// base step first, then values strictly rising (a step at the
		// value of the one before it never shows), each in a new colour.
		if th := p.FieldConfig.Defaults.Thresholds; th != nil {
			for i, step := range th.Steps {
				switch {
				case i == 0 && step.Value != nil:
					t.Errorf("%s: thresholds start at %v, not at the base (null)", p.Title, *step.Value)
				case i > 0 && step.Value == nil:
					t.Errorf("%s: threshold step %d has no value", p.Title, i)
				case i > 1 && *step.Value <= *th.Steps[i-1].Value:
					t.Errorf("%s: threshold step %d at %v is dead: the step before it is at %v", p.Title, i, *step.Value, *th.Steps[i-1].Value)
				case i > 0 && step.Color == th.Steps[i-1].Color:
					t.Errorf("%s: threshold step %d keeps the colour %s", p.Title, i, step.Color)
				}
			}
		}
		if strings.Contains(p.Title, "Refresh age") && (len(p.Targets) != 1 || !strings.Contains(p.Targets[0].Expr, "sluice_stale_after_seconds")) {
			t.Errorf("%s: not judged against stale_after: %+v", p.Title, p.Targets)
		}
	}
	if !held {
		t.Error("no table of the entities held back now")
	}
}
