package resolver

import (
	"fmt"
	"slices"
	"testing"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
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

func TestSearchModelWalks(t *testing.T) {
	t.Parallel()
	m, err := newSearchModel([]SearchList{{Domains: []string{"Corp.Example.", "ec2.internal"}, Ndots: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want string // the walks' later names, "|" between walks, "*" before a first try's
	}{
		{"db.corp.example.", "*db.corp.example.corp.example. db.corp.example.ec2.internal.|*db.ec2.internal. db."},
		{"db.ec2.internal.", "*db.ec2.internal.corp.example. db.ec2.internal.ec2.internal.|db."},
		{"a.b.corp.example.", "*a.b.corp.example.corp.example. a.b.corp.example.ec2.internal.|*a.b.ec2.internal."},
		{"a.b.ec2.internal.", "*a.b.ec2.internal.corp.example. a.b.ec2.internal.ec2.internal."},
		{"db.", ""},
		{"x\\.y.corp.example.", ""},
	} {
		var got string
		for i, w := range m.walks(c.name) {
			if i > 0 {
				got += "|"
			}
			if w.first {
				got += "*"
			}
			for j, n := range w.later {
				if j > 0 {
					got += " "
				}
				got += n
			}
		}
		if got != c.want {
			t.Errorf("walks(%s) = %q, want %q", c.name, got, c.want)
		}
		if m.isTry(c.name) != (c.want != "") {
			t.Errorf("isTry(%s) = %v", c.name, !(c.want != ""))
		}
	}
	for _, bad := range [][]SearchList{
		{{Domains: []string{"not a name!"}}},
		{{Domains: []string{"a"}, Ndots: 16}},
		make([]SearchList, MaxSearchLists+1),
		{{Domains: make([]string, MaxSearchDomains+1)}},
	} {
		if _, err := newSearchModel(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// The held NXDOMAINs are bounded: a flood of names that do not exist
// cycles the table, which keeps maxHeld entries at most.
func TestHeldTableIsBounded(t *testing.T) {
	t.Parallel()
	tab := newHeldTable()
	for i := range maxHeld + 1000 {
		tab.put(cache.NewKey(fmt.Sprintf("n%d.corp.example.", i), dns.TypeA, dns.ClassINET, false, false), heldNX{})
	}
	if n := int(tab.n.Load()); n != maxHeld {
		t.Errorf("%d entries held, want the bound %d", n, maxHeld)
	}
	if tab.has(cache.NewKey("n0.corp.example.", dns.TypeA, dns.ClassINET, false, false)) {
		t.Error("the oldest entry survived the flood")
	}
}
