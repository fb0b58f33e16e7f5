package test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/miekg/dns"
)

// dnsmasqPath finds the real dnsmasq (Debian dnsmasq-base puts it in
// /usr/sbin, which a non-root PATH may lack).
func dnsmasqPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("dnsmasq"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/dnsmasq"); err == nil {
		return "/usr/sbin/dnsmasq"
	}
	t.Fatal("dnsmasq not found (Debian dnsmasq-base): run test/install-deps.sh")
	return ""
}

// nodeDnsmasqConf writes a dnsmasq setup like a Consul node's: a main file
// with the usual hardening lines and a conf-dir whose *.conf files route
// .consul and a site domain. Files the conf-dir must skip would misroute
// .consul if read. It returns the main file's path.
func nodeDnsmasqConf(t *testing.T, port int, def, consul, corp *testUpstream) string {
	t.Helper()
	dir := t.TempDir()
	confDir := filepath.Join(dir, "dnsmasq.d")
	files := map[string]string{
		"dnsmasq.conf": fmt.Sprintf(`# /etc/dnsmasq.conf on a Consul node
port=%d
listen-address=127.0.0.1
bind-interfaces
domain-needed
bogus-priv
no-hosts
no-resolv
strict-order
server=%s
cache-size=1000
no-negcache
use-stale-cache
dns-forward-max=300
conf-dir=%s,*.conf
`, port, dnsmasqAddr(def.Addr), confDir),
		"dnsmasq.d/10-consul.conf": "# Forward the Consul domain to the local agent\nserver=/consul/" + dnsmasqAddr(consul.Addr) + "\n",
		"dnsmasq.d/20-corp.conf":   "server=/corp.example/" + dnsmasqAddr(corp.Addr) + "\nlocal-ttl=60\n",
		"dnsmasq.d/README":         "server=/consul/192.0.2.250\n",
		"dnsmasq.d/30-old.conf~":   "server=/consul/192.0.2.251\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "dnsmasq.conf")
}

// dnsmasqAddr writes "127.0.0.1:5300" as dnsmasq does: "127.0.0.1#5300".
func dnsmasqAddr(hostport string) string {
	host, port, _ := net.SplitHostPort(hostport)
	return host + "#" + port
}

// startDnsmasq runs the real dnsmasq in the foreground on conf, logging to
// stderr, with its pid file in the test's temp dir, and waits until it
// has bound its sockets. It is stopped by PID.
func startDnsmasq(t *testing.T, conf string) *process {
	t.Helper()
	return startDnsmasqBy(t, exec.Command, conf)
}

// startDnsmasqBy is startDnsmasq with the command made by command (one
// that runs dnsmasq in a network namespace, say).
func startDnsmasqBy(t *testing.T, command func(string, ...string) *exec.Cmd, conf string) *process {
	t.Helper()
	cmd := command(dnsmasqPath(t), "--keep-in-foreground", "--conf-file="+conf, "--log-facility=-",
		"--pid-file="+filepath.Join(t.TempDir(), "dnsmasq.pid"))
	p := startProcess(t, cmd)
	t.Cleanup(func() {
		if p.running() {
			p.signal(t, syscall.SIGTERM)
			p.waitExit(t, stopTimeout)
		}
	})
	// dnsmasq logs "started" after binding, and reads packets once its
	// servers are set up; a query sent now waits in the socket.
	if _, err := p.stderr.waitFor(regexp.MustCompile(`started, version`), readyTimeout, p.exited); err != nil {
		t.Fatalf("dnsmasq did not start: %v\n%s", err, p.stderr)
	}
	return p
}

// TestImportDnsmasqRoutesLikeDnsmasq imports a node's dnsmasq setup, runs
// the real dnsmasq and towerd side by side on it, and asks both the same
// questions: each upstream answers with an address of its own, so the
// answers show which upstream a name was routed to.
func TestImportDnsmasqRoutesLikeDnsmasq(t *testing.T) {
	t.Parallel()
	def, consul, corp := newTestUpstream(t), newTestUpstream(t), newTestUpstream(t)
	names := []string{"web.service.consul.", "db.service.dc1.consul.", "host.corp.example.", "www.example.org."}
	for i, u := range []*testUpstream{def, consul, corp} {
		for _, n := range names {
			u.Add(t, fmt.Sprintf("%s 300 IN A 192.0.2.%d", n, i+1))
		}
	}
	port := freePort(t)
	conf := nodeDnsmasqConf(t, port, def, consul, corp)

	code, toml, report := runToExit(t, "import-dnsmasq", conf)
	if code != 0 {
		t.Fatalf("import-dnsmasq: status %d\n%s\n%s", code, toml, report)
	}
	// Every directive not carried over is listed with its file and line.
	for _, want := range []string{
		conf + ":4: bind-interfaces: not carried over",
		conf + ":12: no-negcache: carried over partly",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("import report lacks %q:\n%s", want, report)
		}
	}
	// Past the files read (each named, with the conf-dir that led there),
	// only what was not carried over is listed.
	var notes []string
	for _, line := range strings.Split(report, "\n") {
		if !strings.HasPrefix(line, "read ") {
			notes = append(notes, line)
		}
	}
	if !strings.Contains(report, "read "+conf+": named\n") {
		t.Errorf("the report does not name the file read:\n%s", report)
	}
	for _, carried := range []string{"strict-order", "no-resolv", "cache-size", "use-stale-cache:", "conf-dir", "server=",
		"domain-needed", "bogus-priv", "no-hosts", "local-ttl"} {
		if strings.Contains(strings.Join(notes, "\n"), carried) {
			t.Errorf("%s is carried over but listed:\n%s", carried, report)
		}
	}
	imported := writeConfig(t, toml)
	if code, out, errOut := runToExit(t, "check", "-config", imported); code != 0 {
		t.Fatalf("towerd check rejects the import: %d\n%s%s\n%s", code, out, errOut, toml)
	}

	startDnsmasq(t, conf)
	dnsmasqAt := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// The imported listen address is dnsmasq's own port: towerd serves
	// beside it on a port of its own.
	tw := startTowerd(t, "-config", imported, "-listen", "127.0.0.1:0")

	for _, name := range names {
		want := answerOf(t, dnsmasqAt, name)
		got := answerOf(t, tw.UDP, name)
		if got != want {
			t.Errorf("%s: towerd answers %s, dnsmasq %s: routed differently", name, got, want)
		}
	}
	if consul.Count("web.service.consul.", dns.TypeA) != 2 || def.Count("web.service.consul.", dns.TypeA) != 0 {
		t.Errorf(".consul should reach only the Consul upstream, once from each: consul %d, default %d",
			consul.Count("web.service.consul.", dns.TypeA), def.Count("web.service.consul.", dns.TypeA))
	}
}

func answerOf(t *testing.T, server, name string) string {
	t.Helper()
	reply := mustExchange(t, server, "udp", query(name, dns.TypeA, false))
	return dns.RcodeToString[reply.Rcode] + " " + strings.Join(addresses(reply.Answer), ",")
}
