package dnssec

import (
	"context"
	"testing"

	"github.com/miekg/dns"
)

// BenchmarkValidate is the validator's CPU per validated answer (the work a
// validated miss adds, beside its upstream round trips): keys cached
// (every answer after a zone's first), and a cold chain (root DNSKEY, the
// zone's DS and DNSKEY fetched and verified first).
func BenchmarkValidate(b *testing.B) {
	tr := newSignedTree(b)
	ex := tr.example
	signed := reply(0, ex.sign(b, rr(b, "www.example. 300 IN A 192.0.2.1")), nil)
	nx := reply(dns.RcodeNameError, nil, append(append(
		ex.sign(b, rr(b, "example. 300 IN SOA ns.example. h.example. 1 2 3 4 300")),
		ex.sign(b, rr(b, "ns.example. 300 IN NSEC www.example. A RRSIG NSEC"))...),
		ex.sign(b, rr(b, "example. 300 IN NSEC ns.example. NS SOA RRSIG NSEC DNSKEY"))...))
	unsigned := reply(0, []dns.RR{rr(b, "www.insecure. 300 IN A 192.0.2.7")}, nil)
	for _, bc := range []struct {
		name  string
		qname string
		qtype uint16
		m     *dns.Msg
		cold  bool
	}{
		{"secure/keys-cached", "www.example.", dns.TypeA, signed, false},
		{"nxdomain-nsec/keys-cached", "nx.example.", dns.TypeA, nx, false},
		{"insecure/delegation-cached", "www.insecure.", dns.TypeA, unsigned, false},
		{"secure/cold-chain", "www.example.", dns.TypeA, signed, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			v := tr.validator(b, Limits{})
			v.Validate(context.Background(), bc.qname, bc.qtype, bc.m)
			b.ReportAllocs()
			for b.Loop() {
				if bc.cold {
					v = tr.validator(b, Limits{})
				}
				if r := v.Validate(context.Background(), bc.qname, bc.qtype, bc.m); r.Verdict == Bogus {
					b.Fatal(r.Reason)
				}
			}
		})
	}
}
