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
