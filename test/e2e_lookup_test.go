package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/consultest"
	"github.com/towerd/towerd/test/dnstest"
)

// Exit statuses of `towerd lookup` beyond the control commands' (issue 25).
const (
	exitNXDOMAIN     = 5
	exitLookupFailed = 6
)

// lookupCase is one `towerd lookup` and what it must print and exit with.
type lookupCase struct {
	args []string
	exit int
	want []string // lines or parts of lines of the output
	not  []string // what must not appear
}

// runLookups runs each case against the towerd at sock.
func runLookups(t *testing.T, sock string, cases []lookupCase) {
	t.Helper()
	for _, tc := range cases {
		out, _ := cli(t, tc.exit, append(append([]string{"lookup"}, tc.args...), "-control", sock)...)
		mustContain(t, "towerd lookup "+strings.Join(tc.args, " "), out, tc.want...)
		for _, n := range tc.not {
			if strings.Contains(out, n) {
				t.Errorf("towerd lookup %s prints %q:\n%s", strings.Join(tc.args, " "), n, out)
			}
		}
	}
}

// towerd lookup names what answered, as the resolver observed it (issue
// 25: hosts names, dotless names and private reverse names were said to
// be covered by the watch and answered "from towerd itself (refused or
// malformed)", and every rcode exited 0): each rule of local data, an
// upstream with its zone and server, the cache and where its entry came
// from, a stale entry while the upstream is black-holed, and the two kinds
// of SERVFAIL; NXDOMAIN exits 5, a failed lookup 6.
func TestLookupNamesTheSource(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("192.168.1.10 nas.lan nas\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, `[local]
hosts_files = ["`+hosts+`"]
records = ["static.lan. A 192.168.1.20"]
domains = ["lan"]
[[local.address]]
name = "blocked.test"
addresses = ["192.0.2.1"]
`)
	s := startStack(t, "-config", cfg)
	s.def.Add(t, "www.example. 300 IN A 192.0.2.10", "stale.example. 0 IN A 192.0.2.30", "fail.example. 300 IN A 192.0.2.31")
	s.def.SetFault("fail.example.", dnstest.Fault{Rcode: dns.RcodeServerFailure})
	up := "upstream " + s.def.Addr + " (zone .)"
	local := "local data: "

	runLookups(t, s.d.Control, []lookupCase{
		{[]string{"nas.lan"}, 0, []string{"NOERROR from " + local + "the hosts file " + hosts, "192.168.1.10"}, []string{"watch", "upstream " + s.def.Addr}},
		{[]string{"10.1.168.192.in-addr.arpa", "PTR"}, 0, []string{"NOERROR from " + local + "the hosts file " + hosts, "PTR\tnas.lan."}, nil},
		{[]string{"static.lan"}, 0, []string{"NOERROR from " + local + "a static record ([local] records)"}, nil},
		{[]string{"nas.lan", "MX"}, 0, []string{"NOERROR from " + local + "the local domain lan. ([local] domains"}, nil},
		{[]string{"other.lan"}, exitNXDOMAIN, []string{"NXDOMAIN from " + local + "the local domain lan."}, nil},
		{[]string{"x.blocked.test"}, 0, []string{"NOERROR from " + local + "the address domain blocked.test. ([[local.address]])", "192.0.2.1"}, nil},
		{[]string{"foo"}, exitNXDOMAIN, []string{"NXDOMAIN from " + local + "domain_needed (a name without a dot is never sent upstream)"}, []string{"watch"}},
		{[]string{"11.1.168.192.in-addr.arpa", "PTR"}, exitNXDOMAIN,
			[]string{"NXDOMAIN from " + local + "bogus_priv (the reverse name of a private address is never sent upstream)"}, []string{"watch"}},
		{[]string{"www.example.", "AXFR"}, exitLookupFailed, []string{"REFUSED from towerd itself: the request checks"}, nil},
		{[]string{"www.example."}, 0, []string{"nothing cached for this type", "NOERROR from " + up, "192.0.2.10"}, []string{"watch"}},
		{[]string{"www.example."}, 0, []string{"cache     fresh, positive", "NOERROR from the cache (fresh), an entry stored from upstream zone ."}, nil},
		{[]string{"nothing.example."}, exitNXDOMAIN, []string{"NXDOMAIN from " + up}, nil},
		{[]string{"fail.example."}, exitLookupFailed, []string{"SERVFAIL from towerd: " + up + " failed it (SERVFAIL or REFUSED) and nothing stale was at hand"}, nil},
		// TTL 0: stored already expired, stale material only.
		{[]string{"stale.example."}, 0, []string{"NOERROR from " + up, "192.0.2.30"}, nil},
	})

	// -json exits as the text does and carries the rule.
	out, _ := cli(t, exitNXDOMAIN, "lookup", "foo", "-json", "-control", s.d.Control)
	var rep struct{ Source, Rule, Rcode string }
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Source != "local" || rep.Rule != "domain_needed" || rep.Rcode != "NXDOMAIN" {
		t.Errorf("lookup foo -json: %+v %v\n%s", rep, err, out)
	}

	// The upstream black-holed: the expired entry is served stale, a name
	// never seen gets SERVFAIL after query_timeout.
	s.def.Stop()
	newBlackhole(t, s.def.Addr)
	runLookups(t, s.d.Control, []lookupCase{
		{[]string{"stale.example."}, 0, []string{"cache     stale, positive", "NOERROR from a stale cache entry (the refresh failed or is not due), an entry stored from upstream zone .", "192.0.2.30"}, nil},
		{[]string{"never.example."}, exitLookupFailed, []string{"SERVFAIL from towerd: no server of zone . answered in time (query_timeout)"}, nil},
	})
}

// Against a real Consul agent: a watched service is the watch's answer; a
// node name and a service that does not exist are Consul's DNS's, with the
// watch's reason for passing them on (issue 25: lookup said the watch
// "covers" them), and the missing service exits 5.
func TestLookupConsulSources(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	register(t, agent.Client(""), &api.AgentServiceRegistration{ID: "web1", Name: "web", Address: "127.0.0.10", Port: 8080})
	d := startConsulTowerd(t, agent, agent.DNSAddr, "-config", writeConfig(t, "[consul]\n"+pins("web")))
	consulDNS := "Consul's DNS " + agent.DNSAddr + " (zone consul.)"
	runLookups(t, d.Control, []lookupCase{
		{[]string{"web.service.consul"}, 0, []string{"NOERROR from the Consul watch (pushed records)", "127.0.0.10"}, []string{"passed it"}},
		{[]string{agent.Node + ".node.consul"}, 0, []string{
			"watch     left it to the cache and Consul's DNS: not a service name: nodes, prepared queries and the like are Consul's DNS's",
			"NOERROR from " + consulDNS, "127.0.0.1"}, nil},
		{[]string{"nope.service.consul"}, exitNXDOMAIN, []string{
			"watch     left it to the cache and Consul's DNS: the watch holds no records of the service",
			"NXDOMAIN from " + consulDNS}, nil},
		{[]string{"web.service.consul", "TXT"}, 0, []string{
			"watch     left it to the cache and Consul's DNS: the watch answers A, AAAA and SRV questions only", "from " + consulDNS}, nil},
	})
}

// An entry read back from the state file is named for it, fresh or stale,
// never for an upstream (issue 25 with issue 21's rule).
func TestLookupNamesAStateFileEntry(t *testing.T) {
	t.Parallel()
	up := newTestUpstream(t)
	up.Add(t, "kept.example. 3600 IN A 192.0.2.40", "zero.example. 0 IN A 192.0.2.41")
	stateDir := t.TempDir()
	args := []string{"-config", "", "-listen", "127.0.0.1:0", "-upstream", up.Addr, "-consul-dns", up.Addr, "-state-dir", stateDir}
	first := startTowerd(t, args...)
	runLookups(t, first.Control, []lookupCase{
		{[]string{"kept.example."}, 0, []string{"NOERROR from upstream " + up.Addr + " (zone .)"}, nil},
		{[]string{"zero.example."}, 0, []string{"NOERROR from upstream " + up.Addr + " (zone .)"}, nil},
	})
	first.signal(t, syscall.SIGTERM)
	if code := first.waitExit(t, stopTimeout); code != 0 {
		t.Fatalf("first towerd exited %d", code)
	}
	up.Stop()
	newBlackhole(t, up.Addr)
	second := startTowerd(t, args...)
	runLookups(t, second.Control, []lookupCase{
		{[]string{"kept.example."}, 0, []string{"NOERROR from the cache (fresh), an entry from the state file read at start (zone .)", "192.0.2.40"}, []string{"stored from upstream"}},
		{[]string{"zero.example."}, 0, []string{"NOERROR from a stale cache entry (the refresh failed or is not due), an entry from the state file read at start (zone .)", "192.0.2.41"}, nil},
	})
}
