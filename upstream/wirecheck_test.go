package upstream

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

// wireReply packs a reply to name/qtype with the given records, as an
// upstream would send it (compressed, an OPT record).
func wireReply(tb testing.TB, name string, qtype uint16, rcode int, answer, ns, extra []string, edns bool) []byte {
	tb.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Response, m.RecursionAvailable, m.Rcode = true, true, rcode
	rrs := func(lines []string) []dns.RR {
		var out []dns.RR
		for _, l := range lines {
			rr, err := dns.NewRR(l)
			if err != nil {
				tb.Fatal(err)
			}
			out = append(out, rr)
		}
		return out
	}
	m.Answer, m.Ns, m.Extra = rrs(answer), rrs(ns), rrs(extra)
	if edns {
		m.SetEdns0(1232, false)
	}
	m.Compress = true
	b, err := m.Pack()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

var soa = "example. 300 IN SOA ns.example. hostmaster.example. 1 2 3 4 60"

// wireCases are replies the wire check must accept (clean) or decline.
func wireCases(tb testing.TB) []struct {
	name  string
	zone  string
	raw   []byte
	clean bool
} {
	A := dns.TypeA
	return []struct {
		name  string
		zone  string
		raw   []byte
		clean bool
	}{
		{"one A", ".", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN A 192.0.2.1"}, nil, nil, true), true},
		{"two A, no EDNS", ".", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN A 192.0.2.1", "www.example. 30 IN A 192.0.2.2"}, nil, nil, false), true},
		{"AAAA", "example.", wireReply(tb, "www.example.", dns.TypeAAAA, 0, []string{"www.example. 60 IN AAAA 2001:db8::1"}, nil, nil, true), true},
		{"NODATA with SOA", ".", wireReply(tb, "www.example.", dns.TypeAAAA, 0, nil, []string{soa}, nil, true), true},
		{"NODATA MX", ".", wireReply(tb, "www.example.", dns.TypeMX, 0, nil, []string{soa}, nil, true), true},
		{"NODATA without SOA", ".", wireReply(tb, "www.example.", A, 0, nil, nil, nil, true), true},
		{"NXDOMAIN with SOA", ".", wireReply(tb, "nx.www.example.", A, dns.RcodeNameError, nil, []string{soa}, nil, true), true},
		{"NXDOMAIN, SOA above the zone", "www.example.", wireReply(tb, "nx.www.example.", A, dns.RcodeNameError, nil, []string{soa}, nil, true), true},

		{"CNAME chain", ".", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN CNAME x.example.", "x.example. 60 IN A 192.0.2.1"}, nil, nil, true), true},
		{"two CNAMEs, two addresses", "example.", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN CNAME x.example.", "x.example. 60 IN CNAME cdn.y.example.", "cdn.y.example. 60 IN A 192.0.2.1", "cdn.y.example. 60 IN A 192.0.2.2"}, nil, nil, true), true},
		{"CNAME to a suffix of the name", ".", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN CNAME example.", "example. 60 IN A 192.0.2.1"}, nil, nil, true), true},
		{"CNAME leaving the zone", "example.", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN CNAME www.other.", "www.other. 60 IN A 6.6.6.6"}, nil, nil, true), false},
		{"CNAME loop", ".", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN CNAME x.example.", "x.example. 60 IN CNAME WWW.example.", "www.example. 60 IN A 192.0.2.1"}, nil, nil, true), false},
		{"CNAME without an end", ".", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN CNAME x.example."}, nil, nil, true), true},
		{"NODATA after a CNAME", ".", wireReply(tb, "www.example.", dns.TypeAAAA, 0, []string{"www.example. 60 IN CNAME edge.cdn.net."}, []string{"cdn.net. 300 IN SOA ns.cdn.net. h.cdn.net. 1 2 3 4 30"}, nil, true), true},
		{"NODATA after a CNAME, SOA of neither", ".", wireReply(tb, "www.example.", dns.TypeAAAA, 0, []string{"www.example. 60 IN CNAME edge.cdn.net."}, []string{"other. 300 IN SOA ns.other. h.other. 1 2 3 4 30"}, nil, true), false},
		{"NXDOMAIN after a CNAME", ".", wireReply(tb, "www.example.", A, dns.RcodeNameError, []string{"www.example. 60 IN CNAME gone.example."}, []string{soa}, nil, true), false},
		{"address beside the CNAME", ".", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN A 192.0.2.9", "www.example. 60 IN CNAME x.example.", "x.example. 60 IN A 192.0.2.1"}, nil, nil, true), false},
		{"CNAME out of order", ".", wireReply(tb, "www.example.", A, 0, []string{"x.example. 60 IN A 192.0.2.1", "www.example. 60 IN CNAME x.example."}, nil, nil, true), false},
		{"address of a chain name in other case", ".", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN CNAME x.example.", "X.example. 60 IN A 192.0.2.1"}, nil, nil, true), false},
		{"foreign answer", ".", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN A 192.0.2.1", "evil.example. 60 IN A 6.6.6.6"}, nil, nil, true), false},
		{"other type in answer", ".", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN TXT x"}, nil, nil, true), false},
		{"NS in authority", ".", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN A 192.0.2.1"}, []string{"example. 60 IN NS ns.example."}, nil, true), false},
		{"SOA beside an answer", ".", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN A 192.0.2.1"}, []string{soa}, nil, true), false},
		{"SOA of another zone", ".", wireReply(tb, "www.example.", dns.TypeAAAA, 0, nil, []string{"other. 300 IN SOA ns.other. h.other. 1 2 3 4 60"}, nil, true), false},
		{"glue", ".", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN A 192.0.2.1"}, nil, []string{"ns.example. 60 IN A 192.0.2.53"}, false), false},
		{"outside the zone", "consul.", wireReply(tb, "www.example.", A, 0, []string{"www.example. 60 IN A 192.0.2.1"}, nil, nil, true), false},
		{"SERVFAIL", ".", wireReply(tb, "www.example.", A, dns.RcodeServerFailure, nil, nil, nil, true), false},
		{"extended rcode", ".", wireReply(tb, "www.example.", A, dns.RcodeBadVers, nil, nil, nil, true), false},
		{"escaped SOA name", ".", wireReply(tb, "www.example.", dns.TypeAAAA, 0, nil, []string{`example. 300 IN SOA ns.example. host\.master.example. 1 2 3 4 60`}, nil, true), false},
	}
}

func TestWireCleanAgreesWithScrub(t *testing.T) {
	for _, c := range wireCases(t) {
		got := wireClean(c.raw, wireZone(c.zone))
		if got != c.clean {
			t.Errorf("%s: wireClean %v, want %v", c.name, got, c.clean)
		}
		checkWireAgreement(t, c.raw, c.zone)
	}
	for cnames := 1; cnames <= maxChainLength+1; cnames++ {
		var answer []string
		name := "www.example."
		for i := range cnames {
			next := fmt.Sprintf("c%d.example.", i)
			answer = append(answer, name+" 60 IN CNAME "+next)
			name = next
		}
		answer = append(answer, name+" 60 IN A 192.0.2.1")
		raw := wireReply(t, "www.example.", dns.TypeA, 0, answer, nil, nil, true)
		if got := wireClean(raw, wireZone(".")); got != (cnames <= maxWireCNAMEs) {
			t.Errorf("chain of %d CNAMEs: wireClean %v", cnames, got)
		}
		checkWireAgreement(t, raw, ".")
	}
	truncated := wireReply(t, "www.example.", dns.TypeA, 0, []string{"www.example. 60 IN A 192.0.2.1"}, nil, nil, true)
	truncated[2] |= 0x02 // TC
	if wireClean(truncated, wireZone(".")) {
		t.Error("a truncated reply passed the wire check")
	}
}

// checkWireAgreement fails when the wire check accepts raw while unpacking
// fails or Scrub would change the reply.
func checkWireAgreement(t *testing.T, raw []byte, zone string) {
	t.Helper()
	if !wireClean(raw, wireZone(zone)) {
		return
	}
	m := new(dns.Msg)
	if err := m.Unpack(raw); err != nil {
		t.Fatalf("accepted on the wire, but does not unpack: %v", err)
	}
	if len(m.Question) != 1 {
		t.Fatalf("accepted with %d questions", len(m.Question))
	}
	before := m.String()
	result := Scrub(m.Question[0], m, zone)
	if result.Dropped() != 0 || result.ChaseName != "" || m.String() != before {
		t.Fatalf("accepted on the wire, but Scrub changes it (%+v):\n%s\n%s", result, before, m)
	}
	if m.Truncated || (m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError) {
		t.Fatalf("accepted rcode %d, truncated %v", m.Rcode, m.Truncated)
	}
}

// FuzzWireClean: whatever bytes arrive, the wire check accepts nothing that
// fails to unpack or that Scrub would change, in zone "." or "example.".
func FuzzWireClean(f *testing.F) {
	for _, c := range wireCases(f) {
		f.Add(c.raw, c.zone == ".")
	}
	f.Fuzz(func(t *testing.T, raw []byte, root bool) {
		zone := "example."
		if root {
			zone = "."
		}
		checkWireAgreement(t, raw, zone)
	})
}
