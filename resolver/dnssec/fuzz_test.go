package dnssec

import (
	"context"
	"testing"

	"github.com/miekg/dns"
)

// FuzzValidate feeds the validator arbitrary replies: as the answer to
// judge (with the signed tree's real keys behind it), and as every DS and
// DNSKEY reply a second validator fetches. Whatever comes, it must not
// panic, must stay within its fetch budget, and must never call an
// answer secure that no key of the tree signed.
func FuzzValidate(f *testing.F) {
	tr := newSignedTree(f)
	ex := tr.example
	seed := func(m *dns.Msg) []byte {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	signed := reply(0, ex.sign(f, rr(f, "www.example. 300 IN A 192.0.2.1")), nil)
	signed.SetQuestion("www.example.", dns.TypeA)
	nx := reply(dns.RcodeNameError, nil, append(
		ex.sign(f, rr(f, "ns.example. 300 IN NSEC www.example. A RRSIG NSEC")),
		ex.sign(f, rr(f, "example. 300 IN NSEC ns.example. NS SOA RRSIG NSEC DNSKEY"))...))
	nx.SetQuestion("nx.example.", dns.TypeA)
	keys := reply(0, ex.keys(f), nil)
	f.Add(seed(signed), seed(keys))
	f.Add(seed(nx), seed(reply(0, nil, nsec3Proof(f, ex, 1, "a.example."))))
	shared := tr.validator(f, Limits{})
	f.Fuzz(func(t *testing.T, answer, fetched []byte) {
		m := new(dns.Msg)
		if m.Unpack(answer) != nil || len(m.Question) != 1 {
			return
		}
		q := m.Question[0]
		if _, ok := dns.IsDomainName(q.Name); !ok {
			return
		}
		shared.Validate(context.Background(), q.Name, q.Qtype, m)

		up := newFakeUpstream()
		up.fallback = func(string, uint16) *dns.Msg {
			r := new(dns.Msg)
			if r.Unpack(fetched) != nil {
				return nil
			}
			return r
		}
		v := newTestValidator(t, up, []dns.RR{ex.ds()}, Limits{}, 0)
		r := v.Validate(context.Background(), q.Name, q.Qtype, m.Copy())
		if n := up.count(); n > DefaultFetches {
			t.Fatalf("%d fetches, budget %d", n, DefaultFetches)
		}
		if r.Verdict == Secure && m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0 && !signedByTree(m, ex) {
			t.Fatalf("secure without a signature of the tree's keys: %v", m)
		}
	})
}

// signedByTree reports whether m carries a signature by one of z's keys.
func signedByTree(m *dns.Msg, z *testZone) bool {
	for _, rr := range append(append([]dns.RR(nil), m.Answer...), m.Ns...) {
		if s, ok := rr.(*dns.RRSIG); ok && (s.KeyTag == z.zsk.KeyTag() || s.KeyTag == z.ksk.KeyTag()) {
			return true
		}
	}
	return false
}
