package test

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/consultest"
	"github.com/towerd/towerd/test/dnstest"
	"github.com/towerd/towerd/test/faultproxy"
)

// Helpers of the tests against a real Consul agent (test/consultest).

// firstSyncLine is the watch's log line once every service was read once.
var firstSyncLine = regexp.MustCompile(`msg="consul watch: first sync done"`)

// followTimeout is the bound on how fast towerd follows a catalog
// change.
const followTimeout = time.Second

// startConsulDNSProxy puts the fault proxy in front of a Consul agent's DNS
// at target, counting the queries it reads per name (Count): the jittery,
// lossy Consul DNS towerd is built to outlive, and the witness of which
// names reached it. The seed is logged, so a failure can be replayed.
func startConsulDNSProxy(t *testing.T, target string, faults faultproxy.Faults, seed uint64) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(faultproxy.Options{Target: target, Faults: faults, Seed: seed, CountNames: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	t.Logf("fault proxy %s → %s, seed %d, faults %+v", p.Addr(), target, seed, faults)
	return p
}

// startConsulTowerd starts towerd watching agent, with "." at a test
// upstream and "consul." at consulDNS, and waits for the watch's first sync.
func startConsulTowerd(t *testing.T, agent *consultest.Agent, consulDNS string, extra ...string) *towerd {
	t.Helper()
	def := newTestUpstream(t)
	args := append([]string{"-listen", "127.0.0.1:0", "-upstream", def.Addr, "-consul-dns", consulDNS,
		"-consul-http", agent.HTTPAddr}, extra...)
	if !slices.Contains(args, "-config") {
		args = append([]string{"-config", ""}, args...)
	}
	d := startTowerd(t, args...)
	waitLog(t, d, firstSyncLine, 30*time.Second)
	return d
}

// pins is a consul.services line pinning services: watched from the start,
// so the first question is answered from memory too (without it a service
// is watched after its first question, answered by Consul's DNS).
func pins(services ...string) string {
	quoted := make([]string, len(services))
	for i, s := range services {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	return "services = [" + strings.Join(quoted, ", ") + "]\n"
}

// waitLog waits for a line of towerd's log.
func waitLog(t *testing.T, d *towerd, re *regexp.Regexp, timeout time.Duration) {
	t.Helper()
	if _, err := d.stderr.waitFor(re, timeout, d.exited); err != nil {
		t.Fatalf("towerd: %v\n%s", err, lastLines(d.stderr.String(), 80))
	}
}

// deadPort returns a loopback address nothing listens on: a query there
// fails at once (ICMP port unreachable), so any fallback to Consul's DNS
// shows up as SERVFAIL.
func deadPort(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(freePort(t)))
}

// register adds a service instance through the agent and waits until the
// catalog holds it, so towerd and the agent's DNS see the same catalog.
func register(t *testing.T, c *api.Client, reg *api.AgentServiceRegistration) {
	t.Helper()
	if err := c.Agent().ServiceRegister(reg); err != nil {
		t.Fatalf("registering %s: %v", reg.ID, err)
	}
	waitCatalog(t, c, reg.Name, func(entries []*api.CatalogService) bool {
		return slices.ContainsFunc(entries, func(e *api.CatalogService) bool { return e.ServiceID == reg.ID })
	})
}

// waitCatalog waits until ok holds for service in the real agent's
// catalog.
func waitCatalog(t *testing.T, c *api.Client, service string, ok func([]*api.CatalogService) bool) {
	t.Helper()
	dnstest.Eventually(t, func() bool {
		entries, _, err := c.Catalog().Service(service, "", nil)
		return err == nil && ok(entries)
	}, 10*time.Second, "the catalog of "+service)
}

// servicesIndex is the X-Consul-Index of the agent's service list.
func servicesIndex(t *testing.T, c *api.Client) uint64 {
	t.Helper()
	_, meta, err := c.Catalog().Services(nil)
	if err != nil {
		t.Fatal(err)
	}
	return meta.LastIndex
}

// ask sends one EDNS query over UDP (5 s timeout).
func ask(addr, name string, qtype uint16) (*dns.Msg, error) {
	return exchange(addr, "udp", query(name, qtype, true))
}

// recordSet is a reply reduced to what "the same answer" means: the rcode
// and the sorted records of each section, TTLs included, OPT left out, and
// the SOA serial (a clock reading) zeroed.
type recordSet struct {
	Rcode                    string
	Answer, Authority, Extra []string
}

func recordsOf(m *dns.Msg) recordSet {
	section := func(rrs []dns.RR) []string {
		var out []string
		for _, rr := range rrs {
			switch v := rr.(type) {
			case *dns.OPT:
				continue
			case *dns.SOA:
				c := *v
				c.Serial = 0
				rr = &c
			}
			out = append(out, strings.ReplaceAll(rr.String(), "\t", " "))
		}
		sort.Strings(out)
		return out
	}
	return recordSet{Rcode: dns.RcodeToString[m.Rcode], Answer: section(m.Answer),
		Authority: section(m.Ns), Extra: section(m.Extra)}
}

func (r recordSet) String() string {
	return fmt.Sprintf("%s\n  answer: %s\n  authority: %s\n  additional: %s", r.Rcode,
		strings.Join(r.Answer, "\n          "), strings.Join(r.Authority, "\n             "),
		strings.Join(r.Extra, "\n              "))
}

// folded is r with every letter in lower case: the comparison of an
// answer spelled for a question in another letter case (towerd spells
// the names DNS compression points into the question as the client did,
// the rest as the agent wrote them for its own lower-case question:
// docs/consul.md), to the agent's answer to that question.
func (r recordSet) folded() recordSet {
	fold := func(s []string) []string {
		out := make([]string, len(s))
		for i, x := range s {
			out[i] = strings.ToLower(x)
		}
		sort.Strings(out)
		return out
	}
	return recordSet{Rcode: r.Rcode, Answer: fold(r.Answer), Authority: fold(r.Authority), Extra: fold(r.Extra)}
}

// ownersAre reports whether every answer record of m is owned by name,
// spelled exactly so.
func ownersAre(m *dns.Msg, name string) bool {
	for _, rr := range m.Answer {
		if rr.Header().Name != name {
			return false
		}
	}
	return true
}

func (r recordSet) equal(o recordSet) bool {
	return r.Rcode == o.Rcode && slices.Equal(r.Answer, o.Answer) &&
		slices.Equal(r.Authority, o.Authority) && slices.Equal(r.Extra, o.Extra)
}

// sortedAddresses returns the A/AAAA addresses of an answer, sorted.
func sortedAddresses(m *dns.Msg) []string {
	a := addresses(m.Answer)
	sort.Strings(a)
	return a
}

// follow polls towerd (10 ms apart, bounded by followTimeout) until want
// holds for the reply to name/qtype, and returns how long that took.
func follow(t *testing.T, d *towerd, name string, qtype uint16, what string, want func(*dns.Msg) bool) time.Duration {
	t.Helper()
	start := time.Now()
	var last *dns.Msg
	defer func() {
		if t.Failed() {
			t.Logf("%s: last reply:\n%v", what, last)
		}
	}()
	dnstest.Eventually(t, func() bool {
		m, err := ask(d.UDP, name, qtype)
		if err == nil {
			last = m
		}
		return err == nil && want(m)
	}, followTimeout, what+": towerd following the catalog")
	took := time.Since(start)
	t.Logf("%s: followed in %v", what, took.Round(time.Millisecond))
	return took
}
