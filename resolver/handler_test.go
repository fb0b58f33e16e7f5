package resolver

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/test/dnstest"
	"github.com/towerd/towerd/upstream"
)

func TestTTLCountsDownOnHits(t *testing.T) {
	e := newEnv(t, nil)
	if got := ttlOf(t, e.query("count.example.")); got != 300 {
		t.Fatalf("first answer TTL = %d, want 300", got)
	}
	e.clock.Advance(10500 * time.Millisecond)
	if got := ttlOf(t, e.query("count.example.")); got != 290 {
		t.Fatalf("TTL after 10.5s = %d, want 290", got)
	}
	if n := e.up.queries.Load(); n != 1 {
		t.Fatalf("upstream saw %d queries, want 1", n)
	}
}

// RFC 8767: stale answers while the upstream is gone, until max stale age.
func TestServeStaleUntilMaxAge(t *testing.T) {
	e := newEnv(t, nil)
	e.query("stale.example.")
	e.up.stop() // the port is closed: refreshing fails with a network error
	e.clock.Advance(301 * time.Second)

	r := e.query("stale.example.")
	if r.Rcode != dns.RcodeSuccess || ttlOf(t, r) != 30 {
		t.Fatalf("stale answer: rcode %s TTL %d, want NOERROR TTL 30", dns.RcodeToString[r.Rcode], ttlOf(t, r))
	}
	if !hasEDE(r, dns.ExtendedErrorCodeStaleAnswer) {
		t.Fatalf("stale answer lacks EDE 3: %v", r)
	}

	e.clock.Advance(24 * time.Hour) // now past expiry + max stale age
	if r := e.query("stale.example."); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("after max stale age: rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
}

// RFC 8767 §4: after a failed refresh the upstream is left alone for the
// failure recheck time.
func TestFailureRecheck(t *testing.T) {
	e := newEnv(t, nil)
	e.query("recheck.example.")
	e.up.mode.Store("servfail")
	// Past the client response timer, so the first client waits for the
	// failing refresh instead of getting stale at once (staleAtOnce).
	e.clock.Advance(302 * time.Second)

	for i, want := range []int64{2, 2, 2} { // one refresh attempt, then none
		r := e.query("recheck.example.")
		if ttlOf(t, r) != 30 {
			t.Fatalf("query %d: TTL %d, want stale 30", i, ttlOf(t, r))
		}
		if n := e.up.queries.Load(); n != want {
			t.Fatalf("query %d: upstream saw %d queries, want %d", i, n, want)
		}
	}
	e.clock.Advance(31 * time.Second)
	e.query("recheck.example.")
	if n := e.up.queries.Load(); n != 3 {
		t.Fatalf("after the recheck time upstream saw %d queries, want 3", n)
	}
}

func TestNXDOMAINReplacesStaleAndIsNotCached(t *testing.T) {
	e := newEnv(t, nil)
	e.query("gone.example.")
	e.up.mode.Store("nxdomain")
	// Past the client response timer: an entry that only just expired would
	// be answered stale at once (staleAtOnce) while the refresh runs.
	e.clock.Advance(302 * time.Second)
	for i := range 2 {
		if r := e.query("gone.example."); r.Rcode != dns.RcodeNameError {
			t.Fatalf("query %d: rcode %s, want NXDOMAIN", i, dns.RcodeToString[r.Rcode])
		}
	}
	if n := e.up.queries.Load(); n != 3 {
		t.Fatalf("upstream saw %d queries, want 3 (NXDOMAIN never cached)", n)
	}
	e.up.stop()
	if r := e.query("gone.example."); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("after NXDOMAIN the old entry came back stale: %v", r)
	}
}

// Immediate mode answers stale at once and refreshes in the background.
func TestStaleImmediateMode(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.StaleClientTimeout = 0 })
	e.query("now.example.")
	e.up.mode.Store("hold")
	t.Cleanup(func() { close(e.up.release) })
	e.clock.Advance(301 * time.Second)
	<-e.up.arrived // the warm-up query

	if got := ttlOf(t, e.query("now.example.")); got != 30 {
		t.Fatalf("TTL %d, want stale 30 while the refresh is held", got)
	}
	<-e.up.arrived // the background refresh did reach the upstream
}

// An entry that only just expired is answered stale at once, and the
// refresh behind it fills the cache. The client response timer is an hour
// here, so a client made to wait for the held refresh would time out.
func TestStaleAtOnceJustExpired(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.StaleClientTimeout = time.Hour })
	e.query("just.example.")
	<-e.up.arrived
	e.up.mode.Store("hold")
	e.clock.Advance(301 * time.Second) // expired 1 s ago, TTL 300 s

	if got := ttlOf(t, e.query("just.example.")); got != 30 {
		t.Fatalf("TTL %d, want the stale answer's 30 at once", got)
	}
	<-e.up.arrived // the refresh reached the upstream
	e.up.mode.Store("answer")
	close(e.up.release) // it answers now
	for e.h.Inflight() != 0 {
		runtime.Gosched()
	}
	if got := ttlOf(t, e.query("just.example.")); got != 300 {
		t.Fatalf("TTL %d after the refresh, want the fresh 300", got)
	}
}

// The client response timer runs from the refresh's start: a client that
// joins a refresh older than the timer gets the stale answer at once
// instead of a whole timer of its own (here an hour: made to wait, the
// client would time out).
func TestStaleTimerRunsFromRefreshStart(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.StaleClientTimeout = time.Hour })
	e.query("joined.example.")
	e.clock.Advance(3 * time.Hour) // expired long ago: no stale at once
	release := make(chan struct{})
	defer close(release)
	key := cache.NewKey("joined.example.", dns.TypeA, dns.ClassINET, false, false)
	fl, _, _ := e.h.flights.join(key, 10, resolution{}, false, false) // never started: ended below
	go func() {
		<-release
		fl.finish(outcome{err: context.Canceled})
	}()
	e.h.flights.mu.Lock()                       // the handler reads it after its own join
	fl.started = time.Now().Add(-2 * time.Hour) // running past the timer
	e.h.flights.mu.Unlock()

	if got := ttlOf(t, e.query("joined.example.")); got != 30 {
		t.Fatalf("TTL %d, want the stale answer's 30 at once", got)
	}
}

// The client response timer: a held upstream does not keep a client with a
// stale answer waiting past StaleClientTimeout, and the client gets it
// then, not before: the timer is the handler's one deadline heap on the
// clock (issue 33), stepped here.
func TestStaleAfterClientTimer(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.StaleClientTimeout, c.Clock = 50*time.Millisecond, envClock })
	e.query("slow.example.")
	e.up.mode.Store("hold")
	t.Cleanup(func() { close(e.up.release) })
	e.clock.Advance(301 * time.Second)

	answered := make(chan *dns.Msg, 1)
	go func() { answered <- e.query("slow.example.") }()
	// Armed: the refresh's upstream call (its RTO), the client's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.clock.WaitTimers(ctx, 2); err != nil {
		t.Fatalf("the client never waited: %d timers armed: %v", e.clock.Timers(), err)
	}
	e.clock.Advance(50*time.Millisecond - 1)
	select {
	case m := <-answered:
		t.Fatalf("answered before the client timer ran out: %v", m)
	default: // nothing fired: the client still waits
	}
	e.clock.Advance(1)
	if got := ttlOf(t, <-answered); got != 30 {
		t.Fatalf("TTL %d, want stale 30", got)
	}
}

func TestPrefetchOncePerKey(t *testing.T) {
	e := newEnv(t, nil)
	e.query("pre.example.")
	<-e.up.arrived
	e.up.mode.Store("hold")
	t.Cleanup(func() { close(e.up.release) })

	e.clock.Advance(291 * time.Second) // 9 s left of 300: inside the last tenth
	for i := range 3 {
		if got := ttlOf(t, e.query("pre.example.")); got != 9 {
			t.Fatalf("hit %d: TTL %d, want 9 from the cache", i, got)
		}
	}
	<-e.up.arrived // the prefetch
	if n := e.up.queries.Load(); n != 2 {
		t.Fatalf("upstream saw %d queries, want 2 (one prefetch for three hits)", n)
	}
}

// The prefetch window: the last tenth of the TTL, or the last second for
// short TTLs (at most a quarter of the TTL).
func TestWantsPrefetch(t *testing.T) {
	const s, ms = time.Second, time.Millisecond
	on := &settings{Config: Config{Prefetch: true}}
	for _, tt := range []struct {
		ttl, remaining time.Duration
		want           bool
	}{
		{300 * s, 31 * s, false},
		{300 * s, 30 * s, true}, // the last tenth
		{10 * s, 1001 * ms, false},
		{10 * s, s, true},
		{4 * s, 1001 * ms, false},
		{4 * s, s, true}, // the last second, a quarter of 4 s
		{2 * s, 501 * ms, false},
		{2 * s, 500 * ms, true}, // a quarter of 2 s, not the last second
		{0, 0, false},           // TTL 0 is never fresh, never prefetched
	} {
		if got := on.wantsPrefetch(tt.ttl, tt.remaining); got != tt.want {
			t.Errorf("wantsPrefetch(ttl %v, remaining %v) = %v, want %v", tt.ttl, tt.remaining, got, tt.want)
		}
	}
	off := &settings{Config: Config{Prefetch: false}}
	if off.wantsPrefetch(300*s, s) {
		t.Error("prefetch with Prefetch off")
	}
}

// An entry just expired is answered stale at once while it is refreshed;
// one expired longer than the client response timer ago, or stored with
// TTL 0, waits for the timer (RFC 8767 §5).
func TestStaleAtOnce(t *testing.T) {
	const s, ms = time.Second, time.Millisecond
	st := &settings{Config: Config{StaleClientTimeout: 1800 * ms}}
	for _, tt := range []struct {
		ttl, expired time.Duration
		want         bool
	}{
		{2 * s, 0, true},
		{2 * s, 1799 * ms, true},
		{2 * s, 1800 * ms, false},
		{300 * s, 1 * s, true},
		{300 * s, 10 * s, false},
		{1 * s, 1500 * ms, true}, // a short TTL: the timer still bounds it
		{0, 0, false},            // TTL 0: never at once
	} {
		if got := st.staleAtOnce(tt.ttl, tt.expired); got != tt.want {
			t.Errorf("staleAtOnce(ttl %v, expired %v) = %v, want %v", tt.ttl, tt.expired, got, tt.want)
		}
	}
}

func TestPrefetchOff(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Prefetch = false })
	e.query("nopre.example.")
	e.clock.Advance(291 * time.Second)
	e.query("nopre.example.")
	if n := e.up.queries.Load(); n != 1 {
		t.Fatalf("upstream saw %d queries, want 1", n)
	}
}

// Over the in-flight cap a query is answered at once, not queued.
func TestInflightCapAnswersSERVFAIL(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxInflight = 1 })
	e.up.mode.Store("hold")
	released := sync.OnceFunc(func() { close(e.up.release) })
	t.Cleanup(released)

	done := make(chan *dns.Msg)
	go func() { done <- e.query("first.example.") }()
	<-e.up.arrived // the one slot is taken
	if r := e.query("second.example."); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("over the cap: rcode %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
	if e.h.Inflight() != 1 {
		t.Fatalf("in flight = %d, want 1", e.h.Inflight())
	}
	released()
	if r := <-done; r.Rcode != dns.RcodeSuccess {
		t.Fatalf("first query: rcode %s", dns.RcodeToString[r.Rcode])
	}
}

func TestCoalescing(t *testing.T) {
	e := newEnv(t, nil)
	e.up.mode.Store("hold")
	released := sync.OnceFunc(func() { close(e.up.release) })
	t.Cleanup(released)

	const n = 50
	answers := make(chan *dns.Msg, n)
	for range n {
		go func() { answers <- e.query("same.example.") }()
	}
	<-e.up.arrived
	released()
	for range n {
		if r := <-answers; r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("answer %v", r)
		}
	}
	if got := e.up.queries.Load(); got != 1 {
		t.Fatalf("upstream saw %d queries, want 1", got)
	}
}

// deadUpstream never answers and says all its servers are down, as an
// upstream.Group does after repeated failures. Its resolutions end with
// their context (shutdown).
type deadUpstream struct{ asked chan struct{} }

func (d deadUpstream) StartWire(_ *upstream.WireCall, q upstream.WireQuery, recv upstream.WireReceiver) {
	d.asked <- struct{}{}
	go func() {
		<-q.Ctx.Done()
		recv.ReceiveWire(upstream.WireReply{}, q.Ctx.Err())
	}()
}
func (deadUpstream) Address() string { return "dead" }
func (deadUpstream) AllDown() bool   { return true }

// AllDownSignal: already all down, so no client ever waits for the signal.
func (deadUpstream) AllDownSignal() <-chan struct{} { return nil }

func (deadUpstream) RecoveredSince(time.Time) bool { return false }

var (
	_ Upstream = deadUpstream{}
	_ Upstream = downingUpstream{}
)

// When every server of the zone is known down, a client with a stale answer
// gets it at once: the client timers here are an hour, so waiting them out
// would fail the query (the client gives up after 5 s).
func TestStaleAtOnceWhenUpstreamKnownDown(t *testing.T) {
	dead := deadUpstream{asked: make(chan struct{}, 1)}
	e := newEnv(t, func(c *Config) {
		c.Zones = []Zone{{Name: ".", Upstream: dead}}
		c.QueryTimeout, c.StaleClientTimeout, c.UpstreamTimeout = time.Hour, time.Hour, time.Hour
	})
	e.seedStale("down.example.", "192.0.2.9", 300)
	if got := ttlOf(t, e.query("down.example.")); got != 30 {
		t.Fatalf("TTL %d, want the stale answer's 30", got)
	}
	<-dead.asked // the refresh still went out, as a probe
}

// seedStale stores an A answer with TTL ttl for name and lets it expire
// two hours ago (the fake clock moves past it; longer ago than the client
// timers of these tests, so it is not answered stale at once for having
// just expired): stale material only.
func (e *env) seedStale(name, ip string, ttl int) {
	e.t.Helper()
	reply := new(dns.Msg)
	reply.SetQuestion(name, dns.TypeA)
	rr, _ := dns.NewRR(fmt.Sprintf("%s %d IN A %s", name, ttl, ip))
	reply.Answer = []dns.RR{rr}
	if ok, why := dnstest.SetMsg(e.h.cache, cache.NewKey(name, dns.TypeA, dns.ClassINET, false, false), reply); !ok {
		e.t.Fatalf("seeding the cache: %s", why)
	}
	e.clock.Advance(time.Duration(ttl)*time.Second + 2*time.Hour)
}

// downingUpstream hangs like deadUpstream, but its servers count as healthy
// until the test closes down: an upstream.Group whose last server is marked
// down while a client waits for a refresh.
type downingUpstream struct {
	deadUpstream
	down chan struct{}
}

func (d downingUpstream) AllDown() bool {
	select {
	case <-d.down:
		return true
	default:
		return false
	}
}

func (d downingUpstream) AllDownSignal() <-chan struct{} { return d.down }

// A client already waiting for a refresh gets its stale answer the moment
// the zone is known down, not when its client response timer (an hour here;
// the client gives up after 5 s) runs out (issue 7, test 7).
func TestStaleWhenUpstreamGoesDownWhileWaiting(t *testing.T) {
	up := downingUpstream{deadUpstream: deadUpstream{asked: make(chan struct{}, 1)}, down: make(chan struct{})}
	e := newEnv(t, func(c *Config) {
		c.Zones = []Zone{{Name: ".", Upstream: up}}
		c.QueryTimeout, c.StaleClientTimeout, c.UpstreamTimeout = time.Hour, time.Hour, time.Hour
	})
	e.seedStale("going.example.", "192.0.2.10", 300)
	type result struct {
		m   *dns.Msg
		err error
	}
	answers := make(chan result, 1)
	go func() {
		m := new(dns.Msg)
		m.SetQuestion("going.example.", dns.TypeA)
		m.SetEdns0(1232, false)
		r, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(m, e.addr)
		answers <- result{r, err}
	}()
	<-up.asked // the refresh is out and the client waits on it
	select {
	case r := <-answers:
		t.Fatalf("answered %v, %v before the zone went down", r.m, r.err)
	default:
	}
	close(up.down)
	r := <-answers
	if r.err != nil {
		t.Fatalf("no answer after the zone went down: %v", r.err)
	}
	if got := ttlOf(t, r.m); got != 30 || !hasEDE(r.m, dns.ExtendedErrorCodeStaleAnswer) {
		t.Fatalf("TTL %d, EDE %v; want the stale answer (TTL 30, EDE 3)", got, hasEDE(r.m, dns.ExtendedErrorCodeStaleAnswer))
	}
}

// TestMissAfterFlightEnded is TestCoalescing's race made certain: a client
// whose lookup missed just before a resolution for its question stored the
// answer and ended reaches planMiss after the flight is gone. It must get
// the stored answer, not start a second resolution.
func TestMissAfterFlightEnded(t *testing.T) {
	e := newEnv(t, nil)
	if r := e.query("late.example."); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("first answer %v", r)
	}
	s := e.h.settings.Load()
	key := cache.NewKey("late.example.", dns.TypeA, dns.ClassINET, false, false)
	fl, plan := e.h.planMiss(s, s.router.route(key.Name), key, false, time.Time{}, s.Now(), planStart, searchNone)
	if plan != missWait {
		t.Fatalf("plan %v, want missWait", plan)
	}
	waitFlight(e.h, fl)
	if fl.err != nil || fl.msg == nil || len(fl.msg.Answer) != 1 {
		t.Fatalf("flight msg %v err %v", fl.msg, fl.err)
	}
	if got := e.up.queries.Load(); got != 1 {
		t.Fatalf("upstream saw %d queries, want 1", got)
	}
}

// The one stale TTL (issue 23): serve_stale.answer_ttl (30 s), never more
// than the answer had fresh, whether it comes from the cache (a TTL-300
// entry: 30; a TTL-5 one: 5; Consul's TTL 0: 0) or from pushed records
// (their own TTL, capped the same way).
func TestOneStaleTTL(t *testing.T) {
	dead := deadUpstream{asked: make(chan struct{}, 8)}
	e := newEnv(t, func(c *Config) {
		c.Zones = []Zone{{Name: ".", Upstream: dead}}
		c.QueryTimeout, c.StaleClientTimeout, c.UpstreamTimeout = time.Hour, time.Hour, time.Hour
	})
	for _, tc := range []struct {
		ttl  int
		want uint32
	}{{300, 30}, {5, 5}, {0, 0}} {
		name := fmt.Sprintf("ttl%d.example.", tc.ttl)
		e.seedStale(name, "192.0.2.11", tc.ttl)
		m := e.query(name)
		if got := ttlOf(t, m); got != tc.want || !hasEDE(m, dns.ExtendedErrorCodeStaleAnswer) {
			t.Errorf("stale entry of TTL %d: TTL %d, want %d with EDE 3", tc.ttl, got, tc.want)
		}
	}
	for _, tc := range []struct {
		own, want uint32
	}{{0, 0}, {7, 7}, {60, 30}} {
		e2 := newEnv(t, func(c *Config) {
			c.Records = staleRecords{ttl: tc.own}
		})
		m := e2.query("pushed.example.")
		if got := ttlOf(t, m); got != tc.want || !hasEDE(m, dns.ExtendedErrorCodeStaleAnswer) {
			t.Errorf("stale pushed records of TTL %d: TTL %d, want %d with EDE 3", tc.own, got, tc.want)
		}
	}
}

// staleRecords answers every A question with one record of its TTL,
// marked stale: a Consul watch that lost its agent.
type staleRecords struct{ ttl uint32 }

func (s staleRecords) Answer(q dns.Question) (*dns.Msg, bool, string, bool) {
	m := new(dns.Msg)
	rr, _ := dns.NewRR(fmt.Sprintf("%s %d IN A 192.0.2.12", q.Name, s.ttl))
	m.Answer = []dns.RR{rr}
	return m, true, "stale", true
}

func (staleRecords) Covers([]byte) bool { return true }

// recoveringUpstream is deadUpstream whose servers came back at back.
type recoveringUpstream struct {
	deadUpstream
	back time.Time
}

func (r recoveringUpstream) AllDown() bool                   { return false }
func (r recoveringUpstream) RecoveredSince(t time.Time) bool { return r.back.After(t) }

// The failure recheck (RFC 8767 §4) spares an upstream that fails, not one
// that is back: a refresh failed, so the stale answer comes without asking
// again; once a server of the zone has come back since, the next question
// asks (issue 23: forwarded Consul answers stayed stale 30 s after the agent
// was back). "Since" is since the failed refresh was asked: a server back
// while its packets, sent before, went unanswered ends the recheck too
// (issue 33: the drill beside CPU hogs saw no recovery, every name that
// had a refresh in flight as the upstream came back stale 30 s more).
func TestFailureRecheckEndsWhenUpstreamIsBack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		back  time.Duration // after the failure; < 0: before it
		asked bool
	}{
		{"not back", -time.Hour, false},
		{"back since", time.Second, true},
		{"back while the failed refresh waited", -time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := recoveringUpstream{deadUpstream: deadUpstream{asked: make(chan struct{}, 4)}}
			e := newEnv(t, func(c *Config) {
				c.Zones = []Zone{{Name: ".", Upstream: &up}}
				c.QueryTimeout, c.StaleClientTimeout = time.Hour, 0
				c.FailureRecheck = 30 * time.Second
			})
			e.seedStale("recheck.example.", "192.0.2.13", 300)
			key := cache.NewKey("recheck.example.", dns.TypeA, dns.ClassINET, false, false)
			// Asked 3 s ago, failed now.
			e.h.cache.MarkRefreshFailed(key, e.clock.Now().Add(-3*time.Second))
			up.back = e.clock.Now().Add(tc.back)
			s := e.h.settings.Load()
			res, _ := e.h.cache.Get(key)
			_, plan := e.h.planMiss(s, s.router.route(key.Name), key, res.Msg != nil, res.RefreshFailedAt, e.clock.Now(), planLook, searchNone)
			if asked := plan != missFallback; asked != tc.asked {
				t.Errorf("plan %v: asks again %v, want %v", plan, asked, tc.asked)
			}
		})
	}
}

// joinedWriter is a memWriter that carries the flight the fast path
// joined, as the UDP and TCP readers' writers do (flightJoiner).
type joinedWriter struct {
	memWriter
	joined *flight
}

func (w *joinedWriter) joinedFlight() *flight { return w.joined }

var _ flightJoiner = (*joinedWriter)(nil)

// The stale join (issue 34): a client whose stale answer must wait for
// the refresh is declined by the fast path after it started that refresh;
// when the refresh ends in NXDOMAIN before ServeDNS looks at the cache,
// ServeDNS finds no entry at all, and must still answer from that refresh
// rather than ask the upstream again. The window is forced here: the
// refresh ends between the fast path's decline and ServeDNS.
func TestStaleJoinAnsweredFromTheRefreshItStarted(t *testing.T) {
	e := newEnv(t, nil)
	e.query("gone.example.")
	e.up.mode.Store("nxdomain")
	e.clock.Advance(302 * time.Second) // past staleAtOnce: the client waits

	req := new(dns.Msg)
	req.SetQuestion("gone.example.", dns.TypeA)
	req.SetEdns0(1232, false)
	pkt, err := req.Pack()
	if err != nil {
		t.Fatal(err)
	}
	var q plainQuery
	from := netip.MustParseAddrPort("127.0.0.1:53000")
	if _, ok := e.h.answerPacket(nil, pkt, from, false, &q); ok {
		t.Fatal("the fast path answered a stale question whose client must wait")
	}
	if q.joined == nil {
		t.Fatal("the fast path declined without handing over the refresh it started")
	}
	waitFlight(e.h, q.joined) // the refresh ends in NXDOMAIN: the entry is gone

	w := &joinedWriter{joined: q.joined}
	e.h.ServeDNS(w, req)
	r := new(dns.Msg)
	if err := r.Unpack(w.reply); err != nil {
		t.Fatalf("reply: %v", err)
	}
	if r.Rcode != dns.RcodeNameError {
		t.Errorf("rcode %s, want the refresh's NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
	if n := e.up.queries.Load(); n != 2 {
		t.Errorf("upstream saw %d queries, want 2: the warm-up and the one refresh", n)
	}
}

// A stale question whose refresh stored a fresh entry just before the
// client joined gets a flight made of that entry (flights.join: no
// flights, no clock): staleWait must not read the flights' clock then
// (FuzzServeDNS found the nil dereference under -count=3), and the client
// takes the fresh answer at once.
func TestStaleWaitOnAFlightMadeOfAFreshEntry(t *testing.T) {
	e := newEnv(t, nil)
	s := e.h.settings.Load()
	zone := s.router.route("x.example.")
	fl := &flight{ended: true}
	if got := s.staleWait(fl, zone, 300*time.Second, time.Hour); got <= 0 {
		t.Errorf("staleWait = %v, want a wait (the flight's answer is here, not the stale one)", got)
	}
}
