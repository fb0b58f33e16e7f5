package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/consultest"
	"github.com/towerd/towerd/test/dnstest"
)

// TestSearchListThroughGlibc is issue 28's day as glibc lives it:
// getent ahosts in a private mount namespace whose resolv.conf has two
// search domains, ndots:1 and then ndots:5 (Kubernetes'), through towerd
// on a 127.0.28.x address (port 53: glibc asks no other), whose zone "."
// is a loopback upstream answering every question 100 ms late and whose
// consul. is a real agent. The shared upstream logs when each question
// came and each reply left, so the rounds a lookup waited are counted
// from the order of those events, never from a clock; towerd's metrics
// say where each answer came from (counted before it is sent).
func TestSearchListThroughGlibc(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: unshare -m, bind mounts, port 53")
	}
	for _, tool := range []string{"unshare", "nsenter", "getent", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	agent := consultest.Start(t, consultest.Options{})
	register(t, agent.Client(""), &api.AgentServiceRegistration{ID: "api1", Name: "api-service", Address: "127.0.0.10", Port: 80})
	for i, ndots := range []int{1, 5} {
		t.Run("ndots"+strconv.Itoa(ndots), func(t *testing.T) {
			searchDay(t, agent, ndots, fmt.Sprintf("127.0.28.%d", i+1))
		})
	}
}

func searchDay(t *testing.T, agent *consultest.Agent, ndots int, listen string) {
	up := newSearchUpstream(t, 100*time.Millisecond)
	up.Add(t, "db.corp.example. 300 IN A 192.0.2.10", "web.ec2.internal. 300 IN A 192.0.2.11",
		"app.team.corp.example. 300 IN A 192.0.2.12")
	dir := t.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	nss := filepath.Join(dir, "nsswitch.conf")
	dnstest.WriteFile(t, resolv, fmt.Sprintf("nameserver %s\nsearch corp.example ec2.internal\noptions ndots:%d timeout:3 attempts:1\n", listen, ndots))
	dnstest.WriteFile(t, nss, "hosts: dns\n")
	// search.hold at its ceiling: a lookup here comes well within it of
	// the one before however loaded the machine (getent's start, two
	// scrapes), so "no wait once known" does not hang on the scheduler;
	// make bench measures the default.
	// The attempts' timeout floor at 2 s: a reply the loaded machine
	// hands towerd late is not resent, which would count as a round. No
	// hedges either, for the same reason: a hedge goes out at the server's
	// tail estimate, and a reply of this 100 ms upstream that the loaded
	// machine hands towerd late would be hedged after another name's reply
	// (hedging is issue 36's, tested in upstream and its own e2e test).
	cfg := writeConfig(t, "[search]\nhold = \"5s\"\nresolv_conf = \""+resolv+"\"\n[upstream]\nmin_attempt_timeout = \"2s\"\nhedge_budget = 0\n[consul]\n"+pins("api-service"))
	d := startConsulTowerd(t, agent, agent.DNSAddr, "-config", cfg, "-listen", listen+":53", "-upstream", up.Addr)
	ns := newNamespace(t, false, resolv, nss)

	// A lookup: getent's addresses, the shared upstream's rounds during it,
	// and towerd's answers to it: all of them, and those that waited for
	// the shared upstream (zone ".", source upstream).
	type lookup struct {
		addrs, canon    string
		ok              bool
		rounds          int
		answers, waited float64
	}
	counts := func() (answers, waited float64) {
		_, mfs := scrape(t, d.Admin)
		return sample(mfs, "towerd_responses_total", nil), sample(mfs, "towerd_responses_total", map[string]string{"zone": ".", "source": "upstream"})
	}
	do := func(name string) lookup {
		t.Helper()
		mark := up.mark()
		answers, waited := counts()
		out, err := ns.command("getent", "ahosts", name).Output()
		l := lookup{ok: err == nil, rounds: up.roundsSince(mark)}
		answersAfter, waitedAfter := counts()
		l.answers, l.waited = answersAfter-answers, waitedAfter-waited
		if err != nil {
			if ee, isExit := err.(*exec.ExitError); !isExit || ee.ExitCode() != 2 {
				t.Fatalf("getent ahosts %s: %v", name, err)
			}
		}
		var addrs []string
		for i, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && !slices.Contains(addrs, f[0]) {
				addrs = append(addrs, f[0])
			}
			if i == 0 && len(f) >= 3 {
				l.canon = f[2]
			}
		}
		l.addrs = strings.Join(addrs, " ")
		return l
	}

	for _, c := range []struct {
		name, addr, canon string
		firstRounds       int
	}{
		{"db", "192.0.2.10", "db.corp.example", 1},          // bare, under the first domain
		{"web", "192.0.2.11", "web.ec2.internal", 1},        // bare, under the second
		{"api-service.service.consul", "127.0.0.10", "", 1}, // Consul (pinned: watched from the start)
		// Dotted and under a search domain: at ndots:1 tried as it is
		// first, and the expansions are asked only once it is NXDOMAIN.
		{"app.team", "192.0.2.12", "app.team.corp.example", map[int]int{1: 2, 5: 1}[ndots]},
	} {
		first := do(c.name)
		if !first.ok || first.addrs != c.addr || (c.canon != "" && first.canon != c.canon) {
			t.Errorf("%s, first lookup: %v %q (%s), want %s (%s)", c.name, first.ok, first.addrs, first.canon, c.addr, c.canon)
		}
		if first.rounds > c.firstRounds {
			t.Errorf("%s, first lookup: %d upstream round trips, want at most %d", c.name, first.rounds, c.firstRounds)
		}
		// Once the answer is known, no lookup waits on the shared upstream.
		for i := range 10 {
			l := do(c.name)
			if !l.ok || l.addrs != c.addr {
				t.Errorf("%s, lookup %d: %v %q", c.name, i+2, l.ok, l.addrs)
			}
			if l.waited != 0 || l.answers == 0 {
				t.Errorf("%s, lookup %d: %v of %v answers waited for the shared upstream", c.name, i+2, l.waited, l.answers)
			}
		}
	}

	// A name that exists nowhere: every lookup asks each of its names
	// again (NXDOMAIN is never cached), in one round once its walk is
	// known.
	ghost := []string{"ghost.bench.test.", "ghost.bench.test.corp.example.", "ghost.bench.test.ec2.internal."}
	for n := 1; n <= 3; n++ {
		l := do("ghost.bench.test")
		if l.ok {
			t.Fatalf("ghost.bench.test found: %s", l.addrs)
		}
		up.settled(t)
		for _, name := range ghost {
			// At least once a lookup; more only when an attempt was resent
			// (its timeout at least upstream.min_attempt_timeout, 2 s here;
			// that each name is asked once per lookup is resolver's
			// TestSearchRoundAsksAheadOnce's, with one attempt).
			if got := up.Count(name, dns.TypeA); got < n {
				t.Errorf("after lookup %d of ghost.bench.test: %s A asked %d times, want %d", n, name, got, n)
			} else if got > n {
				t.Logf("after lookup %d of ghost.bench.test: %s A asked %d times (an attempt resent)", n, name, got)
			}
		}
		if want := map[bool]int{true: 2, false: 1}[n == 1 && ndots == 1]; l.rounds > want {
			t.Errorf("ghost.bench.test lookup %d: %d rounds, want at most %d", n, l.rounds, want)
		}
	}

	// Names that appear while a client keeps asking are seen by the first
	// lookup after: a Consul service, and a name under a search domain.
	for range 2 {
		if l := do("newsvc.service.consul"); l.ok {
			t.Fatalf("newsvc.service.consul found before it was registered: %s", l.addrs)
		}
	}
	registered := time.Now()
	register(t, agent.Client(""), &api.AgentServiceRegistration{ID: "newsvc1", Name: "newsvc", Address: "127.0.0.11", Port: 80})
	if l := do("newsvc.service.consul"); !l.ok || l.addrs != "127.0.0.11" {
		t.Errorf("newsvc.service.consul, the first lookup after its registration: %v %q", l.ok, l.addrs)
	} else {
		t.Logf("newsvc.service.consul answered %v after the registration began", time.Since(registered).Round(time.Millisecond))
	}
	t.Cleanup(func() { _ = agent.Client("").Agent().ServiceDeregister("newsvc1") })
	for range 2 {
		if l := do("newapp"); l.ok {
			t.Fatalf("newapp found before it exists: %s", l.addrs)
		}
	}
	up.Add(t, "newapp.ec2.internal. 300 IN A 192.0.2.13")
	if l := do("newapp"); !l.ok || l.addrs != "192.0.2.13" {
		t.Errorf("newapp, the first lookup after newapp.ec2.internal appeared: %v %q", l.ok, l.addrs)
	}
}

// searchUpstream is issue 28's shared resolver on loopback: the test
// kit's zone, every answer a fixed delay late, each question's arrival and
// each reply's departure logged in order.
type searchUpstream struct {
	*testUpstream
	delay  time.Duration
	mu     sync.Mutex
	events []upstreamEvent
	active int // questions not answered yet
	idle   chan struct{}
}

// upstreamEvent is a question that came, or a reply that left.
type upstreamEvent struct {
	reply bool
	qtype uint16
}

func newSearchUpstream(t *testing.T, delay time.Duration) *searchUpstream {
	u := &searchUpstream{testUpstream: newTestUpstream(t), delay: delay}
	u.SetScript(u.answer)
	return u
}

func (u *searchUpstream) answer(r *dns.Msg, _ string) *dns.Msg {
	u.mu.Lock()
	u.events = append(u.events, upstreamEvent{qtype: r.Question[0].Qtype})
	u.active++
	u.mu.Unlock()
	timer := time.NewTimer(u.delay) // the upstream's delay under test, not a synchronisation
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-u.Stopped():
		return nil
	}
	m := u.FromZone(r)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.events = append(u.events, upstreamEvent{reply: true, qtype: r.Question[0].Qtype})
	u.active--
	if u.active == 0 && u.idle != nil {
		close(u.idle)
		u.idle = nil
	}
	return m
}

// mark is where the next events will be.
func (u *searchUpstream) mark() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.events)
}

// roundsSince counts the rounds of questions since mark: a question that
// came after a reply of its type left begins a new one, and the lookup
// waited the most rounds of its types (glibc asks A and AAAA at once, and
// a loaded machine may hand towerd the AAAA question after the A's round
// was answered: that is no round the A half waited). A lookup that asks
// its names one after another waits one round each.
func (u *searchUpstream) roundsSince(mark int) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	most := 0
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		rounds, open := 0, false
		for _, e := range u.events[mark:] {
			switch {
			case e.qtype != qtype:
			case e.reply:
				open = false
			case !open:
				rounds++
				open = true
			}
		}
		most = max(most, rounds)
	}
	return most
}

// settled waits until every question the upstream has is answered: what
// towerd asked ahead behind a lookup is then counted.
func (u *searchUpstream) settled(t *testing.T) {
	t.Helper()
	u.mu.Lock()
	if u.active == 0 {
		u.mu.Unlock()
		return
	}
	if u.idle == nil {
		u.idle = make(chan struct{})
	}
	idle := u.idle
	u.mu.Unlock()
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream's questions were not answered within 10 s")
	}
}
