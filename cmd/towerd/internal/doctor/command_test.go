package doctor

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// The exit status is the worst severity found; -json is the documented
// shape, with every key present.
func TestMainExitStatusAndJSON(t *testing.T) {
	t.Parallel()
	clean := cleanNode(t).write(t)
	warn := cleanNode(t)
	warn.files["/etc/nsswitch.conf"] = "hosts: dns files\n"
	problem := cleanNode(t)
	problem.files["/etc/towerd/towerd.toml"] = "[serve_stale]\nenabled = false\n" + problem.files["/etc/towerd/towerd.toml"]
	info := cleanNode(t)
	info.files["/etc/resolv.conf"] += "search corp.example\n"
	for _, c := range []struct {
		root string
		exit int
	}{{clean, 0}, {info.write(t), 0}, {warn.write(t), 1}, {problem.write(t), 2}} {
		code, stdout, stderr := run(t, "--root", c.root)
		if code != c.exit || !strings.HasSuffix(stdout, "exit "+string(rune('0'+c.exit))+"\n") {
			t.Errorf("%s: exit %d, want %d\n%s%s", c.root, code, c.exit, stdout, stderr)
		}
		code, stdout, _ = run(t, "--root", c.root, "-json")
		if code != c.exit {
			t.Errorf("-json: exit %d, want %d", code, c.exit)
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatalf("-json output is not JSON: %v\n%s", err, stdout)
		}
		if got := keys(doc); !slices.Equal(got, []string{"findings", "root", "schema", "skipped", "summary"}) {
			t.Errorf("keys %v", got)
		}
		if doc["schema"] != Schema || doc["root"] != c.root {
			t.Errorf("schema %v, root %v", doc["schema"], doc["root"])
		}
		summary := doc["summary"].(map[string]any)
		if got := keys(summary); !slices.Equal(got, []string{"exit", "info", "problems", "warnings"}) || summary["exit"] != float64(c.exit) {
			t.Errorf("summary %v", summary)
		}
		for _, f := range doc["findings"].([]any) {
			f := f.(map[string]any)
			want := []string{"area", "fix", "id", "saw", "severity", "title", "why"}
			if _, ok := f["items"]; ok {
				want = append(want, "items")
				slices.Sort(want)
			}
			if got := keys(f); !slices.Equal(got, want) {
				t.Errorf("finding keys %v", got)
			}
			if sev := f["severity"]; sev != "info" && sev != "warning" && sev != "problem" {
				t.Errorf("severity %v", sev)
			}
		}
		for _, s := range doc["skipped"].([]any) {
			if got := keys(s.(map[string]any)); !slices.Equal(got, []string{"area", "reason"}) {
				t.Errorf("skipped keys %v", got)
			}
		}
	}
	if code, _, _ := run(t, "--root", clean, "extra"); code != 2 {
		t.Errorf("an argument: exit %d, want 2", code)
	}
	if code, _, _ := run(t, "-bogus"); code != 2 {
		t.Errorf("an unknown flag: exit %d, want 2", code)
	}
	if code, _, stderr := run(t, "--root", filepath.Join(clean, "nonexistent")); code != 2 || !strings.Contains(stderr, "nonexistent") {
		t.Errorf("a missing root: exit %d, %q", code, stderr)
	}
	if code, _, stderr := run(t, "--root", clean, "-config", "/etc/towerd/other.toml"); code != 2 {
		t.Errorf("-config naming a missing file: exit %d, want 2 (%s)", code, stderr)
	}
}

func TestMainList(t *testing.T) {
	t.Parallel()
	code, stdout, _ := run(t, "-list")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, s := range catalog {
		if !strings.Contains(stdout, s.ID+": "+s.Title) {
			t.Errorf("-list lacks %s", s.ID)
		}
	}
	_, stdout, _ = run(t, "-list", "-json")
	var doc struct {
		Schema   string
		Findings []spec
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || doc.Schema != Schema || len(doc.Findings) != len(catalog) {
		t.Errorf("-list -json: %v, %d entries", err, len(doc.Findings))
	}
}

// Every finding of the catalog is caused by some test of this package,
// and docs/doctor.md explains each one under its id.
func TestCatalogIsTestedAndDocumented(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Dir(file)
	tests, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, p := range tests {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(data)
	}
	docs, err := os.ReadFile(filepath.Join(dir, "..", "..", "..", "..", "docs", "doctor.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range catalog {
		if !strings.Contains(all.String(), `"`+s.ID+`:`) && !strings.Contains(all.String(), `"`+s.ID+`"`) {
			t.Errorf("no test causes %s", s.ID)
		}
		if !strings.Contains(string(docs), "### `"+s.ID+"`") {
			t.Errorf("docs/doctor.md has no section for %s", s.ID)
		}
	}
	if !strings.Contains(string(docs), Schema) {
		t.Errorf("docs/doctor.md does not name the -json schema %s", Schema)
	}
}
