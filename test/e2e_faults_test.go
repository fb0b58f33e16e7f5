package test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
	"github.com/towerd/towerd/test/faultproxy"
)

// faultStack is a towerd whose zone "." goes through the fault proxy to a
// test upstream (zone "consul." to an upstream of its own).
type faultStack struct {
	up    *testUpstream
	proxy *faultproxy.Proxy
	d     *towerd
}

// startFaultStack starts the three parts; the seed is logged, so a failure
// can be replayed with the same fates.
func startFaultStack(t *testing.T, faults faultproxy.Faults, seed uint64, extraArgs ...string) faultStack {
	t.Helper()
	up, consul := newTestUpstream(t), newTestUpstream(t)
	p, err := faultproxy.New(faultproxy.Options{Target: up.Addr, Faults: faults, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	t.Logf("fault proxy %s → %s, seed %d, faults %+v", p.Addr(), up.Addr, seed, faults)
	args := append([]string{"-config", "", "-listen", "127.0.0.1:0", "-upstream", p.Addr(),
		"-consul-dns", consul.Addr}, extraArgs...)
	return faultStack{up: up, proxy: p, d: startTowerd(t, args...)}
}

// askUDP is one EDNS query over UDP with the client's own timeout and no retry.
func askUDP(addr, name string, timeout time.Duration) (*dns.Msg, error) {
	c := &dns.Client{Net: "udp", Timeout: timeout}
	m, _, err := c.Exchange(query(name, dns.TypeA, true), addr)
	return m, err
}

// Bounds for TestBlackholedUpstream. The RSS bound is generous because the
// daemon under test carries the race detector, whose shadow memory grows
// with every goroutine and allocation; a leak of one goroutine or buffer
// per query (thousands in the window) would still cross it.
const (
	blackholeWindow    = 30 * time.Second
	goroutineSlack     = 10       // admin and timer goroutines that come and go
	rssGrowthBound     = 64 << 20 // bytes, after the window versus before it
	settleDeadline     = 20 * time.Second
	correctnessTimeout = 5 * time.Second // a client as patient as glibc: the assertions are about answers, not speed
)

// TestBlackholedUpstream (issue 7, test 2): after warm-up the upstream is
// black-holed for 30 s. Every name seen before is answered throughout,
// stale with its TTL 0 (a stale TTL is never above the answer's own) and
// EDE 3; an unseen name gets SERVFAIL; afterwards the daemon's goroutines
// and memory are back where they were.
func TestBlackholedUpstream(t *testing.T) {
	t.Parallel()
	s := startFaultStack(t, faultproxy.Faults{}, 2)
	const names = 20
	var seen []string
	for i := range names {
		name := fmt.Sprintf("bh%02d.example.", i)
		// TTL 0 (Consul's default): stored already expired, so every answer
		// in the window must be a stale one.
		s.up.Add(t, fmt.Sprintf("%s 0 IN A 192.0.2.%d", name, i+1))
		if m, err := askUDP(s.d.UDP, name, correctnessTimeout); err != nil || m.Rcode != dns.RcodeSuccess {
			t.Fatalf("warm-up %s: %v %v", name, m, err)
		}
		seen = append(seen, name)
	}
	_, before := scrape(t, s.d.Admin)
	goroutinesBefore := sample(before, "go_goroutines", nil)
	rssBefore := sample(before, "process_resident_memory_bytes", nil)

	s.proxy.SetBlackhole(true)
	window := time.NewTimer(blackholeWindow)
	defer window.Stop()
	windowOver := make(chan struct{})
	go func() { <-window.C; close(windowOver) }()

	// One asker per name, each asking every 250 ms until the window ends.
	var answered, failures atomic.Int64
	var wg sync.WaitGroup
	for i, name := range seen {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				m, err := askUDP(s.d.UDP, name, correctnessTimeout)
				ok := err == nil && m.Rcode == dns.RcodeSuccess &&
					slices.Equal(addresses(m.Answer), []string{fmt.Sprintf("192.0.2.%d", i+1)}) &&
					m.Answer[0].Header().Ttl == staleTTL(0) && slices.Contains(ede(m), edeStaleAnswer)
				if ok {
					answered.Add(1)
				} else if failures.Add(1) <= 5 {
					t.Errorf("%s during the black hole: %v %v; want the stale answer, TTL %d, EDE %d", name, m, err, staleTTL(0), edeStaleAnswer)
				}
				select {
				case <-windowOver:
					return
				case <-tick.C:
				}
			}
		}()
	}

	start := time.Now()
	m, err := askUDP(s.d.UDP, "never-seen.example.", correctnessTimeout)
	elapsed := time.Since(start)
	if err != nil || m.Rcode != dns.RcodeServerFailure {
		t.Errorf("unseen name during the black hole: %v %v; want SERVFAIL", m, err)
	}
	t.Logf("unseen name: SERVFAIL after %v (query_timeout and client response timer: 1.8s)", elapsed.Round(time.Millisecond))
	wg.Wait()
	s.proxy.SetBlackhole(false)
	t.Logf("%d stale answers over %v, %d failures; proxy %+v", answered.Load(), blackholeWindow, failures.Load(), s.proxy.Stats())
	if answered.Load() < names {
		t.Errorf("only %d answers in the window, want at least one per name", answered.Load())
	}

	// Upstream work started in the window ends within upstream.timeout;
	// wait for it, then compare.
	var g, rss, inflight float64
	defer func() {
		if t.Failed() {
			t.Logf("last sample: goroutines %v (before %v), in flight %v", g, goroutinesBefore, inflight)
		}
	}()
	dnstest.Eventually(t, func() bool {
		_, after := scrape(t, s.d.Admin)
		g, rss = sample(after, "go_goroutines", nil), sample(after, "process_resident_memory_bytes", nil)
		inflight = sample(after, "towerd_inflight_resolutions", nil)
		return g <= goroutinesBefore+goroutineSlack && inflight == 0
	}, settleDeadline, "the window's upstream work to end (goroutines back, nothing in flight)")
	t.Logf("goroutines %v before, %v after; RSS %.1f MiB before, %.1f MiB after",
		goroutinesBefore, g, rssBefore/(1<<20), rss/(1<<20))
	if rss > rssBefore+rssGrowthBound {
		t.Errorf("RSS grew from %.1f MiB to %.1f MiB, bound +%d MiB", rssBefore/(1<<20), rss/(1<<20), rssGrowthBound>>20)
	}
}

// TestSpoofedRepliesThroughFaultProxy (issue 7, test 4): every reply comes
// after three forgeries (wrong ID, wrong question, wrong source port, all
// carrying faultproxy.ForgedAddr). Clients get the genuine answers, the
// cache holds them, and the forgeries towerd read are counted as mismatches.
func TestSpoofedRepliesThroughFaultProxy(t *testing.T) {
	t.Parallel()
	s := startFaultStack(t, faultproxy.Faults{WrongID: 1, WrongQuestion: 1, WrongSource: 1}, 4)
	const names = 10
	for i := range names {
		name := fmt.Sprintf("spoof%02d.example.", i)
		genuine := fmt.Sprintf("192.0.2.%d", 100+i)
		s.up.Add(t, fmt.Sprintf("%s 300 IN A %s", name, genuine))
		for round := range 2 { // the second answer comes from the cache
			m, err := askUDP(s.d.UDP, name, correctnessTimeout)
			if err != nil || m.Rcode != dns.RcodeSuccess || !slices.Equal(addresses(m.Answer), []string{genuine}) {
				t.Fatalf("%s round %d: %v %v; want %s (%s is forged)", name, round, m, err, genuine, faultproxy.ForgedAddr)
			}
		}
		var doc struct {
			Entries []struct {
				Answer []string `json:"answer"`
			} `json:"entries"`
		}
		body := controlGet(t, s.d.Control, "/cache?name="+url.QueryEscape(name)+"&type=A")
		if err := json.Unmarshal(body, &doc); err != nil || len(doc.Entries) != 1 {
			t.Fatalf("/cache?name=%s: %v\n%s", name, err, body)
		}
		cached := strings.Join(doc.Entries[0].Answer, "\n")
		if !strings.Contains(cached, genuine) || strings.Contains(cached, faultproxy.ForgedAddr) {
			t.Errorf("cache holds %q for %s, want %s only", cached, name, genuine)
		}
	}

	st := s.proxy.Stats()
	_, mfs := scrape(t, s.d.Admin)
	mismatches := sample(mfs, "towerd_upstream_errors_total", map[string]string{"reason": "mismatch"})
	timeouts := sample(mfs, "towerd_upstream_errors_total", map[string]string{"reason": "timeout"})
	readable := float64(st.WrongID + st.WrongQuestion)
	t.Logf("proxy %+v; towerd counted %v mismatches, %v timeouts", st, mismatches, timeouts)
	if st.WrongID < names || st.WrongQuestion < names || st.WrongSource < names {
		t.Fatalf("the proxy sent too few forgeries: %+v", st)
	}
	// Wrong-source forgeries never reach towerd: its upstream socket is
	// connected, and the kernel drops datagrams from any other address. The
	// others arrive ahead of the genuine reply on the attempt's socket, so
	// when every name took one attempt, towerd read every one of them. A
	// retransmission (an RTO that ran out on a loaded machine) has a socket
	// and forgeries of its own, closed unread when the other attempt's
	// genuine reply wins, and counts as superseded, not as a timeout: this
	// test flaked beside CPU hogs while it keyed the exact count on
	// timeouts == 0 (issue 33).
	switch {
	case st.Queries == names && mismatches != readable:
		t.Errorf("towerd_upstream_errors_total{reason=\"mismatch\"} = %v, want %v (wrong ID + wrong question sent)", mismatches, readable)
	case mismatches < 1 || mismatches > readable:
		t.Errorf("towerd_upstream_errors_total{reason=\"mismatch\"} = %v, want between 1 and %v", mismatches, readable)
	}
}
