package observability

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// promtool returns the path of promtool, which `make prometheus` installs
// (Debian's prometheus package).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: `make prometheus` installs it (Debian package prometheus)")
	}
	return p
}

// ruleDir writes the rule file (with edit applied to it) and the unit tests
// into a temporary directory.
func ruleDir(t *testing.T, edit func(string) string) string {
	t.Helper()
	rules, err := RuleFile()
	if err != nil {
		t.Fatal(err)
	}
	tests, err := FS.ReadFile(AlertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, RuleFileName), []byte(edit(string(rules))), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, AlertTestsFile), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func run(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// The alerts are a valid rule file and pass their unit tests, each alert
// shown firing and not firing.
func TestAlertsPassPromtool(t *testing.T) {
	dir := ruleDir(t, func(s string) string { return s })
	if out, err := run(t, dir, "check", "rules", RuleFileName); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := run(t, dir, "test", "rules", AlertTestsFile); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// Negative controls: the unit tests catch a rule that fires too late, one
// that never fires, and one that fires where it must not.
func TestAlertTestsCatchBrokenRules(t *testing.T) {
	for name, edit := range map[string]func(string) string{
		"fleet threshold raised": func(s string) string {
			return strings.Replace(s, "clamp_min(sum(proxy_operator_proxies), 1) > 0.5", "clamp_min(sum(proxy_operator_proxies), 1) > 0.9", 1)
		},
		"provider errors never counted": func(s string) string {
			return strings.Replace(s, `result!="success"`, `result="never"`, 1)
		},
		"collector alert without its guard for a disabled collector": func(s string) string {
			return strings.Replace(s, "and proxy_operator_gc_last_complete_sweep_timestamp_seconds > 0", "", 1)
		},
		"refusals counted without the request-rate floor": func(s string) string {
			return strings.Replace(s, "and sum by (api) (rate(proxy_operator_lease_requests_total[5m])) > 0.1", "", 1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			rules, _ := RuleFile()
			if edit(string(rules)) == string(rules) {
				t.Fatal("the edit changed nothing: the rule text moved")
			}
			dir := ruleDir(t, edit)
			if out, err := run(t, dir, "test", "rules", AlertTestsFile); err == nil {
				t.Errorf("promtool test rules passed a broken rule:\n%s", out)
			}
		})
	}
}

// The PrometheusRule is the object the prometheus-operator reads.
func TestPrometheusRuleObject(t *testing.T) {
	data, err := FS.ReadFile(PrometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name, Namespace string
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	if obj.APIVersion != "monitoring.coreos.com/v1" || obj.Kind != "PrometheusRule" || obj.Metadata.Namespace != "proxy-operator-system" {
		t.Errorf("PrometheusRule header %+v", obj)
	}
}

// Every dashboard panel queries the data source variable with valid PromQL
// (checked by promtool, as recording rules), and ids are unique.
func TestDashboard(t *testing.T) {
	d, err := LoadDashboard()
	if err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard %q/%q with %d panels", d.UID, d.Title, len(d.Panels))
	}
	ids := map[int]bool{}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			expr, _ := yaml.Marshal(tg.Expr)
			rules.WriteString("      - record: dashboard:panel\n        expr: " + strings.TrimSpace(string(expr)) + "\n")
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.rules.yaml"), []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, dir, "check", "rules", "dashboard.rules.yaml"); err != nil {
		t.Errorf("dashboard queries are not valid PromQL: %v\n%s", err, out)
	}
}

func TestMetricNames(t *testing.T) {
	tests := map[string][]string{
		`sum by (phase) (proxy_operator_proxies)`:                                                              {"proxy_operator_proxies"},
		`histogram_quantile(0.99, sum by (le) (rate(proxy_operator_healthcheck_duration_seconds_bucket[5m])))`: {"proxy_operator_healthcheck_duration_seconds_bucket"},
		`(sum by (api) (rate(proxy_operator_lease_requests_total{outcome=~"no_match|rejected"}[5m])) / sum by (api) (rate(proxy_operator_lease_requests_total[5m]))) > 0.5 and sum(x) > 0.1`: {"proxy_operator_lease_requests_total", "x"},
		`time() - max(proxy_operator_gc_last_complete_sweep_timestamp_seconds > 0)`:                                                                                                          {"proxy_operator_gc_last_complete_sweep_timestamp_seconds"},
		`topk(5, sum without (op) (rate(a_total{l="by (x)"}[1h] offset 5m)))`:                                                                                                                {"a_total"},
	}
	for expr, want := range tests {
		if d := cmp.Diff(want, MetricNames(expr)); d != "" {
			t.Errorf("MetricNames(%q) (-want +got):\n%s", expr, d)
		}
	}
}

// Every alert links to its section of docs/operations.md (what to do when it
// fires), and every section there is an alert's.
func TestRunbooks(t *testing.T) {
	data, err := FS.ReadFile(PrometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `json:"alert"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			sections[strings.ToLower(h)] = true
		}
	}
	const base = "https://github.com/proxy-operator/proxy-operator/blob/main/docs/operations.md#"
	alerts := map[string]bool{}
	for _, g := range obj.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			anchor := strings.ToLower(r.Alert)
			alerts[anchor] = true
			if got := r.Annotations["runbook_url"]; got != base+anchor {
				t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, got, base+anchor)
			}
			if !sections[anchor] {
				t.Errorf("alert %s: docs/operations.md has no section %q", r.Alert, "## "+r.Alert)
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatal("no alert read: the check would pass on anything")
	}
	for s := range sections {
		if !alerts[s] {
			t.Errorf("docs/operations.md section %q is no alert's", s)
		}
	}
}
