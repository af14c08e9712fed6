package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// dashboardFile is the Grafana dashboard for the metrics, made absolute
// before any test runs: the embedded store changes the working directory.
var dashboardFile, _ = filepath.Abs("../../deploy/grafana/bucketfs.json")

// grafanaDashboard is the part of a dashboard's JSON the test looks at.
type grafanaDashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []grafanaVariable `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaVariable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query any    `json:"query"`
}

type grafanaPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's
}

// describedMetrics returns the metrics /metrics serves, by name, with
// their variable labels, from the collectors' Describe.
func describedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range (&Engine{}).metricsCollectors() {
			c.Describe(ch)
		}
		close(ch)
	}()
	desc := regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)
	out := map[string][]string{}
	for d := range ch {
		m := desc.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		out[m[1]] = labels
	}
	return out
}

var (
	// metricName finds the metrics in a PromQL expression: every name the
	// dashboard uses starts with one of these prefixes.
	metricName = regexp.MustCompile(`\b(?:bucketfs|go|process)_[a-zA-Z0-9_]+\b`)
	// selector finds a metric with its label matchers.
	selector = regexp.MustCompile(`\b((?:bucketfs|go|process)_[a-zA-Z0-9_]+)\{([^}]*)\}`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"`)
	// grouping finds the labels of by (...) clauses.
	grouping = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
)

func TestTheGrafanaDashboardUsesOnlyMetricsAndLabelsTheCollectorsDescribe(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 {
		t.Errorf("dashboard title %q, uid %q, schemaVersion %d", d.Title, d.UID, d.SchemaVersion)
	}
	if !slices.ContainsFunc(d.Templating.List, func(v grafanaVariable) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Error("the dashboard has no Prometheus data source variable named datasource")
	}
	described := describedMetrics(t)
	for _, want := range []string{"bucketfs_pending_exports", "go_goroutines", "process_resident_memory_bytes"} {
		if _, ok := described[want]; !ok {
			t.Fatalf("the collectors do not describe %s: %v", want, described)
		}
	}
	labels := map[string]bool{"instance": true, "job": true} // added by Prometheus at scrape
	for _, ls := range described {
		for _, l := range ls {
			labels[l] = true
		}
	}

	ids := map[int]bool{}
	used := map[string]bool{}
	var check func(p grafanaPanel)
	check = func(p grafanaPanel) {
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("panel %q: id %d missing or used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
		}
		for _, c := range p.Panels {
			check(c)
		}
		if p.Type == "row" {
			return
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		for _, q := range p.Targets {
			names := metricName.FindAllString(q.Expr, -1)
			if len(names) == 0 || q.RefID == "" {
				t.Errorf("panel %q: query %q (refId %q) names no metric of ours", p.Title, q.Expr, q.RefID)
			}
			for _, n := range names {
				used[n] = true
				if _, ok := described[n]; !ok {
					t.Errorf("panel %q: %s is not a metric /metrics serves", p.Title, n)
				}
			}
			for _, s := range selector.FindAllStringSubmatch(q.Expr, -1) {
				for _, m := range matcher.FindAllStringSubmatch(s[2], -1) {
					if m[1] != "instance" && m[1] != "job" && !slices.Contains(described[s[1]], m[1]) {
						t.Errorf("panel %q: %s has no label %s", p.Title, s[1], m[1])
					}
				}
			}
			for _, g := range grouping.FindAllStringSubmatch(q.Expr, -1) {
				for _, l := range strings.Split(g[1], ",") {
					if l = strings.TrimSpace(l); !labels[l] {
						t.Errorf("panel %q: by (%s): no metric has the label %s", p.Title, g[1], l)
					}
				}
			}
		}
	}
	for _, p := range d.Panels {
		check(p)
	}
	// What the issue asks the dashboard to show.
	for _, want := range []string{"bucketfs_export_age_seconds", "bucketfs_import_age_seconds", "bucketfs_pending_exports",
		"bucketfs_conflicts_total", "bucketfs_tier_storage_bytes", "bucketfs_s3_requests_total", "bucketfs_s3_bytes_total"} {
		if !used[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}
