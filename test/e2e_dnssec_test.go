package test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// DNSSEC validation against real servers (issue 39): zones signed with
// ldns-signzone (NSEC, NSEC3, one with expired signatures, one altered
// after signing, one with NSEC3 iterations past RFC 9276's limit) served
// by unbound's auth-zone, and unbound 1.17 validating with the same
// anchors as the reference.

// dnssecZone is one test zone: its records, and how ldns-signzone signs
// it ("" = unsigned).
type dnssecZone struct {
	name    string
	records []string
	sign    []string // ldns-signzone options
	// alter rewrites the signed zone file (a record changed after
	// signing).
	alter func(string) string
}

var dnssecZones = []dnssecZone{
	{name: "signed.test.", sign: []string{}, records: []string{
		"www A 192.0.2.1", "altered A 192.0.2.2", "*.wild A 192.0.2.3", "alias CNAME www",
	}, alter: func(z string) string {
		return regexp.MustCompile(`(?m)^(altered\.signed\.test\.\s+\d+\s+IN\s+A\s+)192\.0\.2\.2$`).ReplaceAllString(z, "${1}192.0.2.99")
	}},
	{name: "nsec3.test.", sign: []string{"-n", "-t", "0"}, records: []string{"www A 192.0.2.10"}},
	{name: "expired.test.", sign: []string{"-i", "20200101000000", "-e", "20200201000000"}, records: []string{"www A 192.0.2.20"}},
	{name: "iter.test.", sign: []string{"-n", "-t", "500"}, records: []string{"www A 192.0.2.30"}},
	{name: "plain.test.", records: []string{"www A 192.0.2.50"}},
}

// signZones writes and signs the zones into dir and returns the trust
// anchor file (every signed zone's KSK as DS).
func signZones(t *testing.T, dir string) string {
	t.Helper()
	var anchors []string
	for _, z := range dnssecZones {
		file := filepath.Join(dir, z.name+"zone")
		body := fmt.Sprintf("$ORIGIN %s\n$TTL 300\n@ SOA ns.%s host.%s 1 3600 600 86400 300\n@ NS ns.%s\nns A 127.0.0.1\n%s\n",
			z.name, z.name, z.name, z.name, strings.Join(z.records, "\n"))
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if z.sign == nil {
			continue
		}
		run := func(args ...string) string {
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Dir = dir
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v", strings.Join(args, " "), err)
			}
			return strings.TrimSpace(string(out))
		}
		ksk := run("ldns-keygen", "-a", "ECDSAP256SHA256", "-k", z.name)
		zsk := run("ldns-keygen", "-a", "ECDSAP256SHA256", z.name)
		run(append(append([]string{"ldns-signzone", "-o", z.name}, z.sign...), file, zsk, ksk)...)
		if z.alter != nil {
			signed, err := os.ReadFile(file + ".signed")
			if err != nil {
				t.Fatal(err)
			}
			altered := z.alter(string(signed))
			if altered == string(signed) {
				t.Fatalf("%s: the alteration changed nothing", z.name)
			}
			if err := os.WriteFile(file+".signed", []byte(altered), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ds, err := os.ReadFile(filepath.Join(dir, ksk+".ds"))
		if err != nil {
			t.Fatal(err)
		}
		anchors = append(anchors, strings.TrimSpace(string(ds)))
	}
	path := filepath.Join(dir, "anchors.ds")
	if err := os.WriteFile(path, []byte(strings.Join(anchors, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startUnbound runs unbound in the foreground on a free port of 127.0.0.1
// with conf's server options (and the rest of conf after them), and waits
// for its start of service.
func startUnbound(t *testing.T, dir, name, conf string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1@%d", freePort(t))
	path := filepath.Join(dir, name+".conf")
	body := fmt.Sprintf(`server:
  interface: %s
  do-daemonize: no
  username: ""
  chroot: ""
  directory: %q
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 1
  num-threads: 1
  access-control: 127.0.0.0/8 allow
  do-not-query-localhost: no
  local-zone: "test." nodefault
%s`, addr, dir, conf)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, exec.Command("unbound", "-d", "-c", path))
	t.Cleanup(func() {
		if p.running() {
			p.signal(t, syscall.SIGTERM)
			p.waitExit(t, stopTimeout)
		}
	})
	if _, err := p.stderr.waitFor(regexp.MustCompile(`start of service`), readyTimeout, p.exited); err != nil {
		t.Fatalf("unbound %s did not start: %v\n%s", name, err, p.stderr)
	}
	return strings.Replace(addr, "@", ":", 1)
}

// startStripProxy relays to server over UDP and TCP and drops every RRSIG
// from the replies: a path that strips signatures.
func startStripProxy(t *testing.T, server string) string {
	t.Helper()
	pc, l := listenSamePort(t)
	h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		network := "udp"
		if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
			network = "tcp"
		}
		c := &dns.Client{Net: network, Timeout: 2 * time.Second, UDPSize: 4096}
		r, _, err := c.Exchange(q, server)
		if err != nil {
			return
		}
		for _, sec := range []*[]dns.RR{&r.Answer, &r.Ns, &r.Extra} {
			kept := (*sec)[:0]
			for _, rr := range *sec {
				if rr.Header().Rrtype != dns.TypeRRSIG {
					kept = append(kept, rr)
				}
			}
			*sec = kept
		}
		_ = w.WriteMsg(r)
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}} {
		go func() { _ = srv.ActivateAndServe() }()
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return pc.LocalAddr().String()
}

// dnssecQuery asks name with DO (the way a validating stub asks), or
// without EDNS when plain.
func dnssecQuery(name string, qtype uint16, do bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(1232, do)
	return m
}

// edeCode is the reply's Extended DNS Error code, -1 for none.
func edeCode(m *dns.Msg) int {
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				return int(e.InfoCode)
			}
		}
	}
	return -1
}

func hasRRSIG(m *dns.Msg) bool {
	for _, rr := range append(append([]dns.RR(nil), m.Answer...), m.Ns...) {
		if rr.Header().Rrtype == dns.TypeRRSIG {
			return true
		}
	}
	return false
}

func towerdDNSSECConfig(t *testing.T, mode, anchors, root, consul string) string {
	return writeConfig(t, fmt.Sprintf(`
[[zone]]
name = "."
servers = [%q]
[[zone]]
name = "consul."
servers = [%q]
[dnssec]
mode = %q
trust_anchor_file = %q
`, root, consul, mode, anchors))
}

func TestDNSSECAgainstUnbound(t *testing.T) {
	for _, tool := range []string{"unbound", "ldns-signzone", "ldns-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (test/install-deps.sh installs it): %v", tool, err)
		}
	}
	t.Parallel()
	dir := t.TempDir()
	anchors := signZones(t, dir)
	var authZones strings.Builder
	for _, z := range dnssecZones {
		file := z.name + "zone"
		if z.sign != nil {
			file += ".signed"
		}
		fmt.Fprintf(&authZones, "auth-zone:\n  name: %q\n  zonefile: %q\n  for-downstream: yes\n  for-upstream: no\n", z.name, file)
	}
	auth := startUnbound(t, dir, "auth", `  module-config: "iterator"
`+authZones.String())
	ref := startUnbound(t, dir, "validator", fmt.Sprintf(`  module-config: "validator iterator"
  ede: yes
  trust-anchor-file: %q
forward-zone:
  name: "test."
  forward-addr: %s
`, anchors, strings.Replace(auth, ":", "@", 1)))
	consul := newTestUpstream(t)
	consul.Add(t, "web.service.consul. 0 IN A 10.0.0.7")

	enforce := startTowerd(t, "-config", towerdDNSSECConfig(t, "enforce", anchors, auth, consul.Addr), "-listen", "127.0.0.1:0")

	type want struct {
		rcode int
		ad    bool
	}
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  want
		// ede is towerd's Extended DNS Error on SERVFAIL: unbound's,
		// except for expired signatures, where unbound 1.17 says 9
		// (DNSKEY Missing: the key set's signatures expired) and towerd
		// the more exact 7 (Signature Expired).
		ede int
	}{
		{"www.signed.test.", dns.TypeA, want{dns.RcodeSuccess, true}, 0},
		{"www.signed.test.", dns.TypeTXT, want{dns.RcodeSuccess, true}, 0},          // NODATA, NSEC
		{"nx.signed.test.", dns.TypeA, want{dns.RcodeNameError, true}, 0},           // NXDOMAIN, NSEC
		{"x.wild.signed.test.", dns.TypeA, want{dns.RcodeSuccess, true}, 0},         // wildcard
		{"alias.signed.test.", dns.TypeA, want{dns.RcodeSuccess, true}, 0},          // CNAME
		{"www.nsec3.test.", dns.TypeA, want{dns.RcodeSuccess, true}, 0},             //
		{"www.nsec3.test.", dns.TypeTXT, want{dns.RcodeSuccess, true}, 0},           // NODATA, NSEC3
		{"nx.nsec3.test.", dns.TypeA, want{dns.RcodeNameError, true}, 0},            // NXDOMAIN, NSEC3
		{"nx.iter.test.", dns.TypeA, want{dns.RcodeNameError, false}, 0},            // 500 iterations: insecure
		{"www.plain.test.", dns.TypeA, want{dns.RcodeSuccess, false}, 0},            // no anchor
		{"altered.signed.test.", dns.TypeA, want{dns.RcodeServerFailure, false}, 6}, // bogus
		{"www.expired.test.", dns.TypeA, want{dns.RcodeServerFailure, false}, 7},    // expired
	} {
		label := fmt.Sprintf("%s %s", tc.name, dns.TypeToString[tc.qtype])
		r := mustExchange(t, ref, "udp", dnssecQuery(tc.name, tc.qtype, true))
		if got := (want{r.Rcode, r.AuthenticatedData}); got != tc.want {
			t.Errorf("%s: unbound answers %s AD=%v, the test wants %s AD=%v", label,
				dns.RcodeToString[got.rcode], got.ad, dns.RcodeToString[tc.want.rcode], tc.want.ad)
		}
		for round := range 2 { // the second from the cache, or asked again (SERVFAIL)
			m := mustExchange(t, enforce.UDP, "udp", dnssecQuery(tc.name, tc.qtype, true))
			if got := (want{m.Rcode, m.AuthenticatedData}); got != tc.want {
				t.Errorf("%s round %d: towerd answers %s AD=%v, unbound %s AD=%v", label, round,
					dns.RcodeToString[got.rcode], got.ad, dns.RcodeToString[r.Rcode], r.AuthenticatedData)
			}
			if tc.ede != 0 {
				if edeCode(m) != tc.ede {
					t.Errorf("%s round %d: towerd's EDE %d, want %d (unbound's %d)", label, round, edeCode(m), tc.ede, edeCode(r))
				}
				continue
			}
			if tc.want.rcode != dns.RcodeServerFailure && len(m.Answer)+len(m.Ns) != len(r.Answer)+len(r.Ns) {
				t.Errorf("%s round %d: towerd gives %d+%d records, unbound %d+%d", label, round,
					len(m.Answer), len(m.Ns), len(r.Answer), len(r.Ns))
			}
		}
		// Over TCP (ServeDNS's route) the same answer.
		if m := mustExchange(t, enforce.TCP, "tcp", dnssecQuery(tc.name, tc.qtype, true)); m.Rcode != tc.want.rcode ||
			m.AuthenticatedData != tc.want.ad || (tc.ede != 0 && edeCode(m) != tc.ede) {
			t.Errorf("%s over TCP: %s AD=%v EDE %d, want %s AD=%v EDE %d", label, dns.RcodeToString[m.Rcode],
				m.AuthenticatedData, edeCode(m), dns.RcodeToString[tc.want.rcode], tc.want.ad, tc.ede)
		}
		// A client without DO or AD gets neither AD nor signatures; one
		// with CD gets the data unchecked.
		plain := mustExchange(t, enforce.UDP, "udp", query(tc.name, tc.qtype, false))
		if plain.AuthenticatedData || hasRRSIG(plain) {
			t.Errorf("%s without DO: AD=%v, signatures %v", label, plain.AuthenticatedData, hasRRSIG(plain))
		}
		// One that asks with AD alone (glibc's trust-ad) gets AD, and no
		// signatures (RFC 6840 §5.7).
		adq := query(tc.name, tc.qtype, false)
		adq.AuthenticatedData = true
		if m := mustExchange(t, enforce.UDP, "udp", adq); m.AuthenticatedData != tc.want.ad || hasRRSIG(m) {
			t.Errorf("%s with AD, without DO: AD=%v, signatures %v; want AD=%v and none", label, m.AuthenticatedData, hasRRSIG(m), tc.want.ad)
		}
		cd := dnssecQuery(tc.name, tc.qtype, true)
		cd.CheckingDisabled = true
		if m := mustExchange(t, enforce.UDP, "udp", cd); m.Rcode == dns.RcodeServerFailure {
			t.Errorf("%s with CD: SERVFAIL, want the data unchecked", label)
		}
	}

	// A path that strips signatures: enforce refuses the signed zone's
	// answers, audit answers them and counts them bogus; unsigned names
	// and the Consul zone are answered by both.
	strip := startStripProxy(t, auth)
	stripEnforce := startTowerd(t, "-config", towerdDNSSECConfig(t, "enforce", anchors, strip, consul.Addr), "-listen", "127.0.0.1:0")
	stripAudit := startTowerd(t, "-config", towerdDNSSECConfig(t, "audit", anchors, strip, consul.Addr), "-listen", "127.0.0.1:0")
	off := startTowerd(t, "-config", towerdDNSSECConfig(t, "off", anchors, strip, consul.Addr), "-listen", "127.0.0.1:0")
	for _, name := range []string{"www.signed.test.", "nx.signed.test."} {
		m := mustExchange(t, stripEnforce.UDP, "udp", dnssecQuery(name, dns.TypeA, true))
		if m.Rcode != dns.RcodeServerFailure || edeCode(m) < int(dns.ExtendedErrorCodeDNSBogus) || edeCode(m) > int(dns.ExtendedErrorCodeNSECMissing) {
			t.Errorf("stripped %s in enforce: %s EDE %d, want SERVFAIL with a DNSSEC EDE", name, dns.RcodeToString[m.Rcode], edeCode(m))
		}
		m = mustExchange(t, stripAudit.UDP, "udp", dnssecQuery(name, dns.TypeA, true))
		if m.Rcode == dns.RcodeServerFailure || m.AuthenticatedData {
			t.Errorf("stripped %s in audit: %s AD=%v, want the answer as it came", name, dns.RcodeToString[m.Rcode], m.AuthenticatedData)
		}
	}
	if _, mfs := scrape(t, stripAudit.Admin); sample(mfs, "towerd_dnssec_verdicts_total", map[string]string{"verdict": "bogus"}) < 2 {
		t.Errorf("audit counted %v bogus verdicts, want 2", sample(mfs, "towerd_dnssec_verdicts_total", map[string]string{"verdict": "bogus"}))
	}
	// Logged before the answer is written, but through towerd's log
	// buffer and a pipe: the line may come after the answer.
	if _, err := stripAudit.stderr.waitFor(regexp.MustCompile(`DNSSEC bogus answer`), readyTimeout, stripAudit.exited); err != nil {
		t.Errorf("audit logged no bogus answer: %v", err)
	}
	for _, d := range []*towerd{enforce, stripEnforce, stripAudit, off} {
		for _, do := range []bool{false, true} {
			m := mustExchange(t, d.UDP, "udp", dnssecQuery("www.plain.test.", dns.TypeA, do))
			if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || m.AuthenticatedData {
				t.Errorf("www.plain.test. (DO %v): %s, %d records, AD=%v, want the unsigned answer without AD", do, dns.RcodeToString[m.Rcode], len(m.Answer), m.AuthenticatedData)
			}
			m = mustExchange(t, d.UDP, "udp", dnssecQuery("web.service.consul.", dns.TypeA, do))
			if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || m.AuthenticatedData {
				t.Errorf("web.service.consul. (DO %v): %s, %d records, AD=%v, want the agent's answer", do, dns.RcodeToString[m.Rcode], len(m.Answer), m.AuthenticatedData)
			}
		}
	}
}
