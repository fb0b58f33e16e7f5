package resolver

import (
	"slices"
	"testing"
)

// glibc's order itself is held to getent in a namespace by doctor's
// TestGlibcTriesMatchGetent.
func TestSearchListTries(t *testing.T) {
	t.Parallel()
	search := []string{"corp.example", "ec2.internal"}
	for _, c := range []struct {
		name  string
		ndots int
		want  []string
	}{
		{"web.service.consul", 1, []string{"web.service.consul", "web.service.consul.corp.example", "web.service.consul.ec2.internal"}},
		{"web.service.consul", 5, []string{"web.service.consul.corp.example", "web.service.consul.ec2.internal", "web.service.consul"}},
		{"db", 1, []string{"db.corp.example", "db.ec2.internal", "db"}},
		{"db", 0, []string{"db", "db.corp.example", "db.ec2.internal"}},
		{"db.", 5, []string{"db."}},
	} {
		if got := (SearchList{Domains: search, Ndots: c.ndots}).Tries(c.name); !slices.Equal(got, c.want) {
			t.Errorf("Tries(%s, ndots:%d) = %v", c.name, c.ndots, got)
		}
	}
}
