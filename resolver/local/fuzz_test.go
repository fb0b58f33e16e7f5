package local

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// Every question Lookup answers has a name Covers covers: otherwise the
// fast path would answer it from the cache. Names come as a client could
// send them (any bytes the wire format carries, as text).
func FuzzCoversEveryAnswer(f *testing.F) {
	for _, seed := range []string{"nas.lan.", "foo.", "x.blocked.test.", "11.1.168.192.in-addr.arpa.",
		"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.e.f.ip6.arpa.", "a\\.b.", ".", "lan."} {
		f.Add(seed, uint16(dns.TypeA))
		f.Add(seed, uint16(dns.TypePTR))
	}
	s := testSource(f, nil)
	f.Fuzz(func(t *testing.T, name string, qtype uint16) {
		if _, ok := dns.IsDomainName(name); !ok {
			return
		}
		name = dns.Fqdn(name)
		m, _, ok := s.Lookup(dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET})
		if !ok {
			return
		}
		if !s.Covers([]byte(strings.ToLower(name))) {
			t.Fatalf("%q %d answered (%s) but not covered", name, qtype, dns.RcodeToString[m.Rcode])
		}
	})
}

// A hosts file of any content parses without panicking, and every entry
// has an address and names that are domain names.
func FuzzParseHosts(f *testing.F) {
	f.Add(testHosts)
	f.Add("::1 localhost\n# c\n\n10.0.0.1\tx y#z\n")
	f.Fuzz(func(t *testing.T, body string) {
		entries, _, _, _ := parseHosts(strings.NewReader(body))
		for _, e := range entries {
			if !e.addr.IsValid() || len(e.names) == 0 {
				t.Fatalf("entry %+v", e)
			}
			for _, n := range e.names {
				if _, ok := dns.IsDomainName(n); !ok || !strings.HasSuffix(n, ".") {
					t.Fatalf("name %q", n)
				}
			}
		}
	})
}
