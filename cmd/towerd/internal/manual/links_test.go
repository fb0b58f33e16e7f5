package manual

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the repository, seen from this package's directory.
const repoRoot = "../../../.."

// repoFile reads a file of the repository.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func loadManual(t *testing.T) *Manual {
	t.Helper()
	m, err := Load(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// pendingFiles are files of the manual that another branch writes and the
// README already links to; their links are let through while the file
// is missing, and the test fails once it exists, so the entry goes.
var pendingFiles = map[string]string{}

// TestManualLinks: every link of the README and docs/ to a file of the
// repository finds it, and every anchor finds its heading, so a section
// that moves or is renamed cannot leave a dead link behind. References by
// name (see "Cache across restarts") and paths named in the text
// (docs/benchmarks.md) must name a heading and a file that exist.
func TestManualLinks(t *testing.T) {
	m := loadManual(t)
	docs := m.Docs()
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(repoRoot, rel))
		if _, pending := pendingFiles[rel]; pending {
			if err == nil {
				t.Errorf("%s exists now: drop it from pendingFiles", rel)
			}
			return true
		}
		return err == nil
	}
	checked := 0
	for _, l := range m.Links() {
		if l.External() {
			continue
		}
		checked++
		target := l.Resolve()
		if !exists(target) {
			t.Errorf("%s:%d: link %q: %s does not exist", l.File, l.Line, l.Target, target)
			continue
		}
		if _, pending := pendingFiles[target]; pending || l.Anchor() == "" {
			continue
		}
		d, ok := docs[target]
		if !ok {
			t.Errorf("%s:%d: link %q: an anchor into %s, which is not part of the manual", l.File, l.Line, l.Target, target)
			continue
		}
		if !Anchors(d)[l.Anchor()] {
			t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", l.File, l.Line, l.Target, target, l.Anchor())
		}
	}
	if checked < 20 {
		t.Fatalf("only %d links into the repository found: is the link parser broken?", checked)
	}

	headings := m.HeadingTexts()
	seeQuoted := regexp.MustCompile(`\b[Ss]ee "([^"]+)"`)
	docPath := regexp.MustCompile(`\bdocs/[a-z0-9-]+\.(?:md|toml)\b`)
	for _, name := range m.Names() {
		for i, line := range strings.Split(m.Files[name], "\n") {
			for _, ref := range seeQuoted.FindAllStringSubmatch(line, -1) {
				if !headings[ref[1]] {
					t.Errorf("%s:%d: see %q: no heading of the manual has that text", name, i+1, ref[1])
				}
			}
			for _, p := range docPath.FindAllString(line, -1) {
				if !exists(p) {
					t.Errorf("%s:%d: names %s, which does not exist", name, i+1, p)
				}
			}
		}
	}
}

// GitHub's anchors, as its renderer makes them for the manual's headings.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		`Zone "." follows resolv.conf`:                      "zone--follows-resolvconf",
		"Consul ACL token (LoadCredential)":                 "consul-acl-token-loadcredential",
		"`towerd stats`":                                    "towerd-stats",
		"Drill: will this node survive a bad upstream day?": "drill-will-this-node-survive-a-bad-upstream-day",
		"glibc lookups: nss-resolve":                        "glibc-lookups-nss-resolve",
		"Which file zone \".\" follows":                     "which-file-zone--follows",
		"[Moving](install.md) from dnsmasq":                 "moving-from-dnsmasq",
		"state_dir and `cache.min_ttl`":                     "state_dir-and-cachemin_ttl",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
	d := Parse("x.md", "# A\n## Notes\n## Notes\n```\n# not a heading\n```\n")
	if a := Anchors(d); !a["a"] || !a["notes"] || !a["notes-1"] || a["not-a-heading"] {
		t.Errorf("Anchors = %v, want a, notes, notes-1", a)
	}
}
