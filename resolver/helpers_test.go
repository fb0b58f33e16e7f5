package resolver

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/clock"
	"github.com/towerd/towerd/test/dnstest"
	"github.com/towerd/towerd/upstream"
)

// fakeClock is the clock of the handler and the cache: the kit's; tests
// move it instead of sleeping.
type fakeClock = dnstest.Clock

func newFakeClock() *fakeClock { return dnstest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) }

// testUpstream is the kit's upstream on 127.0.0.1 (UDP only) with one
// Script whose behaviour the test switches; it counts the queries it
// receives.
type testUpstream struct {
	*dnstest.Upstream
	addr    string
	queries atomic.Int64
	mode    atomic.Value // string: "answer", "servfail", "nxdomain", "hold"
	ttl     atomic.Uint32
	release chan struct{}
	arrived chan struct{} // one value per query received, if buffered room
}

func startUpstream(t *testing.T) *testUpstream {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &testUpstream{release: make(chan struct{}), arrived: make(chan struct{}, 100)}
	u.mode.Store("answer")
	u.ttl.Store(300)
	u.Upstream = dnstest.NewUpstreamOn(t, pc, nil)
	u.addr = u.Addr
	u.SetScript(u.answer)
	return u
}

// stop closes the server: its port then answers with ICMP unreachable.
func (u *testUpstream) stop() { u.Stop() }

// answer is the Script: the mode decides, an A question gets 192.0.2.1
// with the current TTL.
func (u *testUpstream) answer(r *dns.Msg, _ string) *dns.Msg {
	u.queries.Add(1)
	select {
	case u.arrived <- struct{}{}:
	default:
	}
	m := new(dns.Msg)
	m.SetReply(r)
	switch u.mode.Load().(string) {
	case "hold":
		select {
		case <-u.release:
		case <-u.Stopped():
			return nil
		}
	case "servfail":
		m.Rcode = dns.RcodeServerFailure
		return m
	case "nxdomain":
		m.Rcode = dns.RcodeNameError
		return m
	}
	q := r.Question[0]
	if q.Qtype == dns.TypeA {
		rr, _ := dns.NewRR(q.Name + " 300 IN A 192.0.2.1")
		rr.Header().Ttl = u.ttl.Load()
		m.Answer = append(m.Answer, rr)
	}
	return m
}

// envClock, set as a tweak's Config.Clock, runs the handler's timers and
// the env's upstream group's on the env's fake clock too (issue 33): the
// test then steps every timer. Otherwise they run on the wall clock, and
// only Now is the fake's.
var envClock clock.Clock = newFakeClock()

type env struct {
	t     *testing.T
	clock *fakeClock
	h     *Handler
	addr  string
	up    *testUpstream
}

// newEnv starts a handler behind a real UDP listener, forwarding "." to a
// test upstream, with tweak applied to the config.
func newEnv(t *testing.T, tweak func(*Config)) *env {
	return buildEnv(t, tweak, nil, nil)
}

// buildEnv is newEnv with an optional observer, and a hook that sees the
// handler and server before they serve (metrics instrument them there).
func buildEnv(t *testing.T, tweak func(*Config), obs Observer, prepare func(*Handler, *Server)) *env {
	t.Helper()
	clock := newFakeClock()
	up := startUpstream(t)
	g, err := upstream.NewGroup(".", []string{up.addr}, upstream.GroupOptions{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	c, err := cache.New(cache.Config{Capacity: 100, MaxStaleAge: 24 * time.Hour, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Zones:              []Zone{{Name: ".", Upstream: g}},
		ServeStale:         true,
		Prefetch:           true,
		StaleClientTimeout: 1800 * time.Millisecond,
		StaleAnswerTTL:     30 * time.Second,
		FailureRecheck:     30 * time.Second,
		Now:                clock.Now,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	if cfg.Clock == envClock {
		// The handler's timers and the group's on the fake clock too.
		cfg.Clock = clock
		stepped, err := upstream.NewGroup(".", []string{up.addr}, upstream.GroupOptions{MaxAttempts: 1, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stepped.Close() })
		for i := range cfg.Zones {
			if cfg.Zones[i].Upstream == g {
				cfg.Zones[i].Upstream = stepped
			}
		}
	}
	h, err := NewHandler(cfg, c, nil, obs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close) // runs after the server's cleanup below: drain, then stop flights
	srv := &Server{Handler: h}
	if prepare != nil {
		prepare(h, srv)
	}
	addrs := serve(t, srv)
	return &env{t: t, clock: clock, h: h, addr: addrs["udp"], up: up}
}

// serve binds srv on a free loopback port, serves it until the test ends and
// returns its address by network ("udp", "tcp").
func serve(t *testing.T, srv *Server) map[string]string {
	t.Helper()
	if err := srv.Listen([]string{"127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go srv.Serve(func() { close(ready) })
	<-ready
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	addrs := map[string]string{}
	for _, a := range srv.Addrs() {
		network, addr, _ := strings.Cut(a, "/")
		addrs[network] = addr
	}
	return addrs
}

// query asks name A over UDP with EDNS and returns the reply.
func (e *env) query(name string) *dns.Msg {
	e.t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.SetEdns0(1232, false)
	c := &dns.Client{Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, e.addr)
	if err != nil {
		e.t.Fatalf("query %s: %v", name, err)
	}
	return r
}

func ttlOf(t *testing.T, r *dns.Msg) uint32 {
	t.Helper()
	if len(r.Answer) == 0 {
		t.Fatalf("no answer in %v", r)
	}
	return r.Answer[0].Header().Ttl
}

func hasEDE(r *dns.Msg, code uint16) bool {
	opt := r.IsEdns0()
	if opt == nil {
		return false
	}
	for _, o := range opt.Option {
		if ede, ok := o.(*dns.EDNS0_EDE); ok && ede.InfoCode == code {
			return true
		}
	}
	return false
}

// overLoopback serves fn on a loopback upstream of the test kit and returns
// a group for zone over it: the upstream of a test that answers from a
// function (since issue 22 a zone's upstream is a Group: every resolution
// is the one the daemon runs, scrubber included). An error from fn is a
// SERVFAIL.
func overLoopback(tb testing.TB, zone string, fn dnstest.ExchangeFunc) *upstream.Group {
	tb.Helper()
	u := dnstest.NewUpstream(tb)
	u.SetScript(func(q *dns.Msg, _ string) *dns.Msg {
		m, err := fn(context.Background(), q)
		if err != nil || m == nil {
			m = new(dns.Msg)
			m.SetRcode(q, dns.RcodeServerFailure)
		}
		return m
	})
	g, err := upstream.NewGroup(zone, []string{u.Addr}, upstream.GroupOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.Close() })
	return g
}

// holdSlot makes a flight for key that never starts, holding one in-flight
// slot until the test ends (then it is ended, so the handler can close).
func holdSlot(tb testing.TB, h *Handler, key cache.Key) {
	tb.Helper()
	fl, started, ok := h.flights.join(key, h.settings.Load().MaxInflight, resolution{}, false, false)
	if !ok || !started {
		tb.Fatal("no slot to hold")
	}
	tb.Cleanup(func() { fl.finish(outcome{err: context.Canceled}) })
}

// waitFlight waits for fl to end, as a ServeDNS client with no deadline
// to speak of waits.
func waitFlight(h *Handler, fl *flight) {
	if w := h.flights.wait(fl, h.flights.clock.Now().Add(time.Hour)); w != nil {
		<-w.woken
		release(w)
	}
}
