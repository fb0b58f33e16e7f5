package upstream

import (
	"errors"
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

// chainReply is a reply to qname/qtype whose answer is lines.
func chainReply(t *testing.T, qname string, qtype uint16, lines ...string) *dns.Msg {
	t.Helper()
	m := &dns.Msg{Question: []dns.Question{{Name: qname, Qtype: qtype, Qclass: dns.ClassINET}}}
	m.Response = true
	m.Answer = rrs(t, lines...)
	return m
}

// linkedChain is n CNAMEs from c0.example.org. and an A record.
func linkedChain(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("c%d.example.org. 60 IN CNAME c%d.example.org.", i, i+1))
	}
	return append(out, fmt.Sprintf("c%d.example.org. 60 IN A 192.0.2.1", n))
}

// Issue 23: a chain of up to MaxChainLinks CNAMEs is kept whole; one link
// more, a CNAME loop or a DNAME loop breaks it (ErrBrokenChain: the
// resolution fails as on SERVFAIL, nothing cached); and at the chain's
// end the records of any type are relayed, as Consul answers a TXT
// question for a service with its addresses.
func TestScrubChains(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reply   *dns.Msg
		broken  bool
		answers int
	}{
		{"9 links", chainReply(t, "c0.example.org.", dns.TypeA, linkedChain(9)...), false, 10},
		{"64 links", chainReply(t, "c0.example.org.", dns.TypeA, linkedChain(MaxChainLinks)...), false, MaxChainLinks + 1},
		{"65 links", chainReply(t, "c0.example.org.", dns.TypeA, linkedChain(MaxChainLinks+1)...), true, 0},
		{"CNAME loop", chainReply(t, "a.example.org.", dns.TypeA,
			"a.example.org. 60 IN CNAME b.example.org.", "b.example.org. 60 IN CNAME a.example.org."), true, 0},
		{"DNAME loop", chainReply(t, "q.a.example.org.", dns.TypeA,
			"a.example.org. 60 IN DNAME b.example.org.", "q.a.example.org. 60 IN CNAME q.b.example.org.",
			"b.example.org. 60 IN DNAME a.example.org.", "q.b.example.org. 60 IN CNAME q.a.example.org."), true, 0},
		{"TXT answered with addresses", chainReply(t, "web.service.consul.", dns.TypeTXT,
			"web.service.consul. 0 IN A 127.0.0.1", "web.service.consul. 0 IN A 127.0.0.10"), false, 2},
		{"off-chain records still go", chainReply(t, "web.service.consul.", dns.TypeTXT,
			"web.service.consul. 0 IN A 127.0.0.1", "other.service.consul. 0 IN A 127.0.0.66"), false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := tc.reply.Pack()
			if err != nil {
				t.Fatal(err)
			}
			zone := "example.org."
			if tc.reply.Question[0].Name == "web.service.consul." {
				zone = "consul."
			}
			kept, result := scrubBytes(t, raw, zone)
			if got := result.Broken != nil; got != tc.broken || (got && !errors.Is(result.Broken, ErrBrokenChain)) {
				t.Fatalf("Broken = %v, want broken %v", result.Broken, tc.broken)
			}
			if tc.broken {
				if ErrorKind(result.Broken) != KindChain {
					t.Errorf("ErrorKind = %q, want %q", ErrorKind(result.Broken), KindChain)
				}
				return
			}
			out := new(dns.Msg)
			if err := out.Unpack(kept); err != nil {
				t.Fatal(err)
			}
			if len(out.Answer) != tc.answers {
				t.Errorf("%d answer records kept, want %d: %v", len(out.Answer), tc.answers, out.Answer)
			}
		})
	}
}
