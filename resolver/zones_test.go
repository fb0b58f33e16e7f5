package resolver

import (
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/upstream"
)

// startFuncUpstream runs handler as a DNS server on 127.0.0.1 (UDP; the
// replies here never need TCP) until the test ends and returns its address.
func startFuncUpstream(t *testing.T, handler dns.HandlerFunc) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: handler}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

// zonesEnv is a handler behind a real listener (UDP and TCP) forwarding
// each zone to its own upstream group.
type zonesEnv struct {
	h       *Handler
	udp     string
	tcp     string
	cache   *cache.Cache
	clock   *fakeClock
	servers map[string]string // zone → upstream address
}

// newZonesEnv starts one loopback upstream per zone, answering with its
// handler, and towerd's handler over them with a cache of cacheCfg (its
// clock is the env's).
func newZonesEnv(t *testing.T, zones map[string]dns.HandlerFunc, cacheCfg cache.Config, tweak func(*Config)) *zonesEnv {
	t.Helper()
	e := &zonesEnv{clock: newFakeClock(), servers: map[string]string{}}
	cfg := Config{
		ServeStale:         true,
		StaleClientTimeout: 1800 * time.Millisecond,
		StaleAnswerTTL:     30 * time.Second,
		FailureRecheck:     30 * time.Second,
		Now:                e.clock.Now,
	}
	for name, handler := range zones {
		addr := startFuncUpstream(t, handler)
		e.servers[name] = addr
		g, err := upstream.NewGroup(name, []string{addr}, upstream.GroupOptions{MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		cfg.Zones = append(cfg.Zones, Zone{Name: name, Upstream: g})
	}
	if tweak != nil {
		tweak(&cfg)
	}
	if cacheCfg.Capacity == 0 {
		cacheCfg.Capacity = 100
	}
	cacheCfg.Now = e.clock.Now
	c, err := cache.New(cacheCfg)
	if err != nil {
		t.Fatal(err)
	}
	e.cache = c
	h, err := NewHandler(cfg, c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	e.h = h
	addrs := serve(t, &Server{Handler: h})
	e.udp, e.tcp = addrs["udp"], addrs["tcp"]
	return e
}

// exchange sends m over network ("udp" or "tcp") and returns the reply and
// its size on the wire.
func (e *zonesEnv) exchange(t *testing.T, network string, m *dns.Msg) (*dns.Msg, int) {
	t.Helper()
	addr := e.udp
	if network == "tcp" {
		addr = e.tcp
	}
	co, err := dns.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	co.SetDeadline(time.Now().Add(5 * time.Second))
	if err := co.WriteMsg(m); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, dns.MaxMsgSize)
	n, err := co.Read(buf)
	if err != nil {
		t.Fatalf("%s %v: %v", network, m.Question[0], err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		t.Fatal(err)
	}
	return r, n
}

// ask sends name qtype with EDNS (no DO) over UDP.
func (e *zonesEnv) ask(t *testing.T, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(1232, false)
	r, _ := e.exchange(t, "udp", m)
	return r
}

// answerWith is an upstream handler that replies with the records rrs (in
// presentation format) in the answer section, and ns in authority.
func answerWith(t *testing.T, rcode int, answer []string, ns ...string) dns.HandlerFunc {
	t.Helper()
	a, n := mustRRs(t, answer...), mustRRs(t, ns...)
	return func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Rcode = rcode
		m.Answer, m.Ns = a, n
		w.WriteMsg(m)
	}
}

func mustRRs(t *testing.T, ss ...string) []dns.RR {
	t.Helper()
	var out []dns.RR
	for _, s := range ss {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("dns.NewRR(%q): %v", s, err)
		}
		out = append(out, rr)
	}
	return out
}

// rrStrings is a section in presentation format, for comparisons.
func rrStrings(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		out = append(out, rr.String())
	}
	return out
}
