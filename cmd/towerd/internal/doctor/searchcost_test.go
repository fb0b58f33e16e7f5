package doctor

import (
	"testing"

	"github.com/towerd/towerd/cmd/towerd/internal/config"
)

// The figures of issue 28's table (two search domains, through towerd,
// NXDOMAIN never cached): upstream questions per lookup in the steady
// state, measured there as 4.05, 6.04, 4.05 and 0.01, and the round trips
// a lookup waits, without towerd's search-list rules and with them (one
// round at most, none when the name that exists is known).
func TestSearchListCostMatchesIssue28(t *testing.T) {
	t.Parallel()
	n := &Node{}
	n.Towerd.Installed = true
	n.Towerd.Config = config.DefaultConfig()
	n.Towerd.RootZone.Servers = []string{"10.0.0.2:53"}
	if !n.searchRules() {
		t.Fatal("the default config's search-list rules read another file than /etc/resolv.conf")
	}
	search := []string{"corp.example", "ec2.internal"}
	for _, c := range []struct {
		ex                       lookupExample
		ndots                    int
		upstream, roundTrs, with int
	}{
		{lookupExample{"api-service.service.consul", "", true}, 5, 4, 2, 0},
		{lookupExample{"api-service.service.consul", "", true}, 1, 0, 0, 0},
		{lookupExample{"ghost.bench.test", "", false}, 1, 6, 3, 1},
		{lookupExample{"api-service", "", false}, 1, 4, 2, 1},
	} {
		for _, rules := range []bool{false, true} {
			got := n.cost(c.ex, search, glibcOptions{ndots: c.ndots}, true, rules)
			want := map[bool]int{false: c.roundTrs, true: c.with}[rules]
			if got.upstream != c.upstream || got.roundTrips != want {
				t.Errorf("%s ndots:%d, rules %v: %d questions, %d round trips; want %d, %d", c.ex.name, c.ndots, rules,
					got.upstream, got.roundTrips, c.upstream, want)
			}
		}
	}
	// single-request: A and AAAA one after the other, twice the round trips.
	if got := n.cost(lookupExample{"ghost.bench.test", "", false}, search, glibcOptions{ndots: 1, singleRequest: true}, true, false); got.roundTrips != 6 {
		t.Errorf("single-request: %d round trips, want 6", got.roundTrips)
	}
	// A search domain under consul. is answered by the local agent: no
	// upstream question for it.
	if got := n.cost(lookupExample{"web", "", false}, []string{"service.consul"}, glibcOptions{ndots: 1}, true, false); got.upstream != 0 {
		t.Errorf("search service.consul: %d upstream questions, want 0", got.upstream)
	}
}
