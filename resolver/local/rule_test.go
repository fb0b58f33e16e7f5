package local

import (
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Answer names the rule that answered (issue 25: `towerd lookup` showed
// "watch covers this name" for hosts names): the hosts file the answer's
// first record came from, a static record, the address or local domain,
// domain_needed, bogus_priv; nothing for a question that is not local.
func TestAnswerNamesTheRule(t *testing.T) {
	extra := filepath.Join(t.TempDir(), "extra")
	// nas.lan. again (the first file gave it first) and a name of its own.
	writeHosts(t, extra, "192.168.1.10 nas.lan\n10.9.9.9 only.extra.lan\n", time.Unix(1e9, 0))
	var hosts string
	s := testSource(t, func(o *Options) {
		hosts = o.HostsFiles[0]
		o.HostsFiles = append(o.HostsFiles, extra)
	})
	A, AAAA, PTR, MX := dns.TypeA, dns.TypeAAAA, dns.TypePTR, dns.TypeMX
	for _, tt := range []struct {
		name  string
		qtype uint16
		rcode int
		why   string
	}{
		{"nas.lan.", A, dns.RcodeSuccess, "hosts " + hosts},
		{"only.extra.lan.", A, dns.RcodeSuccess, "hosts " + extra},
		{"10.1.168.192.in-addr.arpa.", PTR, dns.RcodeSuccess, "hosts " + hosts},
		{"mail.lan.", MX, dns.RcodeSuccess, "record"},
		{"www.lan.", A, dns.RcodeSuccess, "record"}, // the CNAME is a record; the address it leads to is a hosts name
		{"20.1.168.192.in-addr.arpa.", PTR, dns.RcodeSuccess, "record"},
		{"nas.lan.", MX, dns.RcodeSuccess, "local lan."},
		{"other.lan.", A, dns.RcodeNameError, "local lan."},
		{"x.Blocked.test.", A, dns.RcodeSuccess, "address blocked.test."},
		{"a.ll.test.", AAAA, dns.RcodeSuccess, "local ll.test."},
		{"foo.", A, dns.RcodeNameError, "domain_needed"},
		{"nas.", AAAA, dns.RcodeSuccess, "domain_needed"},
		{"11.1.168.192.in-addr.arpa.", PTR, dns.RcodeNameError, "bogus_priv"},
	} {
		m, stale, why, ok := s.Answer(dns.Question{Name: tt.name, Qtype: tt.qtype, Qclass: dns.ClassINET})
		if !ok || stale || m.Rcode != tt.rcode || why != tt.why {
			t.Errorf("%s %s: ok %v stale %v rcode %v why %q, want %s %q", tt.name, dns.TypeToString[tt.qtype], ok, stale,
				rcodeOf(m), why, dns.RcodeToString[tt.rcode], tt.why)
		}
	}
	for _, q := range []dns.Question{{Name: "www.example.org.", Qtype: A, Qclass: dns.ClassINET},
		{Name: "foo.", Qtype: MX, Qclass: dns.ClassINET}, {Name: "nas.lan.", Qtype: A, Qclass: dns.ClassCHAOS}} {
		if _, _, why, ok := s.Answer(q); ok || why != "" {
			t.Errorf("%s %s: ok %v why %q, want neither", q.Name, dns.TypeToString[q.Qtype], ok, why)
		}
	}

	all := testSource(t, func(o *Options) {
		o.Addresses = []Address{{".", []netip.Addr{netip.MustParseAddr("192.0.2.9")}}}
	})
	if _, _, why, _ := all.Answer(dns.Question{Name: "www.example.org.", Qtype: A, Qclass: dns.ClassINET}); why != "address ." {
		t.Errorf("address=/#/: why %q, want %q", why, "address .")
	}
}

func rcodeOf(m *dns.Msg) string {
	if m == nil {
		return "none"
	}
	return dns.RcodeToString[m.Rcode]
}
