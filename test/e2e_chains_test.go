package test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// authServer is a loopback authoritative server (miekg/dns, in-process)
// for the zones it is given: it answers as RFC 1034 section 4.3.2 says,
// following CNAMEs and DNAMEs (with the CNAME each synthesizes, RFC 6672)
// through its own data, copying each into the answer, and stopping at a
// name it has seen in this answer, at a name outside its zones (the
// CNAME is the answer then) or after 100 links.
type authServer struct {
	Addr  string
	zones []string
	data  map[string][]dns.RR // canonical owner → records

	mu      sync.Mutex
	queries map[string]int // canonical question name → queries
}

// count is how many queries for name the server has read.
func (a *authServer) count(name string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.queries[dns.CanonicalName(name)]
}

func startAuthServer(t *testing.T, zones []string, records ...string) *authServer {
	t.Helper()
	a := &authServer{zones: zones, data: map[string][]dns.RR{}, queries: map[string]int{}}
	for _, r := range records {
		rr, err := dns.NewRR(r)
		if err != nil {
			t.Fatalf("record %q: %v", r, err)
		}
		owner := dns.CanonicalName(rr.Header().Name)
		a.data[owner] = append(a.data[owner], rr)
	}
	pc, l := listenSamePort(t)
	a.Addr = pc.LocalAddr().String()
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: a}, {Listener: l, Handler: a}} {
		go func() { _ = srv.ActivateAndServe() }()
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return a
}

func (a *authServer) serves(name string) bool {
	for _, z := range a.zones {
		if dns.IsSubDomain(z, name) {
			return true
		}
	}
	return false
}

// ServeDNS answers one question.
func (a *authServer) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	m.Compress = true
	qt := q.Question[0].Qtype
	name := dns.CanonicalName(q.Question[0].Name)
	a.mu.Lock()
	a.queries[name]++
	a.mu.Unlock()
	seen := map[string]bool{}
	for range 100 {
		if seen[name] || !a.serves(name) {
			break
		}
		seen[name] = true
		if dname, target := a.dnameFor(name); dname != nil {
			m.Answer = append(m.Answer, dname, &dns.CNAME{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeCNAME,
				Class: dns.ClassINET, Ttl: dname.Header().Ttl}, Target: target})
			name = target
			continue
		}
		rrs, ok := a.data[name]
		if !ok {
			if len(m.Answer) == 0 {
				m.Rcode = dns.RcodeNameError
			}
			break
		}
		next := ""
		for _, rr := range rrs {
			switch {
			case rr.Header().Rrtype == qt:
				m.Answer = append(m.Answer, rr)
			case rr.Header().Rrtype == dns.TypeCNAME:
				m.Answer = append(m.Answer, rr)
				next = dns.CanonicalName(rr.(*dns.CNAME).Target)
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	if w.LocalAddr().Network() == "udp" {
		size := dns.MinMsgSize
		if opt := q.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}
		m.Truncate(size) // TC when the answer does not fit: asked again over TCP
	}
	_ = w.WriteMsg(m)
}

// dnameFor finds a DNAME whose owner strictly encloses name and returns it
// with the name it rewrites name to.
func (a *authServer) dnameFor(name string) (dns.RR, string) {
	labels := dns.SplitDomainName(name)
	for i := 1; i < len(labels); i++ {
		owner := dns.Fqdn(strings.Join(labels[i:], "."))
		for _, rr := range a.data[owner] {
			if d, ok := rr.(*dns.DNAME); ok {
				return rr, dns.Fqdn(strings.Join(labels[:i], ".")) + d.Target
			}
		}
	}
	return nil, ""
}

// chain is n CNAMEs from <prefix>0 to <prefix>n, alternating between the
// zones given, and an A record at the end.
func chain(prefix string, n int, zones ...string) []string {
	name := func(i int) string { return fmt.Sprintf("%s%d.%s", prefix, i, zones[i%len(zones)]) }
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s 300 IN CNAME %s", name(i), name(i+1)))
	}
	return append(out, fmt.Sprintf("%s 300 IN A 192.0.2.%d", name(n), n%250))
}

// TestCNAMEChains (issue 23): chains of 9, 20 and 40 CNAMEs inside one
// zone, given whole by the zone's authoritative server, are answered whole
// (unbound 1.17 completes 11, dnsmasq relays them); a chain across two
// zones, each link in the other's server, is chased zone by zone; past
// the limits (64 links, 16 resolutions), and on a CNAME or a DNAME loop,
// the answer is SERVFAIL, not cached, never a cut chain passed off as
// NOERROR.
func TestCNAMEChains(t *testing.T) {
	t.Parallel()
	var one []string
	for _, n := range []int{9, 20, 40, 70} {
		one = append(one, chain(fmt.Sprintf("len%d-", n), n, "chain.test.")...)
	}
	one = append(one,
		"loop-a.chain.test. 300 IN CNAME loop-b.chain.test.",
		"loop-b.chain.test. 300 IN CNAME loop-a.chain.test.",
		"a.dn.chain.test. 300 IN DNAME b.dn.chain.test.",
		"b.dn.chain.test. 300 IN DNAME a.dn.chain.test.",
	)
	cross := append(chain("hop9-", 9, "x.test.", "y.test."), chain("hop20-", 20, "x.test.", "y.test.")...)
	chainServer := startAuthServer(t, []string{"chain.test."}, one...)
	xServer := startAuthServer(t, []string{"x.test."}, cross...)
	yServer := startAuthServer(t, []string{"y.test."}, cross...)
	cfg := writeConfig(t, fmt.Sprintf(`
[[zone]]
name = "."
servers = [%q]
[[zone]]
name = "consul."
servers = [%q]
[[zone]]
name = "chain.test."
servers = [%q]
[[zone]]
name = "x.test."
servers = [%q]
[[zone]]
name = "y.test."
servers = [%q]
`, deadPort(t), deadPort(t), chainServer.Addr, xServer.Addr, yServer.Addr))
	d := startTowerd(t, "-config", cfg, "-listen", "127.0.0.1:0")

	for _, tc := range []struct {
		name  string
		links int // CNAMEs before the A record; -1: SERVFAIL
	}{
		{"len9-0.chain.test.", 9},
		{"len20-0.chain.test.", 20},
		{"len40-0.chain.test.", 40},
		{"hop9-0.x.test.", 9},
		{"len70-0.chain.test.", -1}, // past 64 links
		{"hop20-0.x.test.", -1},     // past 16 resolutions
		{"loop-a.chain.test.", -1},  // a CNAME loop
		{"q.a.dn.chain.test.", -1},  // a DNAME loop
	} {
		for _, network := range []string{"udp", "tcp"} {
			for round := range 2 { // the second from the cache, or asked again
				addr := d.UDP
				if network == "tcp" {
					addr = d.TCP
				}
				before := totalQueries(chainServer, xServer, yServer)
				m := mustExchange(t, addr, network, query(tc.name, dns.TypeA, true))
				label := fmt.Sprintf("%s over %s, round %d", tc.name, network, round)
				if tc.links < 0 {
					if m.Rcode != dns.RcodeServerFailure {
						t.Errorf("%s: %s with %d records, want SERVFAIL", label, dns.RcodeToString[m.Rcode], len(m.Answer))
					}
					// The first question costs the chain's resolutions, at
					// most 16 (the amplification docs/security.md names);
					// the failure is then remembered (RFC 9520, 5 s): the
					// same question again costs no upstream query at all.
					asked := totalQueries(chainServer, xServer, yServer) - before
					first := network == "udp" && round == 0
					switch {
					case first && (asked == 0 || asked > maxChaseSteps):
						t.Errorf("%s: %d upstream queries, want 1 to %d", label, asked, maxChaseSteps)
					case !first && asked != 0:
						t.Errorf("%s: %d more upstream queries for a failure remembered for 5 s, want 0", label, asked)
					}
					if first {
						t.Logf("%s: %d upstream queries for one client query", tc.name, asked)
					}
					continue
				}
				if m.Truncated && network == "udp" {
					continue // the whole chain does not fit; TCP is asked below
				}
				cnames, addrs := 0, 0
				for _, rr := range m.Answer {
					switch rr.(type) {
					case *dns.CNAME:
						cnames++
					case *dns.A:
						addrs++
					}
				}
				if m.Rcode != dns.RcodeSuccess || cnames != tc.links || addrs != 1 {
					t.Errorf("%s: %s with %d CNAMEs and %d addresses, want NOERROR with %d and 1",
						label, dns.RcodeToString[m.Rcode], cnames, addrs, tc.links)
				}
			}
		}
	}
	// Each failure counted once, as reason "chain", where the chain broke:
	// the three broken within a reply by the upstream's scrubber, the one
	// past the 16 resolutions by the chase.
	if n := metricSum(t, d, `towerd_upstream_errors_total{reason="chain",`); n != 4 {
		t.Errorf(`towerd_upstream_errors_total{reason="chain"} = %v, want 4 (one per failed question)`, n)
	}
}

// maxChaseSteps is the resolutions one question's chain may take across
// zones (resolver.maxChaseSteps).
const maxChaseSteps = 16

// totalQueries is how many queries the servers have read, every name.
func totalQueries(servers ...*authServer) int {
	n := 0
	for _, s := range servers {
		s.mu.Lock()
		for _, c := range s.queries {
			n += c
		}
		s.mu.Unlock()
	}
	return n
}

// metricSum is the sum of the /metrics series whose text starts with
// prefix (a name and its first labels).
func metricSum(t *testing.T, d *towerd, prefix string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + d.Admin + "/metrics")
	if err != nil {
		t.Fatalf("reading /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && strings.HasPrefix(k, prefix) {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			sum += f
		}
	}
	return sum
}
