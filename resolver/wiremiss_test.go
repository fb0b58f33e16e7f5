package resolver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/test/dnstest"
	"github.com/towerd/towerd/upstream"
)

// missRecorder is a wireReplier that keeps the answers.
type missRecorder struct {
	answers chan []byte
	mu      sync.Mutex
	open    int // begun, not ended
}

func newMissRecorder() *missRecorder { return &missRecorder{answers: make(chan []byte, 64)} }

func (r *missRecorder) beginMiss() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open++
	return true
}

func (r *missRecorder) sendMiss(b []byte, _ netip.AddrPort) { r.answers <- append([]byte(nil), b...) }

func (r *missRecorder) endMiss() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open--
}

func (r *missRecorder) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open
}

func (r *missRecorder) missPanicked(v any, stack []byte) { panic(fmt.Sprint(v, "\n", string(stack))) }

// next is the next answer sent; the test fails after a minute without one.
func (r *missRecorder) next(t testing.TB) []byte {
	t.Helper()
	select {
	case b := <-r.answers:
		return b
	case <-time.After(time.Minute):
		t.Fatal("no answer from the wire miss path")
		return nil
	}
}

// firstAnswer answers pkt from h as the listeners do: the fast path, whose
// wire miss answers later through r (wire is then true), or the general
// path for what it declines.
func (r *missRecorder) firstAnswer(t testing.TB, h *Handler, pkt []byte, from netip.AddrPort, tcp bool) (answer []byte, wire bool) {
	t.Helper()
	q := plainQuery{replier: r}
	reply, ok := h.answerPacket(nil, pkt, from, tcp, &q)
	switch {
	case ok && len(reply) == 0:
		return r.next(t), true
	case ok:
		return reply, false // a hit: an earlier question stored the key
	default:
		return generalReplyOver(h, pkt, from, tcp), false
	}
}

// queryLog records observations without their durations.
type queryLog struct {
	mu  sync.Mutex
	all []Query
}

func (l *queryLog) ObserveQuery(q Query) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q.Duration = 0
	l.all = append(l.all, q)
}

func (l *queryLog) take() []Query {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.all
	l.all = nil
	return out
}

// wireUpstream is a loopback server answering as diffUpstream does, plus
// NXDOMAIN for names starting with "nx", AAAA for "v6." names, and a
// NODATA whose SOA encloses every name.
func wireUpstream(t testing.TB) *dnstest.Upstream {
	u := dnstest.NewUpstream(t)
	u.SetScript(func(q *dns.Msg, _ string) *dns.Msg {
		name, qtype := strings.ToLower(q.Question[0].Name), q.Question[0].Qtype
		soa, _ := dns.NewRR(dnstest.TestSOA)
		m := new(dns.Msg)
		m.SetReply(q)
		switch {
		case strings.HasPrefix(name, "nx"):
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{soa}
		case strings.HasPrefix(name, "v6.") && qtype == dns.TypeAAAA:
			rr, _ := dns.NewRR(name + " 120 IN AAAA 2001:db8::6")
			m.Answer = []dns.RR{rr}
		case strings.HasPrefix(name, "nodata."):
			m.Ns = []dns.RR{soa}
		case strings.HasPrefix(name, "fail."):
			m.Rcode = dns.RcodeServerFailure
		case strings.HasPrefix(name, "v4cdn.") && qtype == dns.TypeAAAA:
			// NODATA at the end of a chain: an IPv4-only CDN name.
			c, _ := dns.NewRR(name + " 300 IN CNAME v4.edge.example.")
			m.Answer = []dns.RR{c}
			m.Ns = []dns.RR{soa}
		case strings.HasPrefix(name, "chain.") && qtype == dns.TypeA:
			// A clean chain, as a CDN name answers.
			c1, _ := dns.NewRR(name + " 300 IN CNAME edge.Cdn.example.")
			c2, _ := dns.NewRR("edge.Cdn.example. 60 IN CNAME a1.edge.cdn.example.")
			a, _ := dns.NewRR("a1.edge.cdn.example. 20 IN A 192.0.2.20")
			m.Answer = []dns.RR{c1, c2, a}
		default:
			m, _ = diffUpstream(context.Background(), q)
		}
		if opt := q.IsEdns0(); opt != nil {
			m.SetEdns0(1232, opt.Do())
		}
		return m
	})
	return u
}

// wireHandler is a handler forwarding "." to a group over addr.
func wireHandler(t testing.TB, addr string, obs Observer, tweak func(*Config)) (*Handler, *fakeClock) {
	t.Helper()
	g, err := upstream.NewGroup(".", []string{addr}, upstream.GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return diffHandlerWith(t, obs, func(c *Config) {
		c.Zones = []Zone{{Name: ".", Upstream: g}}
		c.Allow = diffAllow
		if tweak != nil {
			tweak(c)
		}
	})
}

func wireVariants() []variant {
	var out []variant
	for _, name := range []string{"www.example.", "WwW.ExAmple.", "ad.example.", "v6.example.", "nodata.example.",
		"nx.example.", "NX.a.b.example.", "cname.example.", "mid.example.", "big.example.", "huge.example.", "foo.", "fail.example.", "chain.example.", "Chain.Example.", "v4cdn.example."} {
		for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeMX} {
			for _, e := range []struct {
				edns, do bool
				size     uint16
			}{{false, false, 0}, {true, false, 1232}, {true, true, 512}, {true, false, 4096}} {
				for _, flags := range []struct{ rd, cd, ad bool }{{true, false, false}, {false, true, false}, {true, false, true}} {
					out = append(out, variant{name: name, qtype: qtype, edns: e.edns, do: e.do, size: e.size,
						rd: flags.rd, cd: flags.cd, ad: flags.ad})
				}
			}
		}
	}
	return out
}

// TestWireMissMatchesServeDNS: a miss answered by the wire path gets the
// answer ServeDNS gives for the same upstream reply, is observed and
// counted the same way, and a later hit repeats it.
func TestWireMissMatchesServeDNS(t *testing.T) {
	u := wireUpstream(t)
	wireLog, generalLog := &queryLog{}, &queryLog{}
	hw, _ := wireHandler(t, u.Addr, wireLog, nil)
	hg, _ := wireHandler(t, u.Addr, generalLog, nil)
	rec := newMissRecorder()
	from := diffClients[0].addr
	wireAnswered := 0
	var probeMisses uint64
	for _, v := range wireVariants() {
		what := fmt.Sprintf("%s %s edns %v do %v size %d cd %v ad %v", v.name, dns.TypeToString[v.qtype], v.edns, v.do, v.size, v.cd, v.ad)
		pkt := v.pack(t)
		first, wire := rec.firstAnswer(t, hw, pkt, from, false)
		if wire {
			wireAnswered++
		}
		general := generalReplyFrom(hg, pkt, from)
		if diff, same := sameReply(first, general); !same {
			t.Errorf("%s: %s", what, diff)
		}
		if got, want := wireLog.take(), generalLog.take(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: observed %v, ServeDNS %v", what, got, want)
		}
		missesBefore := hw.cache.Stats().Misses
		later, ok := hw.answerPacket(nil, pkt, from, false, &plainQuery{})
		probeMisses += hw.cache.Stats().Misses - missesBefore // a remembered failure's SERVFAIL is a miss
		if ok {
			if diff, same := sameReply(later, first); !same {
				t.Errorf("%s: a later hit differs from the first answer: %s", what, diff)
			}
			wireLog.take()
		}
		generalLog.take()
	}
	t.Logf("%d of %d variants answered by the wire miss path", wireAnswered, len(wireVariants()))
	if wireAnswered < 100 {
		t.Errorf("only %d queries took the wire miss path", wireAnswered)
	}
	ws, gs := hw.cache.Stats(), hg.cache.Stats()
	// The later-hit probes above count hits on hw only.
	if ws.Misses-probeMisses != gs.Misses || ws.Stored != gs.Stored || ws.Refused != gs.Refused {
		t.Errorf("cache counters: wire %+v, ServeDNS %+v", ws, gs)
	}
	hw.Close() // the flights' goroutines end their waiters before they end
	if n := rec.pending(); n != 0 {
		t.Errorf("%d wire waiters never ended", n)
	}
}

// The upstream query is what miekg/dns packs for the rules of
// appendUpstreamQuery's comment: RD, AD, the key's CD, EDNS 1232 with its DO.
func TestAppendUpstreamQuery(t *testing.T) {
	for _, name := range []string{"www.example.", "a.", ".", `a\.b.example.`} {
		for _, flags := range []struct{ do, cd bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			key := cache.NewKey(name, dns.TypeAAAA, dns.ClassINET, flags.do, flags.cd)
			m := new(dns.Msg)
			m.SetQuestion(key.Name, key.Type)
			m.AuthenticatedData = true
			m.CheckingDisabled = key.CD
			m.SetEdns0(advertisedUDPSize, key.DO)
			want, err := m.Pack()
			if err != nil {
				t.Fatal(err)
			}
			want[0], want[1] = 0, 0
			if got := appendUpstreamQuery(nil, key); string(got) != string(want) {
				t.Errorf("%v: %x, want %x", key, got, want)
			}
		}
	}
}

// A wire waiter whose query_timeout runs out gets ServeDNS's SERVFAIL (EDE
// 22) while the resolution goes on; its late reply fills the cache, and the
// client's retry is a hit.
func TestWireMissTimeout(t *testing.T) {
	u := wireUpstream(t)
	arrived, release := u.Hold("slow.example.")
	log := &queryLog{}
	h, _ := wireHandler(t, u.Addr, log, func(c *Config) { c.QueryTimeout = 50 * time.Millisecond })
	rec := newMissRecorder()
	pkt := variant{name: "slow.example.", qtype: dns.TypeA, edns: true, size: 1232, rd: true}.pack(t)
	from := diffClients[0].addr
	for range 3 {
		if reply, ok := h.answerPacket(nil, pkt, from, false, &plainQuery{replier: rec}); !ok || len(reply) != 0 {
			t.Fatalf("not a wire miss: %v %x", ok, reply)
		}
	}
	<-arrived
	for range 3 {
		got := new(dns.Msg)
		if err := got.Unpack(rec.next(t)); err != nil {
			t.Fatal(err)
		}
		if got.Rcode != dns.RcodeServerFailure || !hasEDE(got, dns.ExtendedErrorCodeNoReachableAuthority) {
			t.Fatalf("after query_timeout: %v", got)
		}
	}
	obs := log.take()
	if len(obs) != 3 {
		t.Errorf("%d observations, want 3", len(obs))
	}
	for _, o := range obs {
		if o.Rcode != dns.RcodeServerFailure || o.Source != SourceUpstream {
			t.Errorf("observed %v", o)
		}
	}
	key := cache.NewKey("slow.example.", dns.TypeA, dns.ClassINET, false, false)
	h.flights.mu.Lock()
	fl := h.flights.running[key]
	h.flights.mu.Unlock()
	if fl == nil {
		t.Fatal("the resolution ended with the client's timer")
	}
	release()
	waitFlight(h, fl)
	if _, fresh := h.cache.Fresh(key); !fresh {
		t.Fatal("the late reply did not fill the cache")
	}
	if reply, ok := h.answerPacket(nil, pkt, from, false, &plainQuery{replier: rec}); !ok || len(reply) == 0 {
		t.Errorf("the retry is no hit")
	}
}

// Wire waiters and a general-path client of one question share one
// flight: one upstream query, the same answer.
func TestWireMissCoalescing(t *testing.T) {
	u := wireUpstream(t)
	arrived, release := u.Hold("shared.example.")
	h, _ := wireHandler(t, u.Addr, nil, nil)
	rec := newMissRecorder()
	pkt := variant{name: "shared.example.", qtype: dns.TypeA, edns: true, size: 1232, rd: true}.pack(t)
	from := diffClients[0].addr
	general := make(chan []byte)
	go func() { general <- generalReplyFrom(h, pkt, from) }()
	<-arrived // the general path's flight runs
	for range 2 {
		if reply, ok := h.answerPacket(nil, pkt, from, false, &plainQuery{replier: rec}); !ok || len(reply) != 0 {
			t.Fatalf("not a wire miss: %v %x", ok, reply)
		}
	}
	release()
	g := <-general
	for range 2 {
		if diff, same := sameReply(rec.next(t), g); !same {
			t.Error(diff)
		}
	}
	if n := u.Count("shared.example.", dns.TypeA); n != 1 {
		t.Errorf("%d upstream queries, want 1", n)
	}
}

// FuzzWireMiss: for any packet the wire miss path takes, from any client,
// its answer is the one ServeDNS gives on a cache as empty for the same
// upstream reply (FuzzFastPath's rule, for misses).
func FuzzWireMiss(f *testing.F) {
	for i, v := range wireVariants() {
		if i%3 == 0 {
			f.Add(v.pack(f))
		}
	}
	u := wireUpstream(f)
	rec := newMissRecorder()
	hw, _ := wireHandler(f, u.Addr, nil, nil)
	hg, _ := wireHandler(f, u.Addr, nil, nil)
	f.Fuzz(func(t *testing.T, pkt []byte) {
		for _, c := range diffClients {
			hw.cache.Flush()
			hg.cache.Flush()
			reply, ok := hw.answerPacket(nil, pkt, c.addr, false, &plainQuery{replier: rec})
			if !ok || len(reply) > 0 {
				continue
			}
			if !c.allowed {
				t.Fatalf("client %s outside the allow-list took the wire miss path", c.addr)
			}
			first := rec.next(t)
			if diff, same := sameReply(first, generalReplyFrom(hg, pkt, c.addr)); !same {
				t.Fatal(diff)
			}
		}
	})
}

// The deadline heap keeps the earliest at the root and every index right
// through pushes and removals from anywhere.
func TestWireDeadlines(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 3))
	base := time.Now()
	var h deadlines
	var live []*waiter
	for range 5000 {
		if len(live) == 0 || rng.IntN(3) > 0 {
			w := &waiter{deadline: base.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)}
			root := h.push(w)
			if root != (h[0] == w) {
				t.Fatal("push misreported the root")
			}
			live = append(live, w)
		} else {
			i := rng.IntN(len(live))
			h.remove(live[i].heapIndex)
			if live[i].heapIndex != -1 {
				t.Fatal("a removed waiter keeps its index")
			}
			live = append(live[:i], live[i+1:]...)
		}
		if len(h) != len(live) {
			t.Fatalf("heap of %d, %d live", len(h), len(live))
		}
		for i, w := range h {
			if w.heapIndex != i {
				t.Fatalf("waiter at %d thinks it is at %d", i, w.heapIndex)
			}
			if i > 0 && w.deadline.Before(h[(i-1)/2].deadline) {
				t.Fatalf("heap order broken at %d", i)
			}
		}
	}
}

// A resolution that panics fails like one that errs: the process lives,
// the waiting ServeDNS client gets SERVFAIL, and onPanic hears of it. (The
// upstream holds its reply: one to the attempt sent before the panic could
// otherwise end the flight first.)
func TestResolutionPanicIsRecovered(t *testing.T) {
	u := wireUpstream(t)
	_, release := u.Hold("boom.example.")
	defer release()
	g, err := upstream.NewGroup(".", []string{u.Addr}, upstream.GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	h, _ := diffHandlerWith(t, nil, func(c *Config) {
		c.Zones = []Zone{{Name: ".", Upstream: &panickingWire{Group: g}}}
		c.Allow = diffAllow
	})
	var told atomic.Value
	h.flights.onPanic = func(v any, _ []byte) { told.Store(v) }
	pkt := variant{name: "boom.example.", qtype: dns.TypeA, rd: true}.pack(t)
	got := new(dns.Msg)
	if err := got.Unpack(generalReply(h, pkt)); err != nil {
		t.Fatal(err)
	}
	if got.Rcode != dns.RcodeServerFailure || told.Load() != "wire start" {
		t.Fatalf("rcode %s, told %v", dns.RcodeToString[got.Rcode], told.Load())
	}
}

// panickingWire is a group whose wire start panics after it sent its first
// attempt, as a bug in the upstream's part of route 6 would.
type panickingWire struct {
	*upstream.Group
	calls atomic.Int32
}

func (p *panickingWire) StartWire(c *upstream.WireCall, q upstream.WireQuery, recv upstream.WireReceiver) {
	p.calls.Add(1)
	p.Group.StartWire(c, q, recv)
	panic("wire start")
}

// A panic while a reader starts a wire flight ends that flight: its client
// gets SERVFAIL, the in-flight count comes back, and the next client of
// the question starts a new resolution instead of joining a dead one. (The
// upstream holds its replies until the end: a reply to the attempt sent
// before the panic may still fill the cache, which is right, but would
// make the second query a hit.)
func TestWireStartPanicEndsTheFlight(t *testing.T) {
	u := wireUpstream(t)
	_, release := u.Hold("boom.example.")
	defer release()
	g, err := upstream.NewGroup(".", []string{u.Addr}, upstream.GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	up := &panickingWire{Group: g}
	var told atomic.Int32
	h, _ := diffHandlerWith(t, nil, func(c *Config) {
		c.Zones = []Zone{{Name: ".", Upstream: up}}
		c.Allow = diffAllow
	})
	h.flights.onPanic = func(any, []byte) { told.Add(1) }
	rec := newMissRecorder()
	pkt := variant{name: "boom.example.", qtype: dns.TypeA, edns: true, size: 1232, rd: true}.pack(t)
	from := diffClients[0].addr
	for i := range 2 {
		if reply, ok := h.answerPacket(nil, pkt, from, false, &plainQuery{replier: rec}); !ok || len(reply) != 0 {
			t.Fatalf("query %d: not a wire miss: %v %x", i, ok, reply)
		}
		got := new(dns.Msg)
		if err := got.Unpack(rec.next(t)); err != nil {
			t.Fatal(err)
		}
		if got.Rcode != dns.RcodeServerFailure {
			t.Fatalf("query %d: rcode %s, want SERVFAIL", i, dns.RcodeToString[got.Rcode])
		}
		if n := h.flights.count(); n != 0 {
			t.Fatalf("query %d: %d resolutions still counted", i, n)
		}
	}
	if up.calls.Load() != 2 || told.Load() != 2 {
		t.Fatalf("%d starts, %d panics told; want 2 and 2", up.calls.Load(), told.Load())
	}
}

// TestWireMissOverTCPMatchesServeDNS: a TCP client's miss takes the wire
// path too (issue 22: its answer written by whoever ends the flight,
// tcpPipe) and gets the answer ServeDNS gives over TCP for the same
// upstream reply, with TCP's size limit.
func TestWireMissOverTCPMatchesServeDNS(t *testing.T) {
	u := wireUpstream(t)
	hw, _ := wireHandler(t, u.Addr, nil, nil)
	hg, _ := wireHandler(t, u.Addr, nil, nil)
	from := diffClients[0].addr
	miss := newMissRecorder()
	wireAnswered := 0
	for i, v := range wireVariants() {
		if i%3 != 0 {
			continue
		}
		pkt := v.pack(t)
		first, wire := miss.firstAnswer(t, hw, pkt, from, true)
		if wire {
			wireAnswered++
		}
		if diff, same := sameReply(first, generalReplyOver(hg, pkt, from, true)); !same {
			t.Errorf("%s %s: %s", v.name, dns.TypeToString[v.qtype], diff)
		}
	}
	if wireAnswered < 30 {
		t.Errorf("only %d TCP queries took the wire miss path", wireAnswered)
	}
}
