package resolver

import (
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/test/dnstest"
	"github.com/towerd/towerd/upstream"
)

// The fast path's stale answers (issue 22): written as bytes like a hit,
// held to ServeDNS's stale answers for the same entry, byte for byte after
// parsing, over UDP and TCP.

// keyOfPacket is the cache key of a query packet.
func keyOfPacket(tb testing.TB, pkt []byte) cache.Key {
	tb.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(pkt); err != nil {
		tb.Fatal(err)
	}
	do := false
	if opt := m.IsEdns0(); opt != nil {
		do = opt.Do()
	}
	q := m.Question[0]
	return cache.NewKey(q.Name, q.Qtype, q.Qclass, do, m.CheckingDisabled)
}

// staleAfterFailure expires every entry h holds for pkts (the clock past
// every TTL, within MaxStaleAge) and marks each one's refresh failed, so a
// question for one is answered stale at once, with no refresh (RFC 8767
// §4, the failure recheck), on every path.
func staleAfterFailure(tb testing.TB, h *Handler, clock *fakeClock, pkts [][]byte) {
	tb.Helper()
	clock.Advance(400 * time.Second)
	for _, pkt := range pkts {
		h.cache.MarkRefreshFailed(keyOfPacket(tb, pkt), clock.Now())
	}
}

// Every variant, expired, its refresh failed a moment ago: the fast path
// answers it stale exactly as ServeDNS does (TTL serve_stale.answer_ttl,
// EDE 3 for EDNS clients, the reply core's flags), over UDP and TCP, and
// asks no upstream.
func TestFastPathMatchesServeDNSStale(t *testing.T) {
	h, clock := diffHandler(t, nil)
	from := netip.MustParseAddrPort("127.0.0.1:53000")
	var pkts [][]byte
	for _, v := range variants() {
		pkt := v.pack(t)
		generalReply(h, pkt)
		pkts = append(pkts, pkt)
	}
	staleAfterFailure(t, h, clock, pkts)
	var q plainQuery
	answered := 0
	for i, v := range variants() {
		for _, tcp := range []bool{false, true} {
			before := h.cache.Stats().StaleHits
			reply, ok := h.answerPacket(nil, pkts[i], from, tcp, &q)
			if !ok {
				if tcp {
					t.Errorf("%+v: declined over TCP", v) // no size limit to decline for
				}
				continue
			}
			answered++
			if got := h.cache.Stats().StaleHits - before; got != 1 {
				t.Errorf("%+v: %d stale hits counted, want 1", v, got)
			}
			m := new(dns.Msg)
			if err := m.Unpack(reply); err != nil {
				t.Fatal(err)
			}
			if v.edns != hasEDE(m, dns.ExtendedErrorCodeStaleAnswer) {
				t.Errorf("%+v: EDE 3 %v, want %v", v, !v.edns, v.edns)
			}
			for _, rr := range append(append(m.Answer, m.Ns...), m.Extra...) {
				if rr.Header().Rrtype != dns.TypeOPT && rr.Header().Ttl != 30 {
					t.Errorf("%+v: %s has TTL %d, want the stale answer TTL 30", v, rr.Header().Name, rr.Header().Ttl)
				}
			}
			if diff, same := sameReply(reply, generalReplyOver(h, pkts[i], from, tcp)); !same {
				t.Errorf("%+v (tcp %v): %s", v, tcp, diff)
			}
		}
	}
	if answered < 300 {
		t.Errorf("only %d stale answers by the fast path", answered)
	}
	if n := h.Inflight(); n != 0 {
		t.Errorf("%d refreshes running, want none within the failure recheck", n)
	}
}

// silentZone is a handler of diffHandler's configuration whose zone "."
// is a group over u, warmed with pkt's answer, after which u drops every
// question for name: a refresh stays in flight.
func silentZone(t *testing.T, tweak func(*Config), name string, pkt []byte) (*Handler, *fakeClock, *dnstest.Upstream) {
	t.Helper()
	u := dnstest.NewUpstream(t)
	u.Add(t, name+" 300 IN A 192.0.2.7")
	g, err := upstream.NewGroup(".", []string{u.Addr}, upstream.GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	h, clock := diffHandlerWith(t, nil, func(c *Config) {
		c.Zones = []Zone{{Name: ".", Upstream: g}}
		if tweak != nil {
			tweak(c)
		}
	})
	if r := generalReply(h, pkt); len(r) == 0 {
		t.Fatal("no answer to warm the cache")
	}
	u.SetFault(name, dnstest.Fault{Drop: true})
	return h, clock, u
}

// An entry that expired a moment ago is answered stale at once by the fast
// path, which starts its refresh (RFC 8767 §5, immediate mode); ServeDNS,
// asked next, joins that refresh and gives the same stale answer.
func TestFastPathStaleAtOnceStartsRefresh(t *testing.T) {
	pkt := variant{name: "www.example.", qtype: dns.TypeA, edns: true, size: 1232, rd: true}.pack(t)
	h, clock, u := silentZone(t, nil, "www.example.", pkt)
	arrived := u.Arrived("www.example.", 1)
	clock.Advance(300*time.Second + 500*time.Millisecond) // expired half a second ago
	var q plainQuery
	reply, ok := h.answerPacket(nil, pkt, netip.MustParseAddrPort("127.0.0.1:53000"), false, &q)
	if !ok {
		t.Fatal("declined by the fast path")
	}
	<-arrived // the refresh asked the upstream
	if n := h.Inflight(); n != 1 {
		t.Fatalf("%d resolutions running, want the refresh", n)
	}
	m := new(dns.Msg)
	if err := m.Unpack(reply); err != nil {
		t.Fatal(err)
	}
	if ttlOf(t, m) != 30 || !hasEDE(m, dns.ExtendedErrorCodeStaleAnswer) {
		t.Fatalf("reply %v; want the stale answer (TTL 30, EDE 3)", m)
	}
	if diff, same := sameReply(reply, generalReply(h, pkt)); !same {
		t.Error(diff)
	}
	if n := h.Inflight(); n != 1 {
		t.Errorf("%d resolutions running after ServeDNS, want the one refresh", n)
	}
}

// An entry that expired long ago, with no failed refresh: the client waits
// for the refresh (the client response timer), which the fast path starts
// and leaves to ServeDNS; ServeDNS joins it and, the upstream silent,
// answers stale when the timer runs out.
func TestFastPathStaleWaitGoesToServeDNS(t *testing.T) {
	pkt := variant{name: "www.example.", qtype: dns.TypeA, edns: true, size: 1232, rd: true}.pack(t)
	h, clock, _ := silentZone(t, func(c *Config) { c.StaleClientTimeout = 50 * time.Millisecond }, "www.example.", pkt)
	clock.Advance(400 * time.Second)
	before := h.cache.Stats()
	var q plainQuery
	if _, ok := h.answerPacket(nil, pkt, netip.MustParseAddrPort("127.0.0.1:53000"), false, &q); ok {
		t.Fatal("answered by the fast path; the client waits for the refresh")
	}
	if n := h.Inflight(); n != 1 {
		t.Fatalf("%d resolutions running, want the refresh", n)
	}
	if got := h.cache.Stats(); got != before {
		t.Errorf("the declined query changed the counters: %+v, before %+v", got, before)
	}
	m := new(dns.Msg)
	if err := m.Unpack(generalReply(h, pkt)); err != nil {
		t.Fatal(err)
	}
	if ttlOf(t, m) != 30 || !hasEDE(m, dns.ExtendedErrorCodeStaleAnswer) {
		t.Fatalf("ServeDNS answered %v; want the stale answer after its timer", m)
	}
	if n := h.Inflight(); n != 1 {
		t.Errorf("%d resolutions running, want the one refresh", n)
	}
}
