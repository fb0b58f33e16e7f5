package local

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// testHosts is the hosts file of the lookup tests; test/e2e_dnsmasq_test.go
// asks the real dnsmasq the same kind of questions.
const testHosts = `192.168.1.10 nas.lan nas
10.0.0.5	printer.lan printer
fd00::10 nas.lan
192.0.2.50 www.example.com alias.example.com
192.0.2.51 www.example.com
192.0.2.50 second.example.com
10.7.7.7 inside.corp.test
10.1.2.3 host.rev.test
`

// writeHosts writes a hosts file with the modification time mtime.
func writeHosts(t testing.TB, path, body string, mtime time.Time) {
	t.Helper()
	dnstest.WriteFile(t, path, body)
	// Poll compares modification times: set them apart explicitly rather
	// than rely on the file system's clock granularity.
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func testSource(t testing.TB, tweak func(*Options)) *Source {
	t.Helper()
	hosts := filepath.Join(t.TempDir(), "hosts")
	writeHosts(t, hosts, testHosts, time.Unix(1e9, 0))
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	o := Options{
		HostsFiles: []string{hosts, filepath.Join(t.TempDir(), "missing")},
		Records: []dns.RR{
			rr("mail.lan. MX 10 nas.lan."),
			rr("www.lan. CNAME nas.lan."),
			rr("ext.lan. CNAME www.example.org."),
			rr("_ipp._tcp.lan. SRV 0 0 631 printer.lan."),
			rr("Static.LAN. 3600 IN A 192.168.1.20"),
			rr("txt.lan. TXT \"hello world\""),
		},
		Addresses: []Address{
			{"blocked.test", []netip.Addr{netip.MustParseAddr("192.0.2.1")}},
			{"v6.test.", []netip.Addr{netip.MustParseAddr("2001:db8::1")}},
			{"both.test", []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8::2")}},
			{"example.com", []netip.Addr{netip.MustParseAddr("192.0.2.99")}},
			{"sub.fwd.test", []netip.Addr{netip.MustParseAddr("192.0.2.3")}},
			{"ll.test", []netip.Addr{netip.MustParseAddr("192.0.2.4")}},
		},
		Domains:      []string{"lan", "nx.test", "ll.test"},
		DomainNeeded: true,
		BogusPriv:    true,
		TTL:          60 * time.Second,
		Forwarded:    []string{".", "consul.", "corp.test.", "1.10.in-addr.arpa.", "deep.sub.fwd.test.", "corpx."},
	}
	if tweak != nil {
		tweak(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// answerOf is "RCODE rr; rr" with the records in presentation form, TTLs
// included, sorted; "forward" when the source does not answer.
func answerOf(s *Source, name string, qtype uint16) string {
	m, stale, ok := s.Lookup(dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET})
	if !ok {
		return "forward"
	}
	if stale {
		return "stale?"
	}
	var rrs []string
	for _, rr := range m.Answer {
		rrs = append(rrs, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	slices.Sort(rrs)
	return strings.TrimSpace(dns.RcodeToString[m.Rcode] + " " + strings.Join(rrs, "; "))
}

func TestLookup(t *testing.T) {
	s := testSource(t, nil)
	A, AAAA, PTR, MX, TXT := dns.TypeA, dns.TypeAAAA, dns.TypePTR, dns.TypeMX, dns.TypeTXT
	tests := []struct {
		name  string
		qtype uint16
		want  string
	}{
		// Hosts names: aliases, IPv6, a name on two lines, case kept as asked.
		{"nas.lan.", A, "NOERROR nas.lan. 60 IN A 192.168.1.10"},
		{"NAS.Lan.", A, "NOERROR NAS.Lan. 60 IN A 192.168.1.10"},
		{"nas.lan.", AAAA, "NOERROR nas.lan. 60 IN AAAA fd00::10"},
		{"nas.", A, "NOERROR nas. 60 IN A 192.168.1.10"},
		{"www.example.com.", A, "NOERROR www.example.com. 60 IN A 192.0.2.50; www.example.com. 60 IN A 192.0.2.51"},
		{"alias.example.com.", A, "NOERROR alias.example.com. 60 IN A 192.0.2.50"},
		// A hosts name outside a local domain: other types are forwarded
		// (dnsmasq forwards AAAA for an IPv4-only hosts name).
		{"www.example.com.", AAAA, "forward"},
		{"www.example.com.", MX, "forward"},
		{"inside.corp.test.", A, "NOERROR inside.corp.test. 60 IN A 10.7.7.7"},
		{"inside.corp.test.", AAAA, "forward"},
		// Inside the local domain: NODATA for a known name, an empty
		// non-terminal and the apex; NXDOMAIN for the rest.
		{"nas.lan.", MX, "NOERROR"},
		{"printer.lan.", AAAA, "NOERROR"},
		{"lan.", A, "NOERROR"},
		{"_tcp.lan.", A, "NOERROR"},
		{"other.lan.", A, "NXDOMAIN"},
		{"x.nas.lan.", A, "NXDOMAIN"},
		// Static records, a CNAME chased inside local data, one leaving it.
		{"mail.lan.", MX, "NOERROR mail.lan. 60 IN MX 10 nas.lan."},
		{"www.lan.", A, "NOERROR nas.lan. 60 IN A 192.168.1.10; www.lan. 60 IN CNAME nas.lan."},
		{"www.lan.", dns.TypeCNAME, "NOERROR www.lan. 60 IN CNAME nas.lan."},
		{"ext.lan.", A, "NOERROR ext.lan. 60 IN CNAME www.example.org."},
		{"_ipp._tcp.lan.", dns.TypeSRV, "NOERROR _ipp._tcp.lan. 60 IN SRV 0 0 631 printer.lan."},
		{"static.lan.", A, "NOERROR static.lan. 60 IN A 192.168.1.20"},
		{"txt.lan.", TXT, `NOERROR txt.lan. 60 IN TXT "hello world"`},
		// Address domains: the domain and below, its families only.
		{"blocked.test.", A, "NOERROR blocked.test. 60 IN A 192.0.2.1"},
		{"x.Blocked.test.", A, "NOERROR x.Blocked.test. 60 IN A 192.0.2.1"},
		{"blocked.test.", AAAA, "forward"},
		{"x.blocked.test.", MX, "forward"},
		{"v6.test.", A, "forward"},
		{"v6.test.", AAAA, "NOERROR v6.test. 60 IN AAAA 2001:db8::1"},
		{"both.test.", AAAA, "NOERROR both.test. 60 IN AAAA 2001:db8::2"},
		{"zzz.example.com.", A, "NOERROR zzz.example.com. 60 IN A 192.0.2.99"},
		{"zzz.example.com.", AAAA, "forward"},
		// Address and local together: dnsmasq's pre-2.86 behaviour.
		{"a.ll.test.", AAAA, "NOERROR"},
		{"a.ll.test.", A, "NOERROR a.ll.test. 60 IN A 192.0.2.4"},
		// A local domain without data.
		{"nx.test.", dns.TypeSOA, "NXDOMAIN"},
		{"a.nx.test.", AAAA, "NXDOMAIN"},
		// A longer forwarded zone wins over an address domain.
		{"x.sub.fwd.test.", A, "NOERROR x.sub.fwd.test. 60 IN A 192.0.2.3"},
		{"x.deep.sub.fwd.test.", A, "forward"},
		// domain_needed: A and AAAA of dotless names, unless a zone of its own.
		{"foo.", A, "NXDOMAIN"},
		{"foo.", AAAA, "NXDOMAIN"},
		{"foo.", MX, "forward"},
		{"nas.", AAAA, "NOERROR"},
		{"nas.", MX, "forward"},
		{"corpx.", A, "forward"},
		{".", dns.TypeNS, "forward"},
		{".", A, "forward"},
		{"com.", dns.TypeNS, "forward"},
		// bogus_priv and PTR from hosts.
		{"10.1.168.192.in-addr.arpa.", PTR, "NOERROR 10.1.168.192.in-addr.arpa. 60 IN PTR nas.lan."},
		{"50.2.0.192.in-addr.arpa.", PTR, "NOERROR 50.2.0.192.in-addr.arpa. 60 IN PTR www.example.com."},
		{"20.1.168.192.in-addr.arpa.", PTR, "NOERROR 20.1.168.192.in-addr.arpa. 60 IN PTR static.lan."},
		{"0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", PTR,
			"NOERROR 0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa. 60 IN PTR nas.lan."},
		{"11.1.168.192.in-addr.arpa.", PTR, "NXDOMAIN"},
		{"11.1.168.192.in-addr.arpa.", TXT, "forward"},
		{"168.192.in-addr.arpa.", dns.TypeSOA, "forward"},
		{"3.2.1.10.in-addr.arpa.", PTR, "NOERROR 3.2.1.10.in-addr.arpa. 60 IN PTR host.rev.test."},
		{"4.3.1.10.in-addr.arpa.", PTR, "forward"}, // the rev-server zone 1.10.in-addr.arpa.
		{"9.9.9.10.in-addr.arpa.", PTR, "NXDOMAIN"},
		{"2.0.0.127.in-addr.arpa.", PTR, "NXDOMAIN"},
		{"8.8.8.8.in-addr.arpa.", PTR, "forward"},
		{"1.0.64.100.in-addr.arpa.", PTR, "forward"},
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.c.f.ip6.arpa.", PTR, "forward"},
		{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.e.f.ip6.arpa.", PTR, "NXDOMAIN"},
		// Other names are not local.
		{"www.example.org.", A, "forward"},
		{"web.service.consul.", A, "forward"},
	}
	for _, tt := range tests {
		if got := answerOf(s, tt.name, tt.qtype); got != tt.want {
			t.Errorf("%s %s:\n got %s\nwant %s", tt.name, dns.TypeToString[tt.qtype], got, tt.want)
		}
		// Covers is the fast path's promise: every name Lookup answers is
		// covered.
		if answerOf(s, tt.name, tt.qtype) != "forward" && !s.Covers([]byte(dns.CanonicalName(tt.name))) {
			t.Errorf("%s: answered but not covered", tt.name)
		}
	}
	if _, _, ok := s.Lookup(dns.Question{Name: "nas.lan.", Qtype: A, Qclass: dns.ClassCHAOS}); ok {
		t.Error("class CH answered from local data")
	}
}

// With the rules off, only names with data are local.
func TestLookupRulesOff(t *testing.T) {
	s := testSource(t, func(o *Options) { o.DomainNeeded, o.BogusPriv = false, false })
	for name, want := range map[string]string{
		"foo.":                       "forward",
		"nas.":                       "NOERROR nas. 60 IN A 192.168.1.10",
		"11.1.168.192.in-addr.arpa.": "forward",
	} {
		qtype := dns.TypeA
		if strings.HasSuffix(name, ".arpa.") {
			qtype = dns.TypePTR
		}
		if got := answerOf(s, name, qtype); got != want {
			t.Errorf("%s: got %s, want %s", name, got, want)
		}
	}
	if s.Covers([]byte("foo.")) || s.Covers([]byte("11.1.168.192.in-addr.arpa.")) {
		t.Error("names the rules would answer are covered with the rules off")
	}
}

// Covers runs on the fast path for every packet: no allocation, and false
// for names nothing local answers.
func TestCoversAllocatesNothing(t *testing.T) {
	s := testSource(t, nil)
	names := [][]byte{
		[]byte("nas.lan."), []byte("x.blocked.test."), []byte("foo."), []byte("www.example.org."),
		[]byte("11.1.168.192.in-addr.arpa."), []byte("8.8.8.8.in-addr.arpa."),
		[]byte("1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.e.f.ip6.arpa."),
	}
	if n := testing.AllocsPerRun(100, func() {
		for _, name := range names {
			s.Covers(name)
		}
	}); n != 0 {
		t.Errorf("Covers allocates %v times per run", n)
	}
	for _, name := range []string{"www.example.org.", "8.8.8.8.in-addr.arpa.", "web.service.consul.", "org."} {
		if name != "org." && s.Covers([]byte(name)) {
			t.Errorf("%s is covered", name)
		}
	}
}

// Poll reloads a changed hosts file, one that appears and one that goes
// away, and nothing when nothing changed; no sleeps: modification times are
// set explicitly.
func TestPollReloadsChangedFiles(t *testing.T) {
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	extra := filepath.Join(dir, "hosts.d")
	if err := os.Mkdir(extra, 0o755); err != nil {
		t.Fatal(err)
	}
	writeHosts(t, hosts, "192.0.2.10 one.lan\n", time.Unix(1e9, 0))
	s, err := New(Options{HostsFiles: []string{hosts, extra}})
	if err != nil {
		t.Fatal(err)
	}
	check := func(name, want string) {
		t.Helper()
		if got := answerOf(s, name, dns.TypeA); got != want {
			t.Errorf("%s: got %s, want %s", name, got, want)
		}
	}
	check("one.lan.", "NOERROR one.lan. 0 IN A 192.0.2.10")
	if s.Poll() {
		t.Error("Poll reloaded unchanged files")
	}

	writeHosts(t, hosts, "192.0.2.11 one.lan\n", time.Unix(1e9+1, 0)) // same size, new time
	if !s.Poll() {
		t.Fatal("Poll missed a changed file")
	}
	check("one.lan.", "NOERROR one.lan. 0 IN A 192.0.2.11")

	writeHosts(t, filepath.Join(extra, "b"), "192.0.2.12 two.lan\n", time.Unix(1e9, 0))
	if !s.Poll() {
		t.Fatal("Poll missed a file added to a hosts directory")
	}
	check("two.lan.", "NOERROR two.lan. 0 IN A 192.0.2.12")

	if err := os.Remove(hosts); err != nil {
		t.Fatal(err)
	}
	if !s.Poll() {
		t.Fatal("Poll missed a removed file")
	}
	check("one.lan.", "forward")
	check("two.lan.", "NOERROR two.lan. 0 IN A 192.0.2.12")
	if s.Poll() {
		t.Error("Poll reloaded after nothing changed")
	}

	// Reload re-reads even when the stamps match (SIGHUP).
	writeHosts(t, filepath.Join(extra, "b"), "192.0.2.13 two.lan\n", time.Unix(1e9, 0))
	s.Reload()
	check("two.lan.", "NOERROR two.lan. 0 IN A 192.0.2.13")
}

func TestNewRejects(t *testing.T) {
	for name, o := range map[string]Options{
		"negative ttl":  {TTL: -time.Second},
		"empty address": {Addresses: []Address{{Domain: "x.test"}}},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// address=/#/IP: every name's A, except names with data and zones with
// servers of their own.
func TestLookupCatchAllAddress(t *testing.T) {
	s := testSource(t, func(o *Options) {
		o.Addresses = []Address{{".", []netip.Addr{netip.MustParseAddr("192.0.2.9")}}}
		o.Domains = nil
	})
	for _, tt := range []struct {
		name  string
		qtype uint16
		want  string
	}{
		{"www.example.org.", dns.TypeA, "NOERROR www.example.org. 60 IN A 192.0.2.9"},
		{"www.example.org.", dns.TypeAAAA, "forward"},
		{"nas.lan.", dns.TypeA, "NOERROR nas.lan. 60 IN A 192.168.1.10"},
		{"x.corp.test.", dns.TypeA, "forward"},
		{"web.service.consul.", dns.TypeA, "forward"},
		{".", dns.TypeA, "NOERROR . 60 IN A 192.0.2.9"},
	} {
		if got := answerOf(s, tt.name, tt.qtype); got != tt.want {
			t.Errorf("%s %s: got %s, want %s", tt.name, dns.TypeToString[tt.qtype], got, tt.want)
		}
		if !s.Covers([]byte(tt.name)) {
			t.Errorf("%s not covered", tt.name)
		}
	}
}
