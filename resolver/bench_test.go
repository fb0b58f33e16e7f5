package resolver

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/test/dnstest"
)

// The benchmarks of issue 6: what one query costs the handler, in memory (no
// socket). `make bench` runs them with -benchmem; the hit path's target is 0
// allocations.

// benchWriter is a dns.ResponseWriter that packs each reply into one reused
// buffer, so the benchmark counts the handler's allocations and the packing,
// not a copy of our own.
type benchWriter struct {
	buf   []byte
	reply []byte
}

var (
	benchClient = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53000}
	benchLocal  = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
)

func (w *benchWriter) LocalAddr() net.Addr  { return benchLocal }
func (w *benchWriter) RemoteAddr() net.Addr { return benchClient }
func (w *benchWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.PackBuffer(w.buf)
	if err != nil {
		return err
	}
	w.reply = b
	return nil
}
func (w *benchWriter) Write(b []byte) (int, error) { w.reply = b; return len(b), nil }
func (w *benchWriter) Close() error                { return nil }
func (w *benchWriter) TsigStatus() error           { return nil }
func (w *benchWriter) TsigTimersOnly(bool)         {}
func (w *benchWriter) Hijack()                     {}

// benchUpstream answers every A question at once with one record, TTL 3600.
var benchUpstream = dnstest.ExchangeFunc(func(_ context.Context, q *dns.Msg) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetReply(q)
	name := q.Question[0].Name
	m.Answer = []dns.RR{&dns.A{
		Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 3600},
		A:   net.IPv4(192, 0, 2, byte(len(name))),
	}}
	return m, nil
})

// benchHandler is the daemon's handler set-up (serve-stale, prefetch) over
// an in-memory upstream and a cache of capacity entries.
func benchHandler(b *testing.B, capacity int) *Handler {
	b.Helper()
	return benchHandlerOver(b, capacity, overLoopback(b, ".", benchUpstream))
}

// benchHandlerOver is benchHandler over the upstream u.
func benchHandlerOver(b *testing.B, capacity int, u Upstream) *Handler {
	b.Helper()
	c, err := cache.New(cache.Config{Capacity: capacity, MaxStaleAge: 24 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	h, err := NewHandler(Config{
		Zones:              []Zone{{Name: ".", Upstream: u}},
		ServeStale:         true,
		Prefetch:           true,
		StaleClientTimeout: 1800 * time.Millisecond,
		StaleAnswerTTL:     30 * time.Second,
		FailureRecheck:     30 * time.Second,
	}, c, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)
	return h
}

// benchQuery is what a stub resolver sends: one A question with EDNS.
func benchQuery(name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.SetEdns0(1232, false)
	return m
}

// BenchmarkServeDNSHit is ServeDNS on a warm cache, from the parsed request
// to the packed reply: the handler's share of a cache hit.
func BenchmarkServeDNSHit(b *testing.B) {
	h := benchHandler(b, 100)
	req := benchQuery("hit.bench.test.")
	w := &benchWriter{buf: make([]byte, 0, 4096)}
	h.ServeDNS(w, req) // warm
	b.ReportAllocs()
	for b.Loop() {
		w.reply = nil
		h.ServeDNS(w, req)
		if len(w.reply) == 0 {
			b.Fatal("no reply")
		}
	}
}

// BenchmarkGeneralPathHit is a hit from the request's bytes to the reply's
// on the general path (header check, unpacking, ServeDNS, packing): what a
// hit costs over TCP, or over UDP when the fast path declines it.
func BenchmarkGeneralPathHit(b *testing.B) {
	h := benchHandler(b, 100)
	packet, err := benchQuery("hit.bench.test.").Pack()
	if err != nil {
		b.Fatal(err)
	}
	w := &benchWriter{buf: make([]byte, 0, 4096)}
	servePacket(h, packet, w, func(error) {}) // warm
	b.ReportAllocs()
	for b.Loop() {
		w.reply = nil
		servePacket(h, packet, w, func(error) {})
		if len(w.reply) == 0 {
			b.Fatal("no reply")
		}
	}
}

// BenchmarkServeDNSHitParallel is ServeDNS hits of 10,000 warm names on
// every P at once.
func BenchmarkServeDNSHitParallel(b *testing.B) {
	const names = 10000
	h := benchHandler(b, names)
	reqs := make([]*dns.Msg, names)
	w := &benchWriter{buf: make([]byte, 0, 4096)}
	for i := range reqs {
		reqs[i] = benchQuery(fmt.Sprintf("h%d.bench.test.", i))
		h.ServeDNS(w, reqs[i])
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := &benchWriter{buf: make([]byte, 0, 4096)}
		i := 0
		for pb.Next() {
			h.ServeDNS(w, reqs[i%names])
			i++
		}
	})
}

// BenchmarkServeDNSMiss asks a new name every time: routing, the coalescer,
// the in-memory upstream, the store policy and Set, then the answer.
func BenchmarkServeDNSMiss(b *testing.B) {
	h := benchHandler(b, 10000)
	w := &benchWriter{buf: make([]byte, 0, 4096)}
	names := make([]*dns.Msg, 0, 1<<16)
	for i := range cap(names) {
		names = append(names, benchQuery(fmt.Sprintf("m%d.bench.test.", i)))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(names) {
			// Every name is cached by now: start over on a fresh handler so
			// each query stays a miss (outside the timer).
			b.StopTimer()
			h = benchHandler(b, 10000)
			i = 0
			b.StartTimer()
		}
		w.reply = nil
		h.ServeDNS(w, names[i])
		if len(w.reply) == 0 {
			b.Fatal("no reply")
		}
		i++
	}
}
