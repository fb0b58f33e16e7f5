// Package monitoring holds towerd's Prometheus alert rules and Grafana
// dashboard; these tests check them with the real promtool (Debian package
// prometheus, installed by test/install-deps.sh).
package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// promtoolTimeout bounds one promtool run; the rule tests take a second.
const promtoolTimeout = 2 * time.Minute

// promtool returns promtool's path. Outside CI a missing promtool skips the
// test; in CI (CI=true) it fails it, so the rules are never left unchecked.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool not found (Debian package prometheus; test/install-deps.sh installs it)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// runPromtool runs promtool with args in this directory and returns its
// output; it fails the test on a non-zero exit.
func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), promtoolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool(t), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestRulesCheck(t *testing.T) {
	out := runPromtool(t, "check", "rules", "towerd.rules.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules:\n%s", out)
	}
}

// The unit tests fire every alert on a failing synthetic node and keep it
// quiet on healthy ones; promtool fails on any alert that differs.
func TestRulesUnitTests(t *testing.T) {
	out := runPromtool(t, "test", "rules", "towerd.rules.test.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
}

// dashboard is the part of a Grafana dashboard these tests read.
type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	return d
}

// Every panel has a unique id, and every query is valid PromQL filtered by
// the dashboard's node selector. promtool has no query checker, so each
// expression is checked as a recording rule, with Grafana's variables
// replaced by what they stand for.
func TestDashboardQueries(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard without uid or title")
	}
	ids := map[int]string{}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	queries := 0
	for _, p := range d.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q: query ignores the node selector: %s", p.Title, tg.Expr)
			}
			expr := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*").Replace(tg.Expr)
			queries++
			fmt.Fprintf(&rules, "      - record: dashboard:query%d\n        expr: %q\n", queries, expr)
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out := runPromtool(t, "check", "rules", path)
	if want := fmt.Sprintf("SUCCESS: %d rules found", queries); !strings.Contains(out, want) {
		t.Errorf("promtool check of the dashboard's %d queries:\n%s", queries, out)
	}
}

// alertRule is what the runbook test reads of one alert in the rules file.
type alertRule struct {
	name        string
	annotations map[string]string
}

// alertRules reads the alert rules' names and annotations from the rules
// file: each "- alert:" block up to the next rule, one annotation a line.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	data, err := os.ReadFile("towerd.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules []alertRule
	annotation := regexp.MustCompile(`^\s+([a-z_]+): "(.*)"$`)
	inAnnotations := false
	for line := range strings.Lines(string(data)) {
		line = strings.TrimRight(line, "\n")
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "- alert: "):
			rules = append(rules, alertRule{name: strings.TrimPrefix(trimmed, "- alert: "), annotations: map[string]string{}})
			inAnnotations = false
		case strings.HasPrefix(trimmed, "- record: "), strings.HasPrefix(trimmed, "- name: "):
			inAnnotations = false
		case trimmed == "annotations:":
			inAnnotations = len(rules) > 0
		case inAnnotations:
			if m := annotation.FindStringSubmatch(line); m != nil {
				rules[len(rules)-1].annotations[m[1]] = m[2]
			}
		}
	}
	if len(rules) == 0 {
		t.Fatal("no alert rules found in towerd.rules.yml")
	}
	return rules
}

// runbookBase is where every alert's runbook_url points: its section of
// docs/alerts.md, GitHub's anchor of the heading that is its name.
const runbookBase = "https://github.com/towerd/towerd/blob/main/docs/alerts.md#"

// Issue 25: every alert has a summary, a description and a runbook_url
// into docs/alerts.md, whose section for it says what it means, what to
// check and what to do; and towerd.rules.test.yml fires every alert at
// least once, so none is shipped untested.
func TestEveryAlertHasARunbook(t *testing.T) {
	page, err := os.ReadFile("../docs/alerts.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	for _, s := range strings.Split("\n"+string(page), "\n## ")[1:] {
		title, body, _ := strings.Cut(s, "\n")
		sections[strings.TrimSpace(title)] = body
	}
	tests, err := os.ReadFile("towerd.rules.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range alertRules(t) {
		for _, key := range []string{"summary", "description", "runbook_url"} {
			if r.annotations[key] == "" {
				t.Errorf("%s has no %s annotation", r.name, key)
			}
		}
		if got, want := r.annotations["runbook_url"], runbookBase+strings.ToLower(r.name); got != want {
			t.Errorf("%s: runbook_url %q, want %q", r.name, got, want)
		}
		body, ok := sections[r.name]
		if !ok {
			t.Errorf("docs/alerts.md has no section \"## %s\"", r.name)
		}
		for _, part := range []string{"**What it means.**", "**What to check.**", "**What to do.**"} {
			if ok && !strings.Contains(body, part) {
				t.Errorf("docs/alerts.md's section %s lacks %s", r.name, part)
			}
		}
		fired := regexp.MustCompile(`alertname: ` + r.name + `\n\s+exp_alerts:\n\s+- exp_labels:`)
		if !fired.Match(tests) {
			t.Errorf("towerd.rules.test.yml never fires %s", r.name)
		}
	}
}
