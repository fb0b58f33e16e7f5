package resolver

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
	"github.com/towerd/towerd/test/faultproxy"
	"github.com/towerd/towerd/upstream"
)

// pickServer is an upstream answering every A question (TTL 300) behind a
// fault proxy that counts the queries per name.
func pickServer(t *testing.T, delay time.Duration, seed uint64) *faultproxy.Proxy {
	t.Helper()
	u := dnstest.NewUpstream(t)
	u.SetScript(func(q *dns.Msg, _ string) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
			A: net.IPv4(192, 0, 2, 1)}}
		return m
	})
	p, err := faultproxy.New(faultproxy.Options{Target: u.Addr, Faults: faultproxy.Faults{Delay: delay}, Seed: seed, CountNames: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// A prefetch and a stale answer's refresh are resolutions like a client's
// miss (issue 36, item 4): with the first listed server slow (40 ms) and
// the second fast, both go to the fast one, as the client's miss did. The
// slow one hears of the name only from an exploration or a hedge, asked
// beside the fast one (counted by the group). The handler's clock is the
// fake one (the entry's TTL is stepped, not waited for); the group's is
// the real one, and only counts are asserted.
func TestRefreshAndPrefetchAskTheFastServer(t *testing.T) {
	slow, fast := pickServer(t, 40*time.Millisecond, 1), pickServer(t, 0, 2)
	g, err := upstream.NewGroup(".", []string{slow.Addr(), fast.Addr()}, upstream.GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	e := newEnv(t, func(c *Config) { c.Zones = []Zone{{Name: ".", Upstream: g}} })

	// Each server is measured once, the slow (listed first) first.
	for i := range 4 {
		if r := e.query(fmt.Sprintf("w%d.example.", i)); r.Rcode != dns.RcodeSuccess {
			t.Fatalf("warm-up: %s", dns.RcodeToString[r.Rcode])
		}
	}
	st := g.Servers()
	if st[0].SRTT == 0 || st[1].SRTT == 0 || st[1].SRTT >= st[0].SRTT {
		t.Fatalf("estimates slow %s, fast %s: want both measured, the second faster", st[0].SRTT, st[1].SRTT)
	}
	const name = "pf.example."
	askedFast := func(n int, what string) {
		t.Helper()
		dnstest.Eventually(t, func() bool { return fast.Count(name) >= n }, 5*time.Second, what+" at the fast server")
		// Landed: the next step finds no resolution of it to join.
		dnstest.Eventually(t, func() bool { return e.h.flights.inflight.Load() == 0 }, 5*time.Second, what+" ended")
		h := g.Hedges()
		if got, beside := slow.Count(name), int(h.Explored+h.Sent); got > beside {
			t.Errorf("%s: the slow server was asked %d times, explorations and hedges %d: want it asked only beside the fast one", what, got, beside)
		}
	}
	if r := e.query(name); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("miss: %s", dns.RcodeToString[r.Rcode])
	}
	askedFast(1, "the miss")

	// 29 s of 300 left: the hit starts a prefetch.
	e.clock.Advance(271 * time.Second)
	if r := e.query(name); r.Rcode != dns.RcodeSuccess || ttlOf(t, r) > 30 {
		t.Fatalf("hit in the prefetch window: %v", r)
	}
	askedFast(2, "the prefetch")

	// Expired a minute ago: the question refreshes it.
	e.clock.Advance(360 * time.Second)
	if r := e.query(name); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("stale entry: %s", dns.RcodeToString[r.Rcode])
	}
	askedFast(3, "the refresh")
	if n := fast.Count(name); n != 3 {
		t.Errorf("fast server asked %d times, want 3: the miss, the prefetch, the refresh", n)
	}
}
