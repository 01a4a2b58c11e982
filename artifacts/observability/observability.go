package observability

import (
	"embed"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// FS holds prometheusrule.yaml, alerts_test.yaml and grafana-dashboard.json.
// An embed directive can only initialise a package-level variable; embed.FS is
// read-only, so it is not mutable state.
//
//go:embed *.yaml *.json
var FS embed.FS

// File names in FS.
const (
	PrometheusRuleFile = "prometheusrule.yaml"
	AlertTestsFile     = "alerts_test.yaml"
	DashboardFile      = "grafana-dashboard.json"
	// RuleFileName is the rule file alerts_test.yaml loads: the spec of the
	// PrometheusRule (RuleFile).
	RuleFileName = "proxy-operator.rules.yaml"
)

// RuleFile returns the PrometheusRule's spec (its rule groups) as a
// Prometheus rule file, what promtool and a Prometheus without the
// prometheus-operator read.
func RuleFile() ([]byte, error) {
	data, err := FS.ReadFile(PrometheusRuleFile)
	if err != nil {
		return nil, err
	}
	var pr struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &pr); err != nil {
		return nil, fmt.Errorf("%s: %w", PrometheusRuleFile, err)
	}
	out, err := yaml.JSONToYAML(pr.Spec)
	if err != nil {
		return nil, fmt.Errorf("%s: spec: %w", PrometheusRuleFile, err)
	}
	return out, nil
}

// Dashboard is the part of the Grafana dashboard the tests read.
type Dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
}

// Panel is one dashboard panel.
type Panel struct {
	ID         int    `json:"id"`
	Title      string `json:"title"`
	Datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// LoadDashboard parses grafana-dashboard.json.
func LoadDashboard() (*Dashboard, error) {
	data, err := FS.ReadFile(DashboardFile)
	if err != nil {
		return nil, err
	}
	var d Dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", DashboardFile, err)
	}
	return &d, nil
}

// Expressions returns every PromQL expression of the alerts and the
// dashboard, by where it is ("alert ProviderErrors", "panel 3 (…) A").
func Expressions() (map[string]string, error) {
	rules, err := RuleFile()
	if err != nil {
		return nil, err
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(rules, &file); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert+r.Record] = r.Expr
		}
	}
	d, err := LoadDashboard()
	if err != nil {
		return nil, err
	}
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			out[fmt.Sprintf("panel %d (%s) %s", p.ID, p.Title, t.RefID)] = t.Expr
		}
	}
	return out, nil
}

var (
	// Parts of an expression that hold no metric name: strings, label
	// matchers, ranges, and label lists of grouping and matching clauses.
	promqlString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promqlLabels   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlDuration = regexp.MustCompile(`\b\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*\b`)
	promqlIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
)

// promqlKeywords are identifiers that are not metric names.
var promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}

// MetricNames returns the metric names expr selects (functions, keywords
// and label names left out), sorted and without duplicates. A histogram
// series keeps its suffix (…_bucket).
func MetricNames(expr string) []string {
	s := promqlString.ReplaceAllString(expr, " ")
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlLabels.ReplaceAllString(s, " ")
	s = promqlDuration.ReplaceAllString(s, " ")
	var out []string
	for _, tok := range promqlIdent.FindAllString(s, -1) {
		if strings.HasSuffix(tok, "(") {
			continue // a function or an aggregation
		}
		tok = strings.TrimSpace(tok)
		if slices.Contains(promqlKeywords, strings.ToLower(tok)) {
			continue
		}
		out = append(out, tok)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
