package test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// dotUnbound is a real DNS over TLS server: unbound with tls-service-key
// and a certificate of a CA made by the test, TLS only (no UDP, no plain
// TCP), answering every name under tls.test with 192.0.2.7, its extended
// statistics read with unbound-control.
type dotUnbound struct {
	addr string // 127.0.0.1:port, TLS
	conf string
	ca   *dnstest.CA
	proc *process
}

// stop ends unbound by its PID and waits for it.
func (u *dotUnbound) stop(t *testing.T) {
	t.Helper()
	if u.proc.running() {
		u.proc.signal(t, syscall.SIGTERM)
	}
	u.proc.waitExit(t, stopTimeout)
}

func startDoTUnbound(t *testing.T, certName string) *dotUnbound {
	t.Helper()
	bin, err := exec.LookPath("unbound")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/unbound"); serr != nil {
			t.Fatal("the DNS over TLS test needs unbound: run test/install-deps.sh")
		}
		bin = "/usr/sbin/unbound"
	}
	dir, err := os.MkdirTemp("", "towerd-dot")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	_ = os.Chmod(dir, 0o755) // unbound may drop to its own user
	ca := dnstest.NewCA(t)
	_, certPEM, keyPEM := ca.Leaf(t, certName)
	for name, data := range map[string][]byte{"cert.pem": certPEM, "key.pem": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Below the ephemeral range (freePort): a port the kernel hands out
	// as a source port could be taken before unbound binds it.
	port := freePort(t)
	conf := filepath.Join(dir, "unbound.conf")
	body := fmt.Sprintf(`server:
	interface: 127.0.0.1@%[2]d
	tls-port: %[2]d
	tls-service-key: "%[1]s/key.pem"
	tls-service-pem: "%[1]s/cert.pem"
	do-udp: no
	do-ip6: no
	port: %[2]d
	username: ""
	chroot: ""
	directory: "%[1]s"
	pidfile: "%[1]s/unbound.pid"
	use-syslog: no
	logfile: ""
	verbosity: 1
	num-threads: 1
	extended-statistics: yes
	edns-tcp-keepalive: yes
	access-control: 127.0.0.0/8 allow
	module-config: "iterator"
	local-zone: "tls.test." redirect
	local-data: "tls.test. 300 IN A 192.0.2.7"
remote-control:
	control-enable: yes
	control-use-cert: no
	control-interface: "%[1]s/ctl.sock"
`, dir, port)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, exec.Command(bin, "-d", "-c", conf))
	u := &dotUnbound{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), conf: conf, ca: ca, proc: p}
	t.Cleanup(func() { u.stop(t) })
	if _, err := p.stderr.waitFor(regexp.MustCompile(`start of service`), readyTimeout, p.exited); err != nil {
		t.Fatalf("unbound did not start: %v\n%s", err, p.stderr)
	}
	return u
}

// stats reads unbound's counters (extended statistics, not reset).
func (u *dotUnbound) stats(t *testing.T) map[string]float64 {
	t.Helper()
	out, err := exec.Command("unbound-control", "-c", u.conf, "stats_noreset").CombinedOutput()
	if err != nil {
		t.Fatalf("unbound-control: %v\n%s", err, out)
	}
	stats := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			f, _ := strconv.ParseFloat(v, 64)
			stats[k] = f
		}
	}
	return stats
}

// startTowerdDoT runs towerd forwarding "." to u over TLS as auth, with
// the test's CA as tls_ca_file.
func startTowerdDoT(t *testing.T, u *dotUnbound, auth, extra string) *towerd {
	t.Helper()
	consul := newTestUpstream(t)
	caFile := u.ca.WriteFile(t, t.TempDir())
	cfg := writeConfig(t, fmt.Sprintf(`listen = ["127.0.0.1:0"]
[[zone]]
name = "."
servers = ["tls://%s#%s"]
tls_ca_file = %q
[[zone]]
name = "consul."
servers = [%q]
%s`, u.addr, auth, caFile, consul.Addr, extra))
	return startTowerd(t, "-config", cfg)
}

// TestDoTAgainstUnbound (issue 37): a thousand first-time names at
// 400 q/s through towerd to a real unbound that speaks only DNS over
// TLS: every one answered, over a handful of connections, every query
// counted by unbound as TLS; then a towerd configured with a wrong
// authentication name: no answer, and not one query reaches unbound.
func TestDoTAgainstUnbound(t *testing.T) {
	const names, rate = 1000, 400
	u := startDoTUnbound(t, "dot.test")
	// The in-flight cap is not under test: beside CPU hogs under -race a
	// stalled moment of the round trip through TLS and unbound filled the
	// default cap at this rate, and names got SERVFAIL by design.
	d := startTowerdDoT(t, u, "dot.test", fmt.Sprintf("[upstream]\nmax_inflight = %d\n", names))

	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	var wg sync.WaitGroup
	errs := make(chan error, names)
	client := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	for i := range names {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("n%d.tls.test.", i)
			reply, _, err := client.Exchange(query(name, dns.TypeA, true), d.UDP)
			switch {
			case err != nil:
				errs <- fmt.Errorf("%s: %w", name, err)
			case reply.Rcode != dns.RcodeSuccess || len(addresses(reply.Answer)) != 1 || addresses(reply.Answer)[0] != "192.0.2.7":
				errs <- fmt.Errorf("%s: %s %v", name, dns.RcodeToString[reply.Rcode], reply.Answer)
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if failed++; failed <= 5 {
			t.Error(err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d names not answered", failed, names)
	}

	stats := u.stats(t)
	total, tlsQueries := stats["total.num.queries"], stats["num.query.tls"]
	t.Logf("unbound: %v queries, %v over TLS, %v on resumed sessions", total, tlsQueries, stats["num.query.tls.resume"])
	if total < names || tlsQueries != total {
		t.Errorf("unbound counted %v queries, %v of them over TLS: want >= %d, all TLS", total, tlsQueries, names)
	}
	_, mfs := scrape(t, d.Admin)
	handshakes := sample(mfs, "towerd_upstream_tls_handshakes_total", nil)
	queries := sample(mfs, "towerd_upstream_tls_queries_total", nil)
	t.Logf("towerd: %v handshakes, %v queries over TLS, %v on an open connection", handshakes, queries, sample(mfs, "towerd_upstream_tls_reused_total", nil))
	if handshakes < 1 || handshakes > 3 {
		t.Errorf("%v TLS handshakes for %d names, want a handful (1 to 3)", handshakes, names)
	}
	if queries != tlsQueries {
		t.Errorf("towerd sent %v queries over TLS, unbound read %v", queries, tlsQueries)
	}

	// towerd lookup shows the transport, and the TLS server as what answered.
	runLookups(t, d.Control, []lookupCase{{args: []string{"lookup-me.tls.test"}, want: []string{
		"  zone      . -> tls://" + u.addr + "#dot.test (up, tls, srtt ",
		"from upstream tls://" + u.addr + "#dot.test (zone .)",
	}}})

	// A wrong authentication name: the certificate is the CA's but not for
	// that name. No answer, and unbound reads no query at all.
	before := u.stats(t)["total.num.queries"]
	wrong := startTowerdDoT(t, u, "wrong.test", "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 5 {
		name := fmt.Sprintf("w%d.tls.test.", i)
		reply, _, err := client.ExchangeContext(ctx, query(name, dns.TypeA, true), wrong.UDP)
		if err == nil && (reply.Rcode == dns.RcodeSuccess || len(reply.Answer) > 0) {
			t.Errorf("%s answered through a server whose name does not verify: %v", name, reply)
		}
	}
	if after := u.stats(t)["total.num.queries"]; after != before {
		t.Errorf("unbound read %v queries from the towerd with the wrong name", after-before)
	}
	_, mfs = scrape(t, wrong.Admin)
	if n := sample(mfs, "towerd_upstream_tls_failures_total", map[string]string{"reason": "name"}); n < 1 {
		t.Errorf("no TLS failure counted with reason name")
	}
	waitTLSFailureLine(t, wrong)
	if n := strings.Count(wrong.stderr.String(), "upstream TLS connection failed"); n != 1 {
		t.Errorf("the failure logged %d times, want once", n)
	}
}

// TestDoTServerGoneServesStale: when the DNS over TLS server goes away,
// the zone answers from its stale entries as for any failed upstream (EDE
// 3), the failure is logged once, and nothing else is asked instead.
func TestDoTServerGoneServesStale(t *testing.T) {
	u := startDoTUnbound(t, "dot.test")
	d := startTowerdDoT(t, u, "dot.test", "[cache]\nmax_ttl = \"1s\"\n")
	client := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	reply, _, err := client.Exchange(query("stale.tls.test.", dns.TypeA, true), d.UDP)
	if err != nil || len(addresses(reply.Answer)) != 1 {
		t.Fatalf("first answer: %v %v", reply, err)
	}
	u.stop(t)
	// The entry expires a second after it was stored; until then it is
	// fresh. Asked until the answer is the stale one (bounded).
	// The entry's expiry is a wall-clock TTL in another process: polled.
	dnstest.Eventually(t, func() bool {
		reply, _, err = client.Exchange(query("stale.tls.test.", dns.TypeA, true), d.UDP)
		return err == nil && slices.Contains(ede(reply), 3)
	}, 15*time.Second, "a stale answer (EDE 3) after the TLS server went away")
	if got := addresses(reply.Answer); len(got) != 1 || got[0] != "192.0.2.7" || reply.Rcode != dns.RcodeSuccess {
		t.Errorf("stale answer %v", reply)
	}
	// A new name: no stale answer, SERVFAIL; the reason logged once.
	reply, _, err = client.Exchange(query("new.tls.test.", dns.TypeA, true), d.UDP)
	if err != nil || reply.Rcode != dns.RcodeServerFailure {
		t.Errorf("new name with the server gone: %v %v", reply, err)
	}
	waitTLSFailureLine(t, d)
	if n := strings.Count(d.stderr.String(), "upstream TLS connection failed"); n != 1 {
		t.Errorf("the failure logged %d times, want once", n)
	}
}

// waitTLSFailureLine waits for d's first line about a failed TLS
// connection. The failure is logged before the query it failed is
// answered, but through towerd's log buffer (logsink) and a pipe, so the
// line may come after the answer; counting it at once could find none.
func waitTLSFailureLine(t *testing.T, d *towerd) {
	t.Helper()
	if _, err := d.stderr.waitFor(regexp.MustCompile(`upstream TLS connection failed`), readyTimeout, d.exited); err != nil {
		t.Errorf("the TLS failure was not logged: %v", err)
	}
}
