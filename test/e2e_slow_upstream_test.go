package test

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// delayedUpstream is a loopback DNS server (UDP) that answers every name
// with an A record after that name's delay: fast, then slower and slower,
// the day an upstream turns slow but keeps answering. It counts queries per
// name and tells the test when a name's first reply went out.
type delayedUpstream struct {
	Addr string

	mu      sync.Mutex
	delays  map[string]time.Duration
	counts  map[string]int
	replied map[string]chan struct{}
	stop    chan struct{}
}

func newDelayedUpstream(t *testing.T) *delayedUpstream {
	t.Helper()
	u := &delayedUpstream{
		delays: map[string]time.Duration{}, counts: map[string]int{},
		replied: map[string]chan struct{}{}, stop: make(chan struct{}),
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Addr = pc.LocalAddr().String()
	srv := &dns.Server{PacketConn: pc, Handler: u}
	started, served := make(chan struct{}), make(chan error, 1)
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { served <- srv.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-served:
		t.Fatalf("delayed upstream: %v", err)
	}
	t.Cleanup(func() {
		close(u.stop) // let go of replies still being delayed
		_ = srv.Shutdown()
		<-served
	})
	return u
}

// set gives name a delay and returns a channel closed when its first reply
// has been sent.
func (u *delayedUpstream) set(name string, delay time.Duration) <-chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.delays[name] = delay
	u.replied[name] = make(chan struct{})
	return u.replied[name]
}

func (u *delayedUpstream) count(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.counts[name]
}

func (u *delayedUpstream) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	name := strings.ToLower(q.Question[0].Name)
	u.mu.Lock()
	u.counts[name]++
	delay, replied := u.delays[name], u.replied[name]
	u.mu.Unlock()
	if delay > 0 {
		// The delay is the fault under test, not a synchronisation.
		select {
		case <-time.After(delay):
		case <-u.stop:
			return
		}
	}
	r := new(dns.Msg)
	r.SetReply(q)
	r.Answer = []dns.RR{&dns.A{
		Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
		A:   net.IPv4(192, 0, 2, 80),
	}}
	_ = w.WriteMsg(r)
	u.mu.Lock()
	if replied != nil {
		select {
		case <-replied:
		default:
			close(replied)
		}
	}
	u.mu.Unlock()
}

// TestSlowUpstreamIsAnswered is issue 11's slow day: after fast replies the
// upstream takes 250 ms, 400 ms, 700 ms, 1.5 s and 3 s per name. With the
// default configuration (query_timeout 1.8 s, max_attempts 3) a client with
// a 2 s timeout gets NOERROR on its first try for every name up to 1.5 s,
// the upstream never sees more than 3 queries per name, and the 3 s name,
// too slow for the client's first try, is answered on its retry from what
// the late reply left behind, without asking the upstream again.
func TestSlowUpstreamIsAnswered(t *testing.T) {
	t.Parallel()
	up := newDelayedUpstream(t)
	consul := newTestUpstream(t)
	d := startTowerd(t, "-config", "", "-listen", "127.0.0.1:0",
		"-upstream", up.Addr, "-consul-dns", consul.Addr)
	client := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	ask := func(name string) (*dns.Msg, error) {
		reply, _, err := client.Exchange(query(name, dns.TypeA, true), d.UDP)
		return reply, err
	}
	const maxAttempts = 3 // upstream.max_attempts's default

	for i := range 5 {
		name := fmt.Sprintf("fast%d.slow.test.", i)
		if reply, err := ask(name); err != nil || reply.Rcode != dns.RcodeSuccess {
			t.Fatalf("%s: %v, %v; want NOERROR", name, reply, err)
		}
	}
	for _, delay := range []time.Duration{250 * time.Millisecond, 400 * time.Millisecond, 700 * time.Millisecond, 1500 * time.Millisecond} {
		name := fmt.Sprintf("d%dms.slow.test.", delay.Milliseconds())
		up.set(name, delay)
		reply, err := ask(name)
		if err != nil || reply.Rcode != dns.RcodeSuccess || len(reply.Answer) != 1 {
			t.Errorf("%s (upstream takes %s): %v, %v; want NOERROR with its A record on the first try", name, delay, reply, err)
		}
		if n := up.count(name); n > maxAttempts {
			t.Errorf("%s: upstream saw %d queries, want at most %d", name, n, maxAttempts)
		}
	}

	const slowest = "d3000ms.slow.test."
	replied := up.set(slowest, 3*time.Second)
	if reply, err := ask(slowest); err == nil && reply.Rcode == dns.RcodeSuccess {
		t.Logf("%s answered on the first try", slowest) // a slow machine; not wrong
	}
	select {
	case <-replied:
	case <-time.After(10 * time.Second):
		t.Fatalf("upstream never replied for %s", slowest)
	}
	sent := up.count(slowest)
	reply, err := ask(slowest)
	if err != nil || reply.Rcode != dns.RcodeSuccess || len(reply.Answer) != 1 {
		t.Fatalf("%s on the retry: %v, %v; want NOERROR from the late reply", slowest, reply, err)
	}
	if n := up.count(slowest); n != sent || n > maxAttempts {
		t.Errorf("%s: upstream saw %d queries, then %d after the retry; want at most %d and none for the retry",
			slowest, sent, n, maxAttempts)
	}
}
