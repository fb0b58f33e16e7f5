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

// The search-list rules (issue 28) against a real upstream on loopback:
// every name NXDOMAIN unless the test adds it, queries counted by name.

var searchDomains = []string{"corp.example", "ec2.internal"}

type searchEnv struct {
	t     *testing.T
	h     *Handler
	clock *fakeClock
	up    *dnstest.Upstream
	log   *queryLog
}

// knownRecords answers A questions for api.service.consul. (and NODATA
// for AAAA), as the Consul watch answers a watched service.
type knownRecords struct{}

func (knownRecords) Covers(name []byte) bool { return string(name) == "api.service.consul." }
func (knownRecords) Answer(q dns.Question) (*dns.Msg, bool, string, bool) {
	if q.Name != "api.service.consul." {
		return nil, false, "", false
	}
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Qtype)
	m.Response = true
	if q.Qtype == dns.TypeA {
		rr, _ := dns.NewRR("api.service.consul. 0 IN A 10.0.0.1")
		m.Answer = []dns.RR{rr}
	}
	return m, false, "watch", true
}

func newSearchEnv(t *testing.T, ndots int, tweak func(*Config)) *searchEnv {
	t.Helper()
	up := dnstest.NewUpstream(t)
	g, err := upstream.NewGroup(".", []string{up.Addr}, upstream.GroupOptions{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	clock := newFakeClock()
	c, err := cache.New(cache.Config{Capacity: 100, MaxStaleAge: time.Hour, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	log := &queryLog{}
	cfg := Config{
		Zones:      []Zone{{Name: ".", Upstream: g}},
		Records:    knownRecords{},
		ServeStale: true,
		Search:     []SearchList{{Domains: searchDomains, Ndots: ndots}},
		SearchHold: 500 * time.Millisecond,
		Now:        clock.Now,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	h, err := NewHandler(cfg, c, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return &searchEnv{t: t, h: h, clock: clock, up: up, log: log}
}

// ask sends name's question of qtype through the wire miss path (or a
// hit) when it takes it, else ServeDNS, and returns the reply and where
// it was observed as coming from.
func (e *searchEnv) ask(name string, qtype uint16) (*dns.Msg, string) {
	e.t.Helper()
	pkt := variant{name: name, qtype: qtype, edns: true, size: 1232, rd: true}.pack(e.t)
	rec := newMissRecorder()
	from := netip.MustParseAddrPort("127.0.0.1:5353")
	q := plainQuery{replier: rec}
	raw, ok := e.h.answerPacket(nil, pkt, from, false, &q)
	switch {
	case ok && len(raw) == 0:
		raw = rec.next(e.t)
	case !ok:
		raw = generalReplyFrom(e.h, pkt, from)
	}
	m := new(dns.Msg)
	if err := m.Unpack(raw); err != nil {
		e.t.Fatalf("%s: %v", name, err)
	}
	seen := e.log.take()
	if len(seen) != 1 {
		e.t.Fatalf("%s: %d observations: %v", name, len(seen), seen)
	}
	return m, seen[0].Source
}

// want asks and checks the rcode and the source.
func (e *searchEnv) want(name string, rcode int, source string) *dns.Msg {
	e.t.Helper()
	m, src := e.ask(name, dns.TypeA)
	if m.Rcode != rcode || (source != "" && src != source) {
		e.t.Errorf("%s: %s from %s, want %s from %s", name, dns.RcodeToString[m.Rcode], src, dns.RcodeToString[rcode], source)
	}
	return m
}

func (e *searchEnv) count(name string) int { return e.up.Count(name, dns.TypeA) }

// settled waits until no resolution runs: every reply the upstream sent
// has been settled.
func (e *searchEnv) settled() {
	e.t.Helper()
	dnstest.Eventually(e.t, func() bool { return e.h.Inflight() == 0 }, 10*time.Second, "every resolution to end")
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Rule 1 and 2: the first try of a bare name's lookup asks the later
// names in the same round, while its own reply is still held at the
// upstream; the later tries are answered with the round's NXDOMAINs; the
// next lookup asks every name again (NXDOMAIN is never cached).
func TestSearchRoundAsksAheadOnce(t *testing.T) {
	e := newSearchEnv(t, 1, nil)
	later := [2]<-chan struct{}{e.up.Arrived("db.ec2.internal.", 1), e.up.Arrived("db.", 1)}
	answered := [2]<-chan struct{}{e.up.Answered("db.ec2.internal.", 1), e.up.Answered("db.", 1)}
	_, release := e.up.Hold("db.corp.example.")
	first := make(chan *dns.Msg, 1)
	go func() { m, _ := e.ask("db.corp.example.", dns.TypeA); first <- m }()
	wait(t, later[0], "db.ec2.internal. asked ahead")
	wait(t, later[1], "db. asked ahead")
	// Both arrived while the first try's reply is held: one round.
	release()
	if m := <-first; m.Rcode != dns.RcodeNameError {
		t.Fatalf("first try: %s", dns.RcodeToString[m.Rcode])
	}
	wait(t, answered[0], "db.ec2.internal. answered")
	wait(t, answered[1], "db. answered")
	e.settled()
	for _, name := range []string{"db.ec2.internal.", "db."} {
		e.want(name, dns.RcodeNameError, SourceSearch)
	}
	// The wire miss path and ServeDNS give a held answer the same bytes.
	pkt := variant{name: "DB.ec2.internal.", qtype: dns.TypeA, edns: true, size: 1232, rd: true}.pack(t)
	from := netip.MustParseAddrPort("127.0.0.1:5353")
	rec := newMissRecorder()
	if _, ok := e.h.answerPacket(nil, pkt, from, false, &plainQuery{replier: rec}); !ok {
		t.Fatal("the wire miss path declined a held answer")
	}
	if diff, same := sameReply(rec.next(t), generalReplyFrom(e.h, pkt, from)); !same {
		t.Errorf("held answer, wire and ServeDNS: %s", diff)
	}
	e.log.take()
	for _, name := range []string{"db.corp.example.", "db.ec2.internal.", "db."} {
		if n := e.count(name); n != 1 {
			t.Errorf("%s asked %d times in one lookup, want 1", name, n)
		}
	}
	if got := e.h.searchStats.fromRound.Load(); got != 4 {
		t.Errorf("%d tries answered from the round, want 4", got)
	}

	// The next lookup: every name asked again.
	e.clock.Advance(100 * time.Millisecond)
	e.want("db.corp.example.", dns.RcodeNameError, SourceUpstream)
	e.want("db.ec2.internal.", dns.RcodeNameError, "")
	e.want("db.", dns.RcodeNameError, "")
	for _, name := range []string{"db.corp.example.", "db.ec2.internal.", "db."} {
		if n := e.count(name); n != 2 {
			t.Errorf("%s asked %d times in two lookups, want 2", name, n)
		}
	}
}

// A name that appears under a later domain while nothing in the lookup is
// known is seen by the next lookup at once: its round asks it again, and
// the later try waits for that resolution rather than take the old
// NXDOMAIN.
func TestSearchRoundSeesANewNameAtOnce(t *testing.T) {
	e := newSearchEnv(t, 1, nil)
	answered := e.up.Answered("db.ec2.internal.", 1)
	e.want("db.corp.example.", dns.RcodeNameError, SourceUpstream)
	wait(t, answered, "db.ec2.internal. answered")
	e.settled()
	e.want("db.ec2.internal.", dns.RcodeNameError, SourceSearch)

	e.up.Add(t, "db.ec2.internal. 300 IN A 192.0.2.7")
	e.want("db.corp.example.", dns.RcodeNameError, SourceUpstream)
	if m := e.want("db.ec2.internal.", dns.RcodeSuccess, ""); len(m.Answer) != 1 {
		t.Errorf("db.ec2.internal.: %v", m.Answer)
	}
}

// Rule 3: a lookup that ends at a name the node knows (the Consul watch
// answers api.service.consul.) gets its expansions' NXDOMAINs at once
// within the hold, TTLs counted down, asked again behind the answer once
// half the hold is gone; past the hold it waits for the upstream again.
func TestSearchHoldAnswersAheadOfAKnownName(t *testing.T) {
	e := newSearchEnv(t, 5, func(c *Config) { c.SearchHold = 4 * time.Second })
	const first, second = "api.service.consul.corp.example.", "api.service.consul.ec2.internal."
	answered := e.up.Answered(second, 1)
	e.want(first, dns.RcodeNameError, SourceUpstream)
	wait(t, answered, "the second expansion asked ahead")
	e.settled()
	e.want(second, dns.RcodeNameError, SourceSearch)
	e.want("api.service.consul.", dns.RcodeSuccess, SourceRecords)
	if n := e.up.Count("api.service.consul.", dns.TypeA); n != 0 {
		t.Errorf("the known name was asked upstream %d times", n)
	}

	// The next lookups, with the upstream holding every reply: answered
	// without waiting for it.
	_, release1 := e.up.Hold(first)
	_, release2 := e.up.Hold(second)
	defer release1()
	defer release2()
	e.clock.Advance(time.Second)
	m := e.want(first, dns.RcodeNameError, SourceSearch)
	if len(m.Ns) != 1 || m.Ns[0].Header().Ttl != 59 {
		t.Errorf("held NXDOMAIN 1 s old: authority %v, want the SOA with TTL 59", m.Ns)
	}
	if n := e.count(first); n != 1 {
		t.Errorf("%s asked again before half the hold: %d", first, n)
	}
	refreshed := e.up.Arrived(first, 1)
	e.clock.Advance(1500 * time.Millisecond) // 2.5 s: past half the hold
	e.want(first, dns.RcodeNameError, SourceSearch)
	wait(t, refreshed, "the refresh behind the held answer")
	e.want(second, dns.RcodeNameError, SourceSearch)
	if got := e.h.searchStats.fromHold.Load(); got != 3 {
		t.Errorf("%d answers from the hold, want 3", got)
	}

	// Past the hold (the refresh is still held upstream): the client
	// joins the resolution and waits for it.
	e.clock.Advance(2 * time.Second)
	done := make(chan int, 1)
	go func() { m, _ := e.ask(first, dns.TypeA); done <- m.Rcode }()
	select {
	case rc := <-done:
		t.Fatalf("past the hold the try was answered (%s) without the upstream", dns.RcodeToString[rc])
	case <-time.After(50 * time.Millisecond):
	}
	release1()
	if rc := <-done; rc != dns.RcodeNameError {
		t.Errorf("past the hold: %s", dns.RcodeToString[rc])
	}
}

// The price of rule 3: a name that appears ahead of the known one is
// answered NXDOMAIN until the refresh behind the hold brings it (at most
// the hold and a round trip), then from the cache.
func TestSearchHoldSeesANewNameAfterTheRefresh(t *testing.T) {
	e := newSearchEnv(t, 5, nil) // hold 500 ms
	const first = "api.service.consul.corp.example."
	e.want(first, dns.RcodeNameError, SourceUpstream)
	e.up.Add(t, first+" 300 IN A 192.0.2.9")
	e.clock.Advance(100 * time.Millisecond)
	e.want(first, dns.RcodeNameError, SourceSearch) // within half the hold: not asked again yet
	answered := e.up.Answered(first, 1)
	e.clock.Advance(200 * time.Millisecond)
	e.want(first, dns.RcodeNameError, SourceSearch) // asked again behind this answer
	wait(t, answered, "the refresh")
	e.settled()
	e.want(first, dns.RcodeSuccess, SourceCache)
}

// A name tried as it is first walks on only when it does not exist: its
// expansions are asked ahead only once a client asked its first one.
func TestSearchAsIsFirstNeedsAWalk(t *testing.T) {
	e := newSearchEnv(t, 1, nil)
	const name = "ghost.bench.test."
	e.want(name, dns.RcodeNameError, SourceUpstream)
	if n := e.h.searchStats.ahead.Load(); n != 0 {
		t.Fatalf("%d names asked ahead of a dotted name nobody walked", n)
	}
	answered := e.up.Answered(name+"ec2.internal.", 1)
	e.want(name+"corp.example.", dns.RcodeNameError, SourceUpstream)
	wait(t, answered, "the last expansion asked ahead")
	e.settled()
	e.want(name+"ec2.internal.", dns.RcodeNameError, SourceSearch)

	// The next lookup: the walk is known, the expansions go with the name.
	answered = e.up.Answered(name+"corp.example.", 1)
	arrived := e.up.Arrived(name+"ec2.internal.", 1)
	e.want(name, dns.RcodeNameError, SourceUpstream)
	wait(t, answered, "the first expansion asked ahead")
	wait(t, arrived, "the last expansion asked ahead")
	e.settled()
	e.want(name+"corp.example.", dns.RcodeNameError, SourceSearch)
	for _, n := range []string{name, name + "corp.example.", name + "ec2.internal."} {
		if c := e.count(n); c != 2 {
			t.Errorf("%s asked %d times in two lookups, want 2", n, c)
		}
	}
}

// Candidates take in-flight slots only while half the cap is free: on a
// bad day the client asks the rest itself, one by one, as without the rule.
func TestSearchAheadKeepsHalfTheCap(t *testing.T) {
	e := newSearchEnv(t, 1, func(c *Config) { c.MaxInflight = 4 })
	holdSlot(t, e.h, cache.NewKey("slot1.example.", dns.TypeA, dns.ClassINET, false, false))
	holdSlot(t, e.h, cache.NewKey("slot2.example.", dns.TypeA, dns.ClassINET, false, false))
	e.want("db.corp.example.", dns.RcodeNameError, SourceUpstream)
	if n := e.h.searchStats.ahead.Load(); n != 0 {
		t.Errorf("%d names asked ahead with half the cap taken", n)
	}
	if n := e.h.searchStats.skipped.Load(); n != 1 {
		t.Errorf("%d rounds counted skipped, want 1", n)
	}
	e.want("db.ec2.internal.", dns.RcodeNameError, SourceUpstream)
}

// Off (no lists), or for a type getaddrinfo does not walk, nothing is
// held or asked ahead.
func TestSearchRulesOff(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
		qtype uint16
	}{
		{"no lists", func(c *Config) { c.Search = nil }, dns.TypeA},
		{"MX", nil, dns.TypeMX},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSearchEnv(t, 1, tc.tweak)
			for range 2 {
				if m, src := e.ask("db.corp.example.", tc.qtype); m.Rcode != dns.RcodeNameError || src != SourceUpstream {
					t.Errorf("%s from %s", dns.RcodeToString[m.Rcode], src)
				}
			}
			if n := e.up.Count("db.corp.example.", tc.qtype); n != 2 {
				t.Errorf("asked %d times, want 2", n)
			}
			if n := e.h.searchStats.ahead.Load(); n != 0 || e.h.held.n.Load() != 0 {
				t.Errorf("%d asked ahead, %d held", n, e.h.held.n.Load())
			}
		})
	}
}

// With hold 0, nothing is answered from an earlier lookup: the known name
// does not shorten the next lookup's first try.
func TestSearchHoldZero(t *testing.T) {
	e := newSearchEnv(t, 5, func(c *Config) { c.SearchHold = 0 })
	const first = "api.service.consul.corp.example."
	e.want(first, dns.RcodeNameError, SourceUpstream)
	e.clock.Advance(time.Millisecond)
	e.want(first, dns.RcodeNameError, SourceUpstream)
	if n := e.count(first); n != 2 {
		t.Errorf("%s asked %d times in two lookups, want 2", first, n)
	}
}
