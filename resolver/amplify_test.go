package resolver

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

// The search list's amplification, measured (issue 35, docs/security.md
// "Amplification"): a client that sends only first tries of random names
// (the attacker's cheapest question) costs, counted at the upstream over
// every name asked, the try and its lookup's later names asked ahead: the
// other domains' names and the name as it is, 1 + domains. Under nested
// domains the try of `x` under ns1.svc.cluster.local is also the try of
// `x.ns1` under svc.cluster.local and of `x.ns1.svc` under cluster.local;
// those readings are later tries, which ask nothing ahead (searchWalk.first),
// so the factor stays 1 + domains (it was 12.1 before). A dotted name
// tried as it is first asks nothing ahead until a client asked its first
// expansion (asIsEvidenceAge): 1.
func TestSearchAmplificationFactor(t *testing.T) {
	nested := []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example", "ec2.internal"}
	for _, tc := range []struct {
		name    string
		domains []string
		ndots   int
		try     func(i int) string // a random first try
		want    int                // upstream questions per try, exactly
	}{
		{"flat", searchDomains, 1, func(i int) string { return fmt.Sprintf("rnd%d.corp.example.", i) }, 3},
		{"nested", nested, 5, func(i int) string { return fmt.Sprintf("rnd%d.ns1.svc.cluster.local.", i) }, 6},
		{"as-is", searchDomains, 1, func(i int) string { return fmt.Sprintf("rnd%d.example.", i) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSearchEnv(t, tc.ndots, func(c *Config) {
				c.Search = []SearchList{{Domains: tc.domains, Ndots: tc.ndots}}
			})
			const queries = 40
			for i := range queries {
				if m, _ := e.ask(tc.try(i), dns.TypeA); m.Rcode != dns.RcodeNameError {
					t.Fatalf("%s: %s, want NXDOMAIN", tc.try(i), dns.RcodeToString[m.Rcode])
				}
				e.settled()
			}
			asked := e.up.Total()
			t.Logf("%d first tries under %d domains, ndots %d: %d upstream questions, %.2f per client question",
				queries, len(tc.domains), tc.ndots, asked, float64(asked)/queries)
			if asked != queries*tc.want {
				t.Errorf("%d upstream questions for %d first tries (%.2f each), want exactly %d each",
					asked, queries, float64(asked)/queries, tc.want)
			}
		})
	}
}
