package consul

import (
	"errors"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestParseServiceQuery(t *testing.T) {
	cases := []struct {
		name  string
		qtype uint16
		want  serviceQuery
		ok    bool
	}{
		{"web.service.consul.", dns.TypeA, serviceQuery{service: "web"}, true},
		{"Web.Service.CONSUL.", dns.TypeA, serviceQuery{service: "web"}, true},
		{"web.service.dc1.consul.", dns.TypeA, serviceQuery{service: "web", dc: "dc1"}, true},
		{"web.service.dc1.dc.consul.", dns.TypeA, serviceQuery{service: "web", dc: "dc1"}, true},
		{"v1.web.service.consul.", dns.TypeSRV, serviceQuery{service: "web", tag: "v1"}, true},
		{"a.b.web.service.consul.", dns.TypeA, serviceQuery{service: "web", tag: "a.b"}, true},
		{"_web._v1.service.consul.", dns.TypeSRV, serviceQuery{service: "web", tag: "v1"}, true},
		{"_web._tcp.service.consul.", dns.TypeSRV, serviceQuery{service: "web"}, true},
		{"_web._tcp.consul.", dns.TypeSRV, serviceQuery{service: "web"}, true},
		{"_web._tcp.consul.", dns.TypeA, serviceQuery{}, false},
		{"web.service.peer1.peer.consul.", dns.TypeA, serviceQuery{}, false},
		{"vm.node.consul.", dns.TypeA, serviceQuery{}, false},
		{"web.query.consul.", dns.TypeA, serviceQuery{}, false},
		{"web.connect.consul.", dns.TypeA, serviceQuery{}, false},
		{"service.consul.", dns.TypeA, serviceQuery{}, false},
		{"web.service.example.org.", dns.TypeA, serviceQuery{}, false},
		{"consul.", dns.TypeA, serviceQuery{}, false},
	}
	for _, tc := range cases {
		got, ok := parseServiceQuery(tc.name, tc.qtype, "consul.")
		if ok != tc.ok || got != tc.want {
			t.Errorf("parse(%s %s) = %+v, %v; want %+v, %v", tc.name, dns.TypeToString[tc.qtype], got, ok, tc.want, tc.ok)
		}
	}
}

// ask is Answer without the why: what the resolver asks, as the tests
// read it.
func ask(w *Watcher, q dns.Question) (m *dns.Msg, stale, ok bool) {
	m, stale, _, ok = w.Answer(q)
	return m, stale, ok
}

func question(name string, qtype uint16) dns.Question {
	return dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET}
}

func answerSet(m *dns.Msg) []string {
	s := rrStrings(m.Answer)
	sort.Strings(s)
	return s
}

// TestLookupStaleAndExpiry: records lost with the agent are served marked
// stale for up to MaxStale, then no more; contact again makes them fresh.
func TestLookupStaleAndExpiry(t *testing.T) {
	clk := newFakeClock()
	w, err := New(Config{Address: "127.0.0.1:1", MaxStale: 30 * time.Second, AnswerTTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.clock = clk
	w.info.Store(&agentInfo{datacenter: "dc1", domain: "consul."})
	w.store.set("web", []instance{web1, web2}, nil)
	markWatched(w, "web")

	lookup := func() (*dns.Msg, bool, bool) { return ask(w, question("web.service.consul.", dns.TypeA)) }
	m, stale, ok := lookup()
	if !ok || stale || !slices.Equal(answerSet(m), []string{"web.service.consul. 5 IN A 127.0.0.1",
		"web.service.consul. 5 IN A 127.0.0.10"}) {
		t.Fatalf("fresh lookup: ok=%v stale=%v %v", ok, stale, m)
	}
	w.store.contact("web", true, clk.Now())
	clk.Advance(30 * time.Second)
	if _, stale, ok := lookup(); !ok || !stale {
		t.Errorf("at the maximum stale age: ok=%v stale=%v, want served stale", ok, stale)
	}
	clk.Advance(time.Millisecond)
	if _, _, ok := lookup(); ok {
		t.Error("past the maximum stale age: still answered from the watch")
	}
	w.store.contact("web", false, clk.Now())
	if _, stale, ok := lookup(); !ok || stale {
		t.Errorf("after contact: ok=%v stale=%v, want fresh", ok, stale)
	}
}

func TestLookupCoverage(t *testing.T) {
	w, err := New(Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := ask(w, question("web.service.consul.", dns.TypeA)); ok {
		t.Error("answered before the agent was read")
	}
	w.info.Store(&agentInfo{datacenter: "dc1", domain: "consul."})
	w.store.set("web", []instance{web1, web2}, nil)
	markWatched(w, "web")
	for _, tc := range []struct {
		q  dns.Question
		ok bool
	}{
		{question("web.service.consul.", dns.TypeA), true},
		{question("web.service.dc1.consul.", dns.TypeSRV), true},
		{question("primary.web.service.consul.", dns.TypeA), true},
		{question("web.service.consul.", dns.TypeAAAA), true}, // NODATA from memory
		{question("web.service.dc2.consul.", dns.TypeA), false},
		{question("nope.web.service.consul.", dns.TypeA), false}, // no instance has the tag
		{question("db.service.consul.", dns.TypeA), false},       // not watched
		{question("web.service.consul.", dns.TypeTXT), false},
		{question("vm.node.consul.", dns.TypeA), false},
	} {
		m, _, ok := ask(w, tc.q)
		if ok != tc.ok {
			t.Errorf("%s %s: ok=%v, want %v", tc.q.Name, dns.TypeToString[tc.q.Qtype], ok, tc.ok)
		}
		if ok && tc.q.Qtype == dns.TypeAAAA && (len(m.Answer) != 0 || len(m.Ns) != 1 || m.Ns[0].Header().Rrtype != dns.TypeSOA) {
			t.Errorf("AAAA of an IPv4-only service: %v, want NODATA with an SOA", m)
		}
	}
}

// TestWatcherFollowsCatalog runs the whole watch against the fake API: first
// sync, an instance change, a service leaving the list, and an ACL refusal
// that leaves the records served stale and the state saying why.
func TestWatcherFollowsCatalog(t *testing.T) {
	f := newFakeAPI(t)
	f.setSelf(reply{status: http.StatusForbidden}) // a token without agent:read
	f.script(servicesPath,
		reply{index: 5, body: body("web", "db")},
	)
	f.script("/v1/health/service/web",
		reply{index: 5, body: []any{entry("n1", "10.0.0.1", "web1", "", 80, nil)}},
		reply{index: 6, body: []any{entry("n1", "10.0.0.1", "web1", "", 80, nil),
			entry("n2", "10.0.0.2", "web2", "", 80, nil)}},
	)
	f.script("/v1/health/service/db", reply{index: 5, body: []any{}})
	clk := newFakeClock()
	// The catalog mode (consul.services = ["*"]) follows the service list.
	w := newTestWatcher(t, f, Config{MaxStale: time.Minute, Services: []string{WatchAll}}, clk, noJitter)
	runWatcher(t, w)
	f.waitQueries(t, "/v1/health/service/web", 3) // the change is in, the third query blocks
	m, stale, ok := ask(w, question("web.service.consul.", dns.TypeA))
	if !ok || stale || len(m.Answer) != 2 {
		t.Fatalf("after the change: ok=%v stale=%v %v", ok, stale, m)
	}
	if _, _, ok := ask(w, question("db.service.consul.", dns.TypeA)); ok {
		t.Error("db has no healthy instance, yet it is answered from the watch")
	}
	st := w.State()
	if st.Datacenter != "dc1" || st.Domain != "consul." || !st.Synced || !st.Connected || st.Watched != 2 ||
		st.Services != 1 || st.Instances != 2 || st.LastIndex != 5 {
		t.Errorf("state %+v", st)
	}
	for _, r := range f.queries("/v1/health/service/web") {
		if r.cached || !r.stale {
			t.Errorf("health query %+v: want ?stale and no ?cached", r)
		}
	}

	// The token is revoked: every query is refused from now on. The blocked
	// queries return with the first refusal; the service loops then wait
	// for the agent at the gate, one of them probing, and block again when
	// the refusals run out.
	denied := reply{status: http.StatusForbidden}
	f.waitQueries(t, "/v1/health/service/db", 2)
	f.script("/v1/health/service/db", denied)
	f.script("/v1/health/service/web", denied)
	f.script(servicesPath, denied, denied, denied)
	f.waitQueries(t, servicesPath, 5)
	waitState(t, w, "web's loop refused", func(State) bool {
		_, stale, _ := ask(w, question("web.service.consul.", dns.TypeA))
		return stale
	})
	st = waitState(t, w, "the refusals counted", func(s State) bool { return errors.Is(s.LastErr, ErrACL) })
	_, stale, ok = ask(w, question("web.service.consul.", dns.TypeA))
	if !errors.Is(st.LastErr, ErrACL) || !stale {
		t.Fatalf("after the refusals: ok=%v stale=%v state %+v", ok, stale, st)
	}
	if !ok || st.Connected || st.Errors == 0 {
		t.Errorf("after the ACL refusal: ok=%v state %+v", ok, st)
	}
}

// Before the agent was read Answer answers nothing, and Covers says so;
// with the datacenter not known yet every service name reaches Answer,
// whose questions ask for the watch that learns it. The rest:
// TestCoversWhatTheWatchHolds.
func TestCoversBeforeTheAgent(t *testing.T) {
	w, err := New(Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if w.Covers([]byte("web.service.consul.")) {
		t.Error("covers names before the agent was asked")
	}
	w.info.Store(&agentInfo{domain: "consul."}) // datacenter not known yet
	for name, want := range map[string]bool{
		"web.service.consul.":            true,
		"v1.web.service.consul.":         true,
		"_web._tcp.consul.":              true,
		"web.service.dc1.consul.":        false,
		"web.service.peer1.peer.consul.": false,
		"vm.node.consul.":                false,
		"web.consul.":                    false,
		"notconsul.":                     false,
		"web.service.xconsul.":           false,
	} {
		if got := w.Covers([]byte(name)); got != want {
			t.Errorf("without a datacenter: Covers(%q) = %v, want %v", name, got, want)
		}
	}
}
