package manual

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// securityInputs are the inputs DESIGN.md's "Every input has a bound"
// names; docs/security.md must have a row for each (matched in its first
// cell, case-insensitively).
var securityInputs = []string{
	"DNS over UDP", "DNS over TCP", "admin HTTP server", "control socket", "resolv.conf", "hosts files",
	"state file", "watch set", "config file and drop-ins", "credentials", "Consul agent's HTTP API",
	"Consul agent's DNS", "upstream replies", "query-log sink", "signals",
}

var testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)

// repoTests returns the name of every test and fuzz function in the
// repository's _test.go files.
func repoTests(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 100 {
		t.Fatalf("only %d test functions found under %s", len(names), repoRoot)
	}
	return names
}

// TestManualSecurityTable: docs/security.md's threat model has a row for
// every input the design names, and every row names at least one test
// that attacks it, each of which exists (issue 21): a test renamed or
// removed fails this one until the table follows.
func TestManualSecurityTable(t *testing.T) {
	m := loadManual(t)
	tests := repoTests(t)
	var rows int
	found := map[string]bool{}
	for _, table := range m.Tables("input") {
		if table.File != "docs/security.md" {
			continue
		}
		col := table.Column("attacked by")
		if col < 0 {
			t.Fatalf("%s: the input table has no \"attacked by\" column", table.Where())
		}
		for _, row := range table.Rows {
			rows++
			for _, in := range securityInputs {
				if strings.Contains(strings.ToLower(row.Cells[0]), strings.ToLower(in)) {
					found[in] = true
				}
			}
			if col >= len(row.Cells) {
				t.Errorf("docs/security.md:%d: no \"attacked by\" cell", row.Line)
				continue
			}
			named := 0
			for _, span := range CodeSpans(row.Cells[col]) {
				if !testFunc.MatchString("func " + span + "(") {
					continue // a flag or a path beside the tests: `-race`
				}
				named++
				if !tests[span] {
					t.Errorf("docs/security.md:%d: names %s, which no _test.go of the repository defines", row.Line, span)
				}
			}
			if named == 0 {
				t.Errorf("docs/security.md:%d: the row of %q names no test that attacks it", row.Line, row.Cells[0])
			}
		}
	}
	if rows == 0 {
		t.Fatal("docs/security.md has no table whose first column is \"input\"")
	}
	for _, in := range securityInputs {
		if !found[in] {
			t.Errorf("docs/security.md has no row for %s", in)
		}
	}
}
