package test

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/consultest"
	"github.com/towerd/towerd/test/dnstest"
)

// TestConsulServiceListAcrossAgentRestart: towerd follows the catalog's
// service list (64 names kept out), then its agent is stopped (SIGTERM)
// and started again on the same ports and data directory, its catalog's
// index lower than before (a -dev agent keeps its catalog in memory).
// While the agent is away the watched service is answered (stale), names
// the list lacks cost no read, and towerd's attempts to reach the agent
// are spaced out by its backoff (a hot loop would make them in
// milliseconds); afterwards the following resumes by itself: a service
// registered after the restart is answered from the watch, one the new
// catalog lacks is no longer taken for a service (no read), and unknown
// names still cost no read.
func TestConsulServiceListAcrossAgentRestart(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	c := agent.Client("")
	register(t, c, &api.AgentServiceRegistration{ID: "web1", Name: "web", Address: "127.0.0.31", Port: 80})
	// gone: on another node, written to the catalog only. The -dev agent
	// keeps the catalog in memory and its anti-entropy restores only its
	// own services, so gone is not in the restarted agent's list.
	if _, err := c.Catalog().Register(&api.CatalogRegistration{Node: "elsewhere", Address: "127.0.0.32",
		Service: &api.AgentService{ID: "gone1", Service: "gone", Port: 80}}, nil); err != nil {
		t.Fatal(err)
	}
	// Raise the list's index well above the restarted agent's.
	for i := range 10 {
		id := fmt.Sprintf("churn%d", i)
		register(t, c, &api.AgentServiceRegistration{ID: id, Name: "churn", Port: 1})
		if err := c.Agent().ServiceDeregister(id); err != nil {
			t.Fatal(err)
		}
	}
	oldIndex := servicesIndex(t, c)

	proxy := startHTTPCounter(t, agent.HTTPAddr)
	// Consul's DNS is a dead port: whatever is answered comes from the
	// watch's memory, and a name left to Consul's DNS gets SERVFAIL.
	cfg := writeConfig(t, "[serve_stale]\nmax_age = \"1m\"\n[consul]\n"+pins("web"))
	d := startConsulTowerd(t, &consultest.Agent{HTTPAddr: proxy.addr}, deadPort(t), "-config", cfg)
	webAnswered := func(what string) {
		t.Helper()
		m, err := ask(d.UDP, "web.service.consul.", dns.TypeA)
		if err != nil || m.Rcode != dns.RcodeSuccess || !slices.Equal(sortedAddresses(m), []string{"127.0.0.31"}) {
			t.Fatalf("web %s: %v %v, want 127.0.0.31 from the watch", what, m, err)
		}
	}
	webAnswered("before the restart")
	askTwice := func(name string) {
		t.Helper()
		for range 2 {
			if _, err := ask(d.UDP, name+".service.consul.", dns.TypeA); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	// new is asked for before it exists: kept out (30 s, doubling) like
	// the 63 names that never will.
	for i := range 64 {
		name := fmt.Sprint("nosuch", i)
		if i == 0 {
			name = "new"
		}
		askTwice(name)
		waitMetric(t, d, "towerd_consul_watch_empty_reads_total", float64(i+1), 10*time.Second)
	}
	waitLog(t, d, regexp.MustCompile(`following the catalog's service list`), 10*time.Second)
	if idx := towerdMetric(t, d, "towerd_consul_watch_index"); idx < float64(oldIndex) {
		t.Fatalf("towerd_consul_watch_index %v before the restart, want at least the list's %d", idx, oldIndex)
	}

	// The outage: SIGTERM by PID. It lasts until towerd has tried the
	// agent outageAttempts times (its backoff's cycles, not a timer),
	// while the test asks for the watched service and for unknown names.
	const outageAttempts = 12
	logsBefore := d.stderr.String()
	proxy.reset()
	agent.Stop(t)
	down := time.Now()
	unknown := 0
	for proxy.failed() < outageAttempts {
		if time.Since(down) > 30*time.Second {
			t.Fatalf("towerd tried the stopped agent %d times in 30 s, want %d", proxy.failed(), outageAttempts)
		}
		webAnswered("while the agent is away")
		askTwice(fmt.Sprint("unknown", unknown))
		askTwice("gone") // listed, not watched: the agent's DNS, no read
		unknown++
	}
	outage := time.Since(down)
	attempts := proxy.paths(true)
	outageLog := strings.TrimPrefix(d.stderr.String(), logsBefore)
	t.Logf("outage %v: %d questions for unknown names and as many for a listed one, towerd's attempts: %v",
		outage.Round(time.Millisecond), 2*unknown, attempts)
	for path := range attempts {
		if strings.Contains(path, "/nosuch") || strings.Contains(path, "/unknown") || strings.Contains(path, "/gone") {
			t.Errorf("during the outage towerd tried to read %s", path)
		}
	}
	// Backoff, not a hot loop: each loop's waits (the agent's gate 50 ms
	// doubling to 500 ms, the list's 250 ms doubling to 5 s, the upper
	// half random) put the 12 attempts at least a second apart in all;
	// without them the 12 take milliseconds.
	if outage < time.Second {
		t.Errorf("towerd tried the stopped agent %d times within %v: no backoff", outageAttempts, outage)
	}
	// What an operator reads (info and up) says the agent is away once,
	// not once per name or attempt.
	var said []string
	for _, line := range strings.Split(outageLog, "\n") {
		if strings.Contains(line, "msg=\"consul watch") && !strings.Contains(line, "level=DEBUG") {
			said = append(said, line)
		}
	}
	if n := strings.Count(outageLog, `msg="consul watch: cannot query the agent`); n != 1 {
		t.Errorf("towerd said %d times that it cannot query the agent, want once", n)
	}
	if len(said) > 3 {
		t.Errorf("towerd logged %d lines about the watch during the outage, want a few (not one per name or attempt):\n%s",
			len(said), strings.Join(said, "\n"))
	}
	t.Logf("logged during the outage:\n%s", strings.Join(said, "\n"))

	agent.Restart(t)
	up := time.Now()
	dnstest.Eventually(t, func() bool {
		_, _, err := c.Catalog().Services(nil)
		return err == nil
	}, 60*time.Second, "the restarted agent to answer")
	register(t, c, &api.AgentServiceRegistration{ID: "new1", Name: "new", Address: "127.0.0.33", Port: 80})
	register(t, c, &api.AgentServiceRegistration{ID: "witness1", Name: "witness", Address: "127.0.0.34", Port: 80})
	registered := time.Now()
	if newIndex := servicesIndex(t, c); newIndex >= oldIndex {
		t.Fatalf("the restarted agent's index %d is not below the old %d; the test proves nothing", newIndex, oldIndex)
	}
	// new: kept out before, let in by the list that names it; its second
	// question asks for a read, then it is answered from the watch. A
	// bound, polled.
	dnstest.Eventually(t, func() bool {
		m, err := ask(d.UDP, "new.service.consul.", dns.TypeA)
		return err == nil && m.Rcode == dns.RcodeSuccess && slices.Equal(sortedAddresses(m), []string{"127.0.0.33"})
	}, 10*time.Second, "new, registered after the restart, answered from the watch")
	t.Logf("agent up %v after SIGTERM; new answered %v after its registration",
		up.Sub(down).Round(time.Millisecond), time.Since(registered).Round(time.Millisecond))
	webAnswered("after the restart")
	// The watch index follows the new agent, whose indexes are all lower
	// than the old one's: not kept at the old value until a watch passes it.
	dnstest.Eventually(t, func() bool {
		v, _ := readMetric(t, d, "towerd_consul_watch_index")
		return v > 0 && v < float64(oldIndex)
	}, 10*time.Second, fmt.Sprintf("towerd_consul_watch_index below the old agent's %d", oldIndex))
	reads := towerdMetric(t, d, "towerd_consul_watch_empty_reads_total")
	proxy.reset()
	// gone was in the list before the restart; the new one lacks it.
	// First reads are made one at a time in the order asked for: the read
	// of witness (listed) is made after any of theirs would have been.
	// Rounds, not one: just after a restart the agent may still fail a
	// query now and then (the gate then closes for a probe interval and
	// the names asked meanwhile go to its DNS unread), and each round asks
	// for gone before witness.
	rounds := 0
	dnstest.Eventually(t, func() bool {
		rounds++
		askTwice("gone")
		for i := range 20 {
			askTwice(fmt.Sprint("later", i))
		}
		askTwice("witness")
		v, _ := readMetric(t, d, "towerd_consul_watch_watched_services")
		return v == 3
	}, 10*time.Second, "witness, listed, watched")
	t.Logf("witness watched after %d rounds of questions", rounds)
	for path := range proxy.paths(false) {
		if strings.Contains(path, "/gone") || strings.Contains(path, "/later") {
			t.Errorf("after the restart towerd read %s: the list is stale", path)
		}
	}
	if n := towerdMetric(t, d, "towerd_consul_watch_empty_reads_total"); n != reads {
		t.Errorf("empty reads %v after names the new list lacks, want %v", n, reads)
	}
}

// httpCounter is a TCP proxy in front of the agent's HTTP API that notes
// the first request line of every connection: while the agent is away a
// connection carries one request, refused (reset) at once, so the lines
// it notes then are towerd's attempts, each with its path.
type httpCounter struct {
	addr   string
	target string
	mu     sync.Mutex
	tried  map[string]int // request path → connections whose agent was away
	seen   map[string]int // request path → connections (the first request of each)
	nFail  int
}

func startHTTPCounter(t *testing.T, target string) *httpCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &httpCounter{addr: ln.Addr().String(), target: target, tried: map[string]int{}, seen: map[string]int{}}
	var wg sync.WaitGroup
	var conns sync.Map
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			cc, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(cc, nil)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conns.Delete(cc)
				p.serve(cc, &conns)
			}()
		}
	}()
	return p
}

func (p *httpCounter) serve(cc net.Conn, conns *sync.Map) {
	defer cc.Close()
	br := bufio.NewReader(cc)
	line, err := br.ReadString('\n')
	if err != nil {
		return
	}
	path := line
	if f := strings.Fields(line); len(f) > 1 {
		path, _, _ = strings.Cut(f[1], "?")
	}
	p.mu.Lock()
	p.seen[path]++
	p.mu.Unlock()
	ac, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		p.mu.Lock()
		p.tried[path]++
		p.nFail++
		p.mu.Unlock()
		_ = cc.(*net.TCPConn).SetLinger(0) // a reset, as near a refusal as a proxy gets
		return
	}
	conns.Store(ac, nil)
	defer conns.Delete(ac)
	defer ac.Close()
	if _, err := io.WriteString(ac, line); err != nil {
		return
	}
	go func() {
		_, _ = io.Copy(cc, ac)
		cc.Close()
	}()
	_, _ = io.Copy(ac, br)
}

func (p *httpCounter) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tried, p.seen, p.nFail = map[string]int{}, map[string]int{}, 0
}

func (p *httpCounter) failed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nFail
}

// paths returns the paths of the attempts while the agent was away
// (failed) or of every connection's first request (all).
func (p *httpCounter) paths(failed bool) map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.seen
	if failed {
		m = p.tried
	}
	return maps.Clone(m)
}
