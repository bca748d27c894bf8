package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// dashboardFile is the Grafana dashboard the compose stack provisions.
const dashboardFile = "grafana/sluice.json"

// dashboardQuery is one PromQL expression of the dashboard, and where.
type dashboardQuery struct {
	where, expr string
}

// dashboardQueries returns every query of the dashboard: panel targets
// (rows' nested panels too) and template variables (label_values(m, l)).
func dashboardQueries(t *testing.T) (queries []dashboardQuery, rows []string) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Type    string  `json:"type"`
		Title   string  `json:"title"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				rows = append(rows, p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("panel %q has a target without an expression", p.Title)
				}
				queries = append(queries, dashboardQuery{"panel " + p.Title, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if json.Unmarshal(v.Query, &s) != nil {
				t.Fatalf("variable %s: query is neither a string nor an object", v.Name)
			}
			q.Query = s
		}
		m := regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`).FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, q.Query)
			continue
		}
		queries = append(queries, dashboardQuery{"variable " + v.Name, m[1]})
	}
	return queries, rows
}

// promqlKeywords are PromQL words that look like metric names but are not.
var promqlKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan", "start", "end"}

var (
	reString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	reMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	reRange    = regexp.MustCompile(`\[[^\[\]]*\]`)
	reGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	reIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

// metricNames returns the metric names a PromQL expression selects: the
// identifiers left once strings, label matchers, ranges, groupings and
// function calls are taken out.
func metricNames(expr string) []string {
	e := reString.ReplaceAllString(expr, `""`)
	e = reMatchers.ReplaceAllString(e, " ")
	e = reRange.ReplaceAllString(e, " ")
	e = reGrouping.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range reIdent.FindAllStringIndex(e, -1) {
		word := e[loc[0]:loc[1]]
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || slices.Contains(promqlKeywords, strings.ToLower(word)) {
			continue // a function or aggregation, or a keyword
		}
		if loc[0] > 0 && (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9' || e[loc[0]-1] == '.') {
			continue // the tail of a number (1e3) or a duration
		}
		if !slices.Contains(out, word) {
			out = append(out, word)
		}
	}
	sort.Strings(out)
	return out
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		name, expr string
		want       []string
	}{
		{"bare", "sluice_broker_controller", []string{"sluice_broker_controller"}},
		{"aggregation with grouping", `sum by (topic, partition) (sluice_partition_isr_size) < count by (topic, partition) (sluice_partition_log_end_offset)`,
			[]string{"sluice_partition_isr_size", "sluice_partition_log_end_offset"}},
		{"matchers, ranges and variables", `sum by (result) (rate(sluice_gateway_produce_requests_total{result!="ok",topic=~"$topic"}[$__rate_interval]))`,
			[]string{"sluice_gateway_produce_requests_total"}},
		{"comparison and numbers", `max by (topic, partition) (sluice_partition_remote_end_offset >= 0) * 1e3`, []string{"sluice_partition_remote_end_offset"}},
		{"binary with on()", `a_metric * on (instance) group_left (x) b_metric offset 5m`, []string{"a_metric", "b_metric"}},
		{"subquery", `max_over_time(sluice_group_lag_ms[10m:1m])`, []string{"sluice_group_lag_ms"}},
		{"keyword-looking label values stay strings", `x_total{job="and"}`, []string{"x_total"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := metricNames(tt.expr); !slices.Equal(got, tt.want) {
				t.Fatalf("metricNames(%q) = %q, want %q", tt.expr, got, tt.want)
			}
		})
	}
}

// TestDashboardShape: the rows the issue asks for, and queries in each.
func TestDashboardShape(t *testing.T) {
	queries, rows := dashboardQueries(t)
	for _, want := range []string{"Cluster", "Topic", "Gateway", "Tiering"} {
		if !slices.Contains(rows, want) {
			t.Errorf("no %q row (rows: %v)", want, rows)
		}
	}
	if len(queries) < 10 {
		t.Errorf("only %d queries", len(queries))
	}
	for _, q := range queries {
		if len(metricNames(q.expr)) == 0 {
			t.Errorf("%s: %q selects no metric", q.where, q.expr)
		}
	}
}
