package test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/consultest"
	"github.com/towerd/towerd/test/dnstest"
	"github.com/towerd/towerd/test/faultproxy"
)

// TestConsulAgentLossAndFreshAgent: with the agent gone, the services known
// before keep being answered, marked stale, for serve_stale.max_age and no
// longer; a fresh agent (lower index) on the same HTTP port is found by
// itself and its catalog served.
func TestConsulAgentLossAndFreshAgent(t *testing.T) {
	t.Parallel()
	const maxAge = 3 * time.Second
	agent := consultest.Start(t, consultest.Options{})
	c := agent.Client("")
	register(t, c, &api.AgentServiceRegistration{ID: "web1", Name: "web", Address: "127.0.0.21", Port: 80})
	// Raise the service list's index well above a fresh agent's.
	for i := range 10 {
		id := fmt.Sprintf("churn%d", i)
		register(t, c, &api.AgentServiceRegistration{ID: id, Name: "churn", Port: 1})
		if err := c.Agent().ServiceDeregister(id); err != nil {
			t.Fatal(err)
		}
	}
	cfg := writeConfig(t, fmt.Sprintf("[serve_stale]\nmax_age = %q\n[consul]\n%s", maxAge, pins("web")))
	d := startConsulTowerd(t, agent, deadPort(t), "-config", cfg)
	oldIndex := servicesIndex(t, c)
	if m, err := ask(d.UDP, "web.service.consul.", dns.TypeA); err != nil || len(ede(m)) != 0 ||
		!slices.Equal(sortedAddresses(m), []string{"127.0.0.21"}) {
		t.Fatalf("before the agent stops: %v %v", m, err)
	}

	// The time is taken before the kill: towerd may see its blocking
	// queries break, and start counting max_age, before Kill has waited
	// for the agent's exit and returned (issue 33: beside CPU hogs the
	// records were dropped 2.98 s after a time taken after Kill). The upper
	// bound, max_age + 2 s, is a generous wall-clock limit on a real
	// process's timer, which the race detector and the load slow.
	killed := time.Now()
	agent.Kill()
	var sawStale bool
	for {
		m, err := ask(d.UDP, "web.service.consul.", dns.TypeA)
		if err != nil {
			t.Fatalf("no answer while the agent is gone: %v", err)
		}
		age := time.Since(killed)
		if m.Rcode == dns.RcodeServerFailure {
			// Dropped: the question went to Consul's DNS (a dead port).
			if !sawStale || age < maxAge || age > maxAge+2*time.Second {
				t.Fatalf("records dropped %v after the agent stopped (stale seen: %v), want just after %v",
					age, sawStale, maxAge)
			}
			t.Logf("served stale until %v after the agent stopped", age.Round(time.Millisecond))
			break
		}
		if !slices.Equal(sortedAddresses(m), []string{"127.0.0.21"}) {
			t.Fatalf("%v after the agent stopped: %v, want the last known records", age, m)
		}
		if slices.Contains(ede(m), dns.ExtendedErrorCodeStaleAnswer) {
			sawStale = true
		}
		if age > maxAge+2*time.Second {
			t.Fatalf("still answered %v after the agent stopped, max_age %v", age, maxAge)
		}
		time.Sleep(50 * time.Millisecond) // polling interval of a bounded wait
	}

	_, port, _ := net.SplitHostPort(agent.HTTPAddr)
	httpPort, _ := strconv.Atoi(port)
	fresh := consultest.Start(t, consultest.Options{HTTPPort: httpPort})
	fc := fresh.Client("")
	register(t, fc, &api.AgentServiceRegistration{ID: "web9", Name: "web", Address: "127.0.0.22", Port: 80})
	if newIndex := servicesIndex(t, fc); newIndex >= oldIndex {
		t.Fatalf("the fresh agent's index %d is not below the old %d; the test proves nothing", newIndex, oldIndex)
	}
	started := time.Now()
	// A generous bound: the watch's backoff (at most 5 s) beside a real
	// agent starting under the race detector.
	dnstest.Eventually(t, func() bool {
		m, err := ask(d.UDP, "web.service.consul.", dns.TypeA)
		return err == nil && len(ede(m)) == 0 && slices.Equal(sortedAddresses(m), []string{"127.0.0.22"})
	}, 20*time.Second, "towerd to answer the fresh agent's record, fresh")
	t.Logf("converged on the fresh agent %v after it started", time.Since(started).Round(time.Millisecond))
	// The service-list loop may still be in its backoff (at most 5 s).
	waitLog(t, d, regexp.MustCompile(`msg="consul watch: the agent answers again"`), 10*time.Second)
}

// TestConsulWatchUnderSlowDNS: with the agent's DNS behind 100 ms ± 50 ms of
// delay and 0.5 % loss, 10,000 queries for watched services all succeed and
// none of them reaches Consul's DNS.
func TestConsulWatchUnderSlowDNS(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	c := agent.Client("")
	register(t, c, &api.AgentServiceRegistration{ID: "web1", Name: "web", Tags: []string{"v1"}, Address: "127.0.0.41", Port: 80})
	register(t, c, &api.AgentServiceRegistration{ID: "web2", Name: "web", Address: "127.0.0.42", Port: 80})
	register(t, c, &api.AgentServiceRegistration{ID: "db1", Name: "db", Address: "::1", Port: 5432})
	proxy := startConsulDNSProxy(t, agent.DNSAddr, faultproxy.Faults{Delay: 100 * time.Millisecond, Jitter: 50 * time.Millisecond, Loss: 0.005}, 20240611)
	d := startConsulTowerd(t, agent, proxy.Addr(), "-config", writeConfig(t, "[consul]\n"+pins("web", "db")))

	// The slow path works: a node name is not watched and goes through it.
	node := agent.Node + ".node.consul."
	var reached bool
	for range 5 { // a lost packet costs towerd a retry, rarely the query
		if m, err := ask(d.UDP, node, dns.TypeA); err == nil && slices.Equal(addresses(m.Answer), []string{"127.0.0.1"}) {
			reached = true
			break
		}
	}
	if !reached || proxy.Count(node) == 0 {
		t.Fatalf("the node query did not go through the slow proxy (reached %v, proxied %d)", reached, proxy.Count(node))
	}

	watched := []struct {
		name  string
		qtype uint16
	}{
		{"web.service.consul.", dns.TypeA}, {"web.service.consul.", dns.TypeSRV},
		{"v1.web.service.consul.", dns.TypeA}, {"web.service.dc1.consul.", dns.TypeSRV},
		{"db.service.consul.", dns.TypeAAAA}, {"db.service.consul.", dns.TypeA},
	}
	const total, workers = 10000, 16
	var next, failed atomic.Int64
	var firstErr sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
			for i := next.Add(1); i <= total; i = next.Add(1) {
				q := watched[int(i)%len(watched)]
				m, _, err := client.Exchange(query(q.name, q.qtype, true), d.UDP)
				ok := err == nil && m.Rcode == dns.RcodeSuccess && len(ede(m)) == 0 &&
					(len(m.Answer) > 0 || (q.name == "db.service.consul." && q.qtype == dns.TypeA && len(m.Ns) == 1))
				if !ok {
					failed.Add(1)
					firstErr.Do(func() { t.Errorf("%s %s: %v %v", q.name, dns.TypeToString[q.qtype], m, err) })
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	st := proxy.Stats()
	t.Logf("%d queries in %v (%.0f/s), %d failed; the proxy dropped %d packets of %d queries",
		total, took.Round(time.Millisecond), total/took.Seconds(), failed.Load(), st.LostQueries+st.LostReplies, st.Queries)
	if failed.Load() != 0 {
		t.Errorf("%d of %d queries for watched services failed", failed.Load(), total)
	}
	for _, q := range watched {
		if n := proxy.Count(q.name); n != 0 {
			t.Errorf("%s reached Consul's DNS %d times; watched names must be answered from memory", q.name, n)
		}
	}
}

// TestConsulACL: on an agent with ACLs (default deny), a token that may read
// services and nodes (not the agent) feeds the watch; a bad token is
// reported plainly in the log and the metrics; a token revoked while
// running leaves the records served, stale, with the same report.
func TestConsulACL(t *testing.T) {
	t.Parallel()
	const management = "8e2b7a4c-0d31-4f4e-9d35-6f0c1a2b3c4d"
	agent := consultest.Start(t, consultest.Options{ManagementToken: management})
	mc := agent.Client(management)
	register(t, mc, &api.AgentServiceRegistration{ID: "web1", Name: "web", Address: "127.0.0.51", Port: 80})
	policy, _, err := mc.ACL().PolicyCreate(&api.ACLPolicy{Name: "towerd-watch",
		Rules: `service_prefix "" { policy = "read" } node_prefix "" { policy = "read" }`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	token, _, err := mc.ACL().TokenCreate(&api.ACLToken{Description: "towerd watch",
		Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "consul-token")
	if err := os.WriteFile(tokenFile, []byte(token.SecretID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	aclError := regexp.MustCompile(`level=ERROR msg="consul watch: the agent refused.*consul rejected the ACL token \(HTTP 403`)

	good := startConsulTowerd(t, agent, deadPort(t), "-config",
		writeConfig(t, fmt.Sprintf("[consul]\ntoken_file = %q\n%s", tokenFile, pins("web"))))
	for _, name := range []string{"web.service.consul.", "web.service.dc1.consul."} {
		m, err := ask(good.UDP, name, dns.TypeA)
		if err != nil || !slices.Equal(sortedAddresses(m), []string{"127.0.0.51"}) {
			t.Errorf("%s with a valid token: %v %v", name, m, err)
		}
	}

	bad := startTowerd(t, "-config", writeConfig(t, "[consul]\ntoken = \"not-a-token\"\n"+pins("web")), "-listen", "127.0.0.1:0",
		"-upstream", newTestUpstream(t).Addr, "-consul-dns", deadPort(t), "-consul-http", agent.HTTPAddr)
	waitLog(t, bad, aclError, 10*time.Second)
	expectMetric(t, bad, "towerd_consul_watch_acl_denied 1")
	if m, err := ask(bad.UDP, "web.service.consul.", dns.TypeA); err != nil || m.Rcode != dns.RcodeServerFailure {
		t.Errorf("bad token: %v %v, want the normal path (SERVFAIL from the dead Consul DNS)", m, err)
	}

	// Revoke the good token; a catalog change ends the blocking queries, and
	// the next ones are refused.
	if _, err := mc.ACL().TokenDelete(token.AccessorID, nil); err != nil {
		t.Fatal(err)
	}
	register(t, mc, &api.AgentServiceRegistration{ID: "web2", Name: "web", Address: "127.0.0.52", Port: 80})
	waitLog(t, good, aclError, 20*time.Second)
	dnstest.Eventually(t, func() bool {
		m, err := ask(good.UDP, "web.service.consul.", dns.TypeA)
		if err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) == 0 {
			t.Fatalf("after the token was revoked: %v %v, want the last known records", m, err)
		}
		return slices.Contains(ede(m), dns.ExtendedErrorCodeStaleAnswer)
	}, 10*time.Second, "the last known records marked stale after the token was revoked")
	expectMetric(t, good, "towerd_consul_watch_acl_denied 1")
}

// expectMetric checks a line of towerd's /metrics, when its admin server
// runs (it is another package's work and may be off).
func expectMetric(t *testing.T, d *towerd, line string) {
	t.Helper()
	if d.Admin == "" {
		t.Logf("no admin server: %q not checked", line)
		return
	}
	resp, err := http.Get("http://" + d.Admin + "/metrics")
	if err != nil {
		t.Fatalf("reading /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).Match(body) {
		t.Errorf("/metrics has no line %q", line)
	}
}
