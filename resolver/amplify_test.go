package resolver

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

// The search list's amplification, measured (issue 35, docs/security.md
// "Amplification"): a client that sends only the first try of random bare
// names under a Kubernetes-style list of five domains costs one upstream
// question per name of the lookup — the try and, asked ahead, the four
// other domains' names and the name as it is: 6 per client query, the
// bound 1 + min(8, domains) (at most 8 names are asked ahead).
func TestSearchAmplificationFactor(t *testing.T) {
	domains := []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example", "ec2.internal"}
	e := newSearchEnv(t, 5, func(c *Config) {
		c.Search = []SearchList{{Domains: domains, Ndots: 5}}
	})
	const queries = 40
	asked := 0
	for i := range queries {
		bare := fmt.Sprintf("rnd%d", i)
		if m, _ := e.ask(bare+"."+domains[0]+".", dns.TypeA); m.Rcode != dns.RcodeNameError {
			t.Fatalf("%s: %s, want NXDOMAIN", bare, dns.RcodeToString[m.Rcode])
		}
		e.settled()
		names := []string{bare + "."}
		for _, d := range domains {
			names = append(names, bare+"."+d+".")
		}
		for _, n := range names {
			asked += e.count(n)
		}
	}
	factor := float64(asked) / queries
	t.Logf("%d first tries under a %d-domain list: %d upstream questions, %.2f per client query", queries, len(domains), asked, factor)
	if bound := float64(1 + min(8, len(domains))); factor > bound || factor < 2 {
		t.Errorf("%.2f upstream questions per first try, want more than 1 (names asked ahead) and at most %.0f", factor, bound)
	}
}
