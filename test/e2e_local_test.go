package test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/miekg/dns"
)

// localHosts is the hosts file both resolvers read (never the machine's
// /etc/hosts: no-hosts), and localHostsDir a directory of more.
const localHosts = `# hosts file of the local-answers test
192.168.1.10 nas.lan nas   # aliases and a trailing comment
10.0.0.5	printer.lan printer
fd00::10 nas.lan
192.0.2.50 www.example.com alias.example.com
192.0.2.51 www.example.com
10.7.7.7 inside.corp.test
10.1.2.3 host.rev.test
`

// localDnsmasqConf is a node's dnsmasq with every local-answer directive
// issue 15 names: address=, local=, addn-hosts (a file and a directory),
// no-hosts, domain-needed, bogus-priv, rev-server, local-ttl, and static
// records.
func localDnsmasqConf(t *testing.T, port int, def, corp, rev *testUpstream) string {
	t.Helper()
	dir := t.TempDir()
	// dnsmasq drops root for its own user before it reads hosts files.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hostsDir := filepath.Join(dir, "hosts.d")
	if err := os.Mkdir(hostsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"hosts":         localHosts,
		"hosts.d/10-dc": "10.2.2.2 dir.lan\n",
		"dnsmasq.conf": fmt.Sprintf(`port=%d
listen-address=127.0.0.1
bind-interfaces
no-resolv
no-hosts
addn-hosts=%s
addn-hosts=%s
server=%s
server=/corp.test/%s
rev-server=10.1.0.0/16,%s
domain-needed
bogus-priv
local-ttl=60
address=/blocked.test/192.0.2.1
address=/v6.test/2001:db8::1
address=/both.test/192.0.2.2
address=/both.test/2001:db8::2
address=/nx.test/
address=/ads.test/#
local=/lan/
host-record=static.lan,192.168.1.20
cname=www.lan,nas.lan
txt-record=txt.lan,"hello world"
srv-host=_ipp._tcp.lan,printer.lan,631
`, port, filepath.Join(dir, "hosts"), hostsDir, dnsmasqAddr(def.Addr), dnsmasqAddr(corp.Addr), dnsmasqAddr(rev.Addr)),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "dnsmasq.conf")
}

// localQuestions: every rule, answered locally and forwarded (names an
// upstream answers with records of its own, so a forwarded question shows).
var localQuestions = []struct {
	name  string
	qtype uint16
}{
	{"nas.lan.", dns.TypeA}, {"NAS.Lan.", dns.TypeA}, {"nas.lan.", dns.TypeAAAA}, {"nas.lan.", dns.TypeMX},
	{"printer.lan.", dns.TypeAAAA}, {"other.lan.", dns.TypeA}, {"lan.", dns.TypeA}, {"x.nas.lan.", dns.TypeA},
	{"dir.lan.", dns.TypeA}, {"static.lan.", dns.TypeA}, {"www.lan.", dns.TypeA}, {"txt.lan.", dns.TypeTXT},
	{"_ipp._tcp.lan.", dns.TypeSRV},
	{"nas.", dns.TypeA}, {"nas.", dns.TypeAAAA}, {"nas.", dns.TypeMX},
	{"foo.", dns.TypeA}, {"foo.", dns.TypeAAAA}, {"foo.", dns.TypeMX},
	{"www.example.com.", dns.TypeA}, {"www.example.com.", dns.TypeAAAA}, {"www.example.com.", dns.TypeMX},
	{"alias.example.com.", dns.TypeA}, {"inside.corp.test.", dns.TypeA}, {"inside.corp.test.", dns.TypeAAAA},
	{"x.corp.test.", dns.TypeA},
	{"blocked.test.", dns.TypeA}, {"x.blocked.test.", dns.TypeA}, {"blocked.test.", dns.TypeAAAA}, {"x.blocked.test.", dns.TypeMX},
	{"v6.test.", dns.TypeA}, {"v6.test.", dns.TypeAAAA}, {"both.test.", dns.TypeA}, {"both.test.", dns.TypeAAAA},
	{"nx.test.", dns.TypeA}, {"a.nx.test.", dns.TypeAAAA}, {"ads.test.", dns.TypeA}, {"x.ads.test.", dns.TypeAAAA},
	{"www.example.org.", dns.TypeA},
	{"10.1.168.192.in-addr.arpa.", dns.TypePTR}, {"11.1.168.192.in-addr.arpa.", dns.TypePTR},
	{"20.1.168.192.in-addr.arpa.", dns.TypePTR}, {"50.2.0.192.in-addr.arpa.", dns.TypePTR},
	{"3.2.1.10.in-addr.arpa.", dns.TypePTR}, {"4.3.1.10.in-addr.arpa.", dns.TypePTR},
	{"9.9.9.10.in-addr.arpa.", dns.TypePTR}, {"2.0.0.127.in-addr.arpa.", dns.TypePTR},
	{"1.2.0.192.in-addr.arpa.", dns.TypePTR}, {"1.0.254.169.in-addr.arpa.", dns.TypePTR},
	{"8.8.8.8.in-addr.arpa.", dns.TypePTR}, {"1.0.64.100.in-addr.arpa.", dns.TypePTR},
	{"0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", dns.TypePTR},
	{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.c.f.ip6.arpa.", dns.TypePTR},
	{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.e.f.ip6.arpa.", dns.TypePTR},
}

// upstreamRecords gives every question's name records of each type at an
// upstream, marked with its tag, so a forwarded answer names its server.
func upstreamRecords(t *testing.T, u *testUpstream, tag int) {
	seen := map[string]bool{}
	for _, q := range localQuestions {
		n := strings.ToLower(q.name)
		if seen[n] {
			continue
		}
		seen[n] = true
		u.Add(t,
			fmt.Sprintf("%s 300 IN A 198.51.100.%d", n, tag),
			fmt.Sprintf("%s 300 IN AAAA 2001:db8:ffff::%d", n, tag),
			fmt.Sprintf("%s 300 IN MX 10 mx%d.upstream.test.", n, tag),
			fmt.Sprintf(`%s 300 IN TXT "upstream %d"`, n, tag),
			fmt.Sprintf("%s 300 IN SRV 0 0 %d up.upstream.test.", n, tag),
			fmt.Sprintf("%s 300 IN PTR up%d.upstream.test.", n, tag))
	}
}

// localAnswer is a reply as the comparison sees it: the rcode and the
// answer records, owner names folded, TTLs of local answers (upstream ones
// count down differently in each resolver) and in no particular order.
func localAnswer(t *testing.T, server string, name string, qtype uint16) string {
	t.Helper()
	reply := mustExchange(t, server, "udp", query(name, qtype, true))
	var rrs []string
	for _, rr := range reply.Answer {
		c := dns.Copy(rr)
		c.Header().Name = strings.ToLower(c.Header().Name)
		if strings.Contains(c.String(), "upstream") || strings.Contains(c.String(), "198.51.100.") || strings.Contains(c.String(), "2001:db8:ffff::") {
			c.Header().Ttl = 0 // forwarded: its TTL is the upstream's, counted down
		}
		rrs = append(rrs, strings.ReplaceAll(c.String(), "\t", " "))
	}
	slices.Sort(rrs)
	return dns.RcodeToString[reply.Rcode] + " [" + strings.Join(rrs, "; ") + "]"
}

// TestLocalAnswersLikeDnsmasq imports a dnsmasq configuration with every
// local-answer directive, runs the real dnsmasq and towerd side by side on
// it, and asks both the same questions: same rcode, same records, same
// TTL for local answers. Then it edits the hosts file and reloads both.
func TestLocalAnswersLikeDnsmasq(t *testing.T) {
	t.Parallel()
	def, corp, rev := newTestUpstream(t), newTestUpstream(t), newTestUpstream(t)
	upstreamRecords(t, def, 1)
	upstreamRecords(t, corp, 2)
	upstreamRecords(t, rev, 3)
	port := freePort(t)
	conf := localDnsmasqConf(t, port, def, corp, rev)

	code, toml, report := runToExit(t, "import-dnsmasq", conf)
	if code != 0 {
		t.Fatalf("import-dnsmasq: status %d\n%s\n%s", code, toml, report)
	}
	for _, dropped := range []string{"address=", "local=", "addn-hosts", "no-hosts", "domain-needed", "bogus-priv", "rev-server", "local-ttl", "host-record", "cname", "txt-record", "srv-host"} {
		if strings.Contains(report, dropped) {
			t.Errorf("%s is carried over but listed:\n%s", dropped, report)
		}
	}
	imported := writeConfig(t, toml)

	dm := startDnsmasq(t, conf)
	dnsmasqAt := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	tw := startTowerd(t, "-config", imported, "-listen", "127.0.0.1:0", "-consul-dns", def.Addr)

	for _, q := range localQuestions {
		want := localAnswer(t, dnsmasqAt, q.name, q.qtype)
		got := localAnswer(t, tw.UDP, q.name, q.qtype)
		if got != want {
			t.Errorf("%s %s:\ntowerd  %s\ndnsmasq %s", q.name, dns.TypeToString[q.qtype], got, want)
		}
	}
	// The table must show both kinds of answer, or it compares nothing.
	if a := localAnswer(t, tw.UDP, "nas.lan.", dns.TypeA); a != "NOERROR [nas.lan. 60 IN A 192.168.1.10]" {
		t.Errorf("nas.lan. A = %s, want the hosts file's address with local-ttl", a)
	}
	if a := localAnswer(t, tw.UDP, "11.1.168.192.in-addr.arpa.", dns.TypePTR); a != "NXDOMAIN []" {
		t.Errorf("a private reverse name = %s, want NXDOMAIN (bogus-priv)", a)
	}
	if def.Count("11.1.168.192.in-addr.arpa.", dns.TypePTR) != 0 || def.Count("foo.", dns.TypeA) != 0 {
		t.Error("a private reverse name or a dotless name reached the upstream")
	}
	if a := localAnswer(t, tw.UDP, "4.3.1.10.in-addr.arpa.", dns.TypePTR); a != "NOERROR [4.3.1.10.in-addr.arpa. 0 IN PTR up3.upstream.test.]" {
		t.Errorf("a name in the rev-server zone = %s, want the rev-server upstream's", a)
	}

	// An edited hosts file: both resolvers re-read it on SIGHUP (dnsmasq
	// logs 10 names at start, 11 after).
	hosts := filepath.Join(filepath.Dir(conf), "hosts")
	if err := os.WriteFile(hosts, []byte(localHosts+"192.168.1.30 new.lan\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dm.signal(t, syscall.SIGHUP)
	tw.signal(t, syscall.SIGHUP)
	if _, err := dm.stderr.waitFor(regexp.MustCompile(`read `+regexp.QuoteMeta(hosts)+` - 11 names`), readyTimeout, dm.exited); err != nil {
		t.Fatalf("dnsmasq did not re-read the hosts file: %v\n%s", err, dm.stderr)
	}
	if _, err := tw.stderr.waitFor(regexp.MustCompile(`msg=reloaded`), readyTimeout, tw.exited); err != nil {
		t.Fatalf("towerd did not reload: %v", err)
	}
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"new.lan.", dns.TypeA}, {"30.1.168.192.in-addr.arpa.", dns.TypePTR}} {
		want := localAnswer(t, dnsmasqAt, q.name, q.qtype)
		got := localAnswer(t, tw.UDP, q.name, q.qtype)
		if got != want || !strings.HasPrefix(got, "NOERROR [") || got == "NOERROR []" {
			t.Errorf("after the edit, %s: towerd %s, dnsmasq %s", q.name, got, want)
		}
	}

	// Without a signal, towerd's poll (a stat per file every 2 s) sees a
	// file added to a hosts directory and re-reads: a third file, ten
	// entries. (dnsmasq re-reads addn-hosts only on SIGHUP.)
	if err := os.WriteFile(filepath.Join(filepath.Dir(conf), "hosts.d", "20-more"), []byte("10.2.2.3 polled.lan\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.stderr.waitFor(regexp.MustCompile(`msg="local data loaded" names=\d+ hosts_entries=10 files=3`), readyTimeout, tw.exited); err != nil {
		t.Fatalf("towerd did not re-read the hosts directory: %v", err)
	}
	if got := localAnswer(t, tw.UDP, "polled.lan.", dns.TypeA); got != "NOERROR [polled.lan. 60 IN A 10.2.2.3]" {
		t.Errorf("polled.lan. A = %s after the poll", got)
	}
}

// TestImportDnsmasqExitsOneWhenAnswersChange: a directive whose loss
// changes answers makes the import exit 1 and list it; one that changes
// only logging is a note, with exit 0.
func TestImportDnsmasqExitsOneWhenAnswersChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, fmt.Sprintf("dnsmasq%d.conf", len(body)))
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	harmless := write("server=192.0.2.1\nno-resolv\nlog-queries\nno-poll\n")
	code, toml, report := runToExit(t, "import-dnsmasq", harmless)
	// log-queries is towerd's log_queries now (issue 25 item 2); no-poll
	// is carried over but for a difference that changes no answer.
	if code != 0 || strings.Contains(report, "log-queries:") || strings.Contains(report, "change answers") ||
		!strings.Contains(toml, "log_queries = true") {
		t.Errorf("log-queries only: status %d, report:\n%s\n%s", code, report, toml)
	}
	if !strings.Contains(toml, "domain_needed = false") || !strings.Contains(toml, "bogus_priv    = false") {
		t.Errorf("dnsmasq without domain-needed and bogus-priv forwards those names; the import must say so:\n%s", toml)
	}

	changing := write("server=192.0.2.1\nno-resolv\nlog-queries\nexpand-hosts\ndnssec\n")
	code, toml, report = runToExit(t, "import-dnsmasq", changing)
	if code != 1 {
		t.Errorf("status %d, want 1\n%s", code, report)
	}
	_, list, found := strings.Cut(report, "2 directive(s) dropped that change answers")
	if !found || !strings.Contains(list, changing+":4: expand-hosts") || !strings.Contains(list, changing+":5: dnssec") || strings.Contains(list, "log-queries") {
		t.Errorf("the list of directives that change answers is wrong:\n%s", report)
	}
	if !strings.Contains(toml, `servers = ["192.0.2.1:53"]`) {
		t.Errorf("the configuration is still printed:\n%s", toml)
	}
}
