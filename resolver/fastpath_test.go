package resolver

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/test/dnstest"
)

// The fast path must give the answer ServeDNS gives, or none: these tests
// put both on the same warm cache and compare replies byte for byte after
// parsing.

// diffUpstream answers with the shapes that test the wire handling: a CNAME
// chain, glue, AD, NODATA with an SOA, and an answer too big for 512 bytes.
var diffUpstream = dnstest.ExchangeFunc(func(_ context.Context, q *dns.Msg) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetReply(q)
	name, qtype := strings.ToLower(q.Question[0].Name), q.Question[0].Qtype
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		return r
	}
	switch {
	case qtype != dns.TypeA && !dns.IsSubDomain("example.", name):
		// The root's SOA for names outside example.: the scrubber keeps a
		// negative answer's SOA only when it encloses the name.
		m.Ns = []dns.RR{rr(". 300 IN SOA ns.example. h.example. 1 2 3 4 60")}
	case qtype != dns.TypeA:
		m.Ns = []dns.RR{rr("example. 300 IN SOA ns.example. h.example. 1 2 3 4 60")}
	case name == "cname.example.":
		m.Answer = []dns.RR{rr("cname.example. 300 IN CNAME www.example."), rr("www.example. 120 IN A 192.0.2.1")}
		m.Ns = []dns.RR{rr("example. 300 IN NS ns.example.")}
		m.Extra = []dns.RR{rr("ns.example. 300 IN A 192.0.2.53")}
	case name == "mid.example.":
		// 25 addresses: fit in 512 bytes compressed only.
		for i := range 25 {
			m.Answer = append(m.Answer, rr(fmt.Sprintf("mid.example. 300 IN A 192.0.2.%d", i)))
		}
	case name == "huge.example.":
		// 100 addresses: more than 1232 bytes, the UDP cap (issue 13).
		for i := range 100 {
			m.Answer = append(m.Answer, rr(fmt.Sprintf("huge.example. 300 IN A 192.0.2.%d", i)))
		}
	case name == "big.example.":
		for i := range 40 {
			m.Answer = append(m.Answer, rr(fmt.Sprintf("big.example. 300 IN A 192.0.2.%d", i)))
		}
	default:
		m.Answer = []dns.RR{rr(name + " 300 IN A 192.0.2.7")}
		m.AuthenticatedData = strings.HasPrefix(name, "ad.")
	}
	return m, nil
})

func diffHandler(tb testing.TB, obs Observer) (*Handler, *fakeClock) {
	tb.Helper()
	return diffHandlerWith(tb, obs, nil)
}

// diffHandlerWith is diffHandler with tweak applied to its configuration.
func diffHandlerWith(tb testing.TB, obs Observer, tweak func(*Config)) (*Handler, *fakeClock) {
	tb.Helper()
	clock := newFakeClock()
	c, err := cache.New(cache.Config{Capacity: 1000, MaxStaleAge: time.Hour, Now: clock.Now})
	if err != nil {
		tb.Fatal(err)
	}
	cfg := Config{
		Zones:              []Zone{{Name: ".", Upstream: overLoopback(tb, ".", diffUpstream)}},
		ServeStale:         true,
		StaleClientTimeout: time.Second,
		StaleAnswerTTL:     30 * time.Second,
		FailureRecheck:     30 * time.Second,
		Now:                clock.Now,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	h, err := NewHandler(cfg, c, nil, obs)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(h.Close)
	return h, clock
}

// generalReply is ServeDNS's reply to pkt over UDP.
func generalReply(h *Handler, pkt []byte) []byte {
	w := &memWriter{}
	servePacket(h, pkt, w, func(error) {})
	return w.reply
}

// generalReplyFrom is generalReply to a client at from.
func generalReplyFrom(h *Handler, pkt []byte, from netip.AddrPort) []byte {
	return generalReplyOver(h, pkt, from, false)
}

// generalReplyOver is generalReplyFrom over UDP or TCP.
func generalReplyOver(h *Handler, pkt []byte, from netip.AddrPort, tcp bool) []byte {
	w := &memWriter{tcp: tcp, remote: net.UDPAddrFromAddrPort(from)}
	if tcp {
		w.remote = net.TCPAddrFromAddrPort(from)
	}
	servePacket(h, pkt, w, func(error) {})
	return w.reply
}

// sameReply compares two replies after parsing. Owner names are compared
// without letter case: the fast path's records may point into the client's
// spelling of the question, ServeDNS's carry the upstream's.
func sameReply(a, b []byte) (string, bool) {
	ma, mb := new(dns.Msg), new(dns.Msg)
	if err := ma.Unpack(a); err != nil {
		return "fast reply does not parse: " + err.Error(), false
	}
	if err := mb.Unpack(b); err != nil {
		return "general reply does not parse: " + err.Error(), false
	}
	if ma.MsgHdr != mb.MsgHdr || len(ma.Question) != 1 || len(mb.Question) != 1 || ma.Question[0] != mb.Question[0] {
		return fmt.Sprintf("header or question differ:\n%v\n%v", ma, mb), false
	}
	if sa, sb := strings.ToLower(ma.String()), strings.ToLower(mb.String()); sa != sb {
		return fmt.Sprintf("fast\n%s\ngeneral\n%s", sa, sb), false
	}
	return "", true
}

type variant struct {
	name    string
	qtype   uint16
	edns    bool
	do      bool
	size    uint16
	rd      bool
	cd      bool
	ad      bool
	cookie  bool
	fastHit bool // the fast path must answer it (once warm)
}

func (v variant) pack(tb testing.TB) []byte {
	m := new(dns.Msg)
	m.SetQuestion(v.name, v.qtype)
	m.Id = 0xbeef
	m.RecursionDesired = v.rd
	m.CheckingDisabled = v.cd
	m.AuthenticatedData = v.ad
	if v.edns {
		m.SetEdns0(v.size, v.do)
		if v.cookie {
			opt := m.IsEdns0()
			opt.Option = append(opt.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
		}
	}
	b, err := m.Pack()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func variants() []variant {
	var out []variant
	for _, name := range []string{"www.example.", "WwW.ExAmple.", "cname.example.", "ad.example.", "mid.example.", "big.example.", "."} {
		for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
			for _, e := range []struct {
				edns, do, cookie bool
				size             uint16
			}{{false, false, false, 0}, {true, false, false, 1232}, {true, true, false, 512}, {true, false, true, 4096}, {true, true, true, 100}} {
				for _, flags := range []struct{ rd, cd, ad bool }{{true, false, false}, {false, true, false}, {true, false, true}} {
					fits := !(name == "big.example." && qtype == dns.TypeA && (!e.edns || e.size <= 512))
					out = append(out, variant{name: name, qtype: qtype, edns: e.edns, do: e.do, size: e.size,
						rd: flags.rd, cd: flags.cd, ad: flags.ad, cookie: e.cookie, fastHit: fits})
				}
			}
		}
	}
	return out
}

func TestFastPathMatchesServeDNS(t *testing.T) {
	h, clock := diffHandler(t, nil)
	from := netip.MustParseAddrPort("127.0.0.1:53000")
	var q plainQuery
	fast := 0
	seen := map[cache.Key]bool{}
	for _, v := range variants() {
		pkt := v.pack(t)
		k := cache.NewKey(v.name, v.qtype, dns.ClassINET, v.do, v.cd)
		if _, ok := h.answerPacket(nil, pkt, from, false, &q); ok && !seen[k] {
			t.Fatalf("%+v: cold cache answered by the fast path", v)
		}
		seen[k] = true
		generalReply(h, pkt)                  // warm this key
		clock.Advance(100 * time.Millisecond) // 210 variants: 21 s, inside every TTL
		reply, ok := h.answerPacket(nil, pkt, from, false, &q)
		if ok != v.fastHit {
			t.Errorf("%+v: fast path answered %v, want %v", v, ok, v.fastHit)
			continue
		}
		if !ok {
			continue
		}
		fast++
		if diff, same := sameReply(reply, generalReply(h, pkt)); !same {
			t.Errorf("%+v: %s", v, diff)
		}
		// Over TCP (issue 13: TCP has its own loop and fast path): what
		// the fast path answers over UDP it answers over TCP, as ServeDNS
		// does over TCP (no UDP size limit).
		reply, ok = h.answerPacket(nil, pkt, from, true, &q)
		if !ok {
			t.Errorf("%+v: answered by the fast path over UDP, not over TCP", v)
			continue
		}
		if diff, same := sameReply(reply, generalReplyOver(h, pkt, from, true)); !same {
			t.Errorf("%+v over TCP: %s", v, diff)
		}
	}
	if fast < 100 {
		t.Errorf("only %d variants took the fast path", fast)
	}
}

// Whatever the fast path is not sure of, it declines, and counts nothing.
func TestFastPathDeclines(t *testing.T) {
	h, _ := diffHandler(t, nil)
	var q plainQuery
	from := netip.MustParseAddrPort("127.0.0.1:53000")
	warm := variant{name: "www.example.", qtype: dns.TypeA, edns: true, size: 1232}.pack(t)
	generalReply(h, warm)
	before := h.cache.Stats()

	mutate := func(f func(*dns.Msg)) []byte {
		m := new(dns.Msg)
		if err := m.Unpack(warm); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := map[string][]byte{
		"trailing byte":  append(append([]byte(nil), warm...), 0),
		"cut short":      warm[:len(warm)-3],
		"EDNS version 1": mutate(func(m *dns.Msg) { m.IsEdns0().SetVersion(1) }),
		"other option":   mutate(func(m *dns.Msg) { m.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_NSID{Code: dns.EDNS0NSID}} }),
		"class CH":       mutate(func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }),
		"AXFR":           mutate(func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAXFR }),
		"escaped name":   mutate(func(m *dns.Msg) { m.Question[0].Name = `www\.x.example.` }),
		"response":       mutate(func(m *dns.Msg) { m.Response = true }),
		"opcode NOTIFY":  mutate(func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify }),
		"answer included": mutate(func(m *dns.Msg) {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeA, Class: dns.ClassINET}, A: net.IPv4(1, 2, 3, 4)}}
		}),
	}
	for name, pkt := range cases {
		if _, ok := h.answerPacket(nil, pkt, from, false, &q); ok {
			t.Errorf("%s: answered by the fast path", name)
		}
	}
	if _, ok := h.answerPacket(nil, warm, netip.MustParseAddrPort("192.0.2.99:53000"), false, &q); ok {
		t.Error("a client outside the allow-list answered by the fast path")
	}
	if got := h.cache.Stats(); got != before {
		t.Errorf("declined packets changed the cache counters: %+v, before %+v", got, before)
	}
	if _, ok := h.answerPacket(nil, warm, from, false, &q); !ok {
		t.Error("the warm query itself was declined")
	}
}

// coverAll is a RecordSource that covers names under "consul." and answers
// none of them.
type coverAll struct{}

func (coverAll) Answer(dns.Question) (*dns.Msg, bool, string, bool) { return nil, false, "", false }
func (coverAll) Covers(name []byte) bool                            { return strings.HasSuffix(string(name), ".consul.") }

func TestFastPathLeavesRecordSourceNames(t *testing.T) {
	h, _ := diffHandler(t, nil)
	var q plainQuery
	from := netip.MustParseAddrPort("127.0.0.1:53000")
	s := *h.settings.Load()
	s.Records = coverAll{}
	h.settings.Store(&s)
	for name, want := range map[string]bool{"web.service.consul.": false, "www.example.": true} {
		pkt := variant{name: name, qtype: dns.TypeA}.pack(t)
		generalReply(h, pkt)
		if _, ok := h.answerPacket(nil, pkt, from, false, &q); ok != want {
			t.Errorf("%s: fast path answered %v, want %v", name, ok, want)
		}
	}
}

// FuzzFastPath: for any packet the fast path answers, over UDP or TCP,
// ServeDNS gives the same reply over the same transport, from every client
// of diffClients (allowed and refused prefixes), with and without a
// Records source, from a warm cache and from one whose entries are all
// stale (answered stale at once: the failure recheck); the seeds and the
// warm cache cover query types beyond A and AAAA and names the source
// covers.
func FuzzFastPath(f *testing.F) {
	for _, v := range variants()[:40] {
		f.Add(v.pack(f))
	}
	var warm [][]byte
	for _, v := range variants() {
		warm = append(warm, v.pack(f))
	}
	huge := variant{name: "huge.example.", qtype: dns.TypeA, edns: true, size: dns.MaxMsgSize}.pack(f)
	warm = append(warm, huge)
	f.Add(huge)
	for _, name := range diffNames {
		for _, qtype := range diffQtypes {
			p := variant{name: name, qtype: qtype, edns: true, size: 1232}.pack(f)
			warm = append(warm, p)
			f.Add(p)
		}
	}
	// Each Records source twice: the cache warm, and every entry expired
	// with its refresh failed (the fast path's stale answers, issue 22).
	var hs []*Handler
	for _, src := range diffSources {
		for _, stale := range []bool{false, true} {
			h, clock := variedHandler(f, src.rs, nil)
			for _, p := range warm {
				generalReply(h, p)
			}
			if stale {
				staleAfterFailure(f, h, clock, warm)
			}
			hs = append(hs, h)
		}
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		var q plainQuery
		for _, h := range hs {
			for _, c := range diffClients {
				for _, tcp := range []bool{false, true} {
					reply, ok := h.answerPacket(nil, pkt, c.addr, tcp, &q)
					if !ok {
						continue
					}
					if !c.allowed {
						t.Fatalf("client %s outside the allow-list answered by the fast path (tcp %v)", c.addr, tcp)
					}
					if diff, same := sameReply(reply, generalReplyOver(h, pkt, c.addr, tcp)); !same {
						t.Fatalf("tcp %v: %s", tcp, diff)
					}
				}
			}
		}
	})
}

// BenchmarkAnswerPacketHit is a cache hit from the request's bytes to the
// reply's on the fast path, metrics included: the target is 0 allocations.
func BenchmarkAnswerPacketHit(b *testing.B) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	h, _ := diffHandler(b, m)
	benchHit(b, h)
}

// benchHit measures answerPacket answering www.example./A from h's cache
// (a general reply stores it first): every AnswerPacketHit benchmark,
// each with its own setting on h.
func benchHit(b *testing.B, h *Handler) {
	pkt := variant{name: "www.example.", qtype: dns.TypeA, edns: true, size: 1232, rd: true}.pack(b)
	generalReply(h, pkt)
	benchAnswerPacket(b, h, pkt)
}

// benchAnswerPacket is the loop of every fast-path benchmark: answerPacket
// answering pkt, which must not be declined, with allocations reported.
func benchAnswerPacket(b *testing.B, h *Handler, pkt []byte) {
	from := netip.MustParseAddrPort("127.0.0.1:53000")
	var q plainQuery
	out := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := h.answerPacket(out[:0], pkt, from, false, &q); !ok {
			b.Fatal("declined")
		}
	}
}

// With the in-flight cap full, a miss gets SERVFAIL from the fast path with
// the bytes and counts ServeDNS would give it, and an expired entry its
// stale answer; a question whose resolution is running is left to
// ServeDNS.
func TestFastRejectMatchesServeDNS(t *testing.T) {
	h, clock := diffHandler(t, nil)
	s := *h.settings.Load()
	s.MaxInflight = 1
	h.settings.Store(&s)
	from := netip.MustParseAddrPort("127.0.0.1:53000")
	var q plainQuery

	stale := variant{name: "cached.example.", qtype: dns.TypeA}
	generalReply(h, stale.pack(t))
	clock.Advance(301 * time.Second) // expired: ServeDNS would serve it stale
	holdSlot(t, h, cache.NewKey("busy.example.", dns.TypeA, dns.ClassINET, false, false))

	for _, v := range []variant{
		{name: "new.example.", qtype: dns.TypeA, rd: true},
		{name: "New2.Example.", qtype: dns.TypeAAAA, edns: true, size: 1232},
		{name: "new3.example.", qtype: dns.TypeA, edns: true, do: true, size: 4096, cd: true},
	} {
		pkt := v.pack(t)
		cacheBefore, rejectedBefore := h.cache.Stats(), h.InflightRejections()
		reply, ok := h.answerPacket(nil, pkt, from, false, &q)
		if !ok {
			t.Errorf("%+v: not rejected by the fast path with the cap full", v)
			continue
		}
		cacheFast, rejectedFast := h.cache.Stats(), h.InflightRejections()
		general := generalReply(h, pkt)
		if diff, same := sameReply(reply, general); !same {
			t.Errorf("%+v: %s", v, diff)
		}
		// Both paths count one miss and one rejection.
		if cacheFast.Misses-cacheBefore.Misses != 1 || rejectedFast-rejectedBefore != 1 ||
			h.cache.Stats().Misses-cacheFast.Misses != 1 || h.InflightRejections()-rejectedFast != 1 {
			t.Errorf("%+v: misses %d→%d→%d, rejections %d→%d→%d; want one each per path", v,
				cacheBefore.Misses, cacheFast.Misses, h.cache.Stats().Misses, rejectedBefore, rejectedFast, h.InflightRejections())
		}
	}
	if _, ok := h.answerPacket(nil, variant{name: "busy.example.", qtype: dns.TypeA}.pack(t), from, false, &q); ok {
		t.Error("busy.example.: answered by the fast path, ServeDNS joins the resolution")
	}
	// The entry expired: both paths serve it stale (the cap turns its
	// refresh away), with the same bytes and counts.
	cacheBefore, rejectedBefore := h.cache.Stats(), h.InflightRejections()
	reply, ok := h.answerPacket(nil, stale.pack(t), from, false, &q)
	if !ok {
		t.Fatal("cached.example.: not served stale by the fast path with the cap full")
	}
	cacheFast, rejectedFast := h.cache.Stats(), h.InflightRejections()
	if diff, same := sameReply(reply, generalReply(h, stale.pack(t))); !same {
		t.Error(diff)
	}
	if cacheFast.StaleHits-cacheBefore.StaleHits != 1 || rejectedFast-rejectedBefore != 1 ||
		h.cache.Stats().StaleHits-cacheFast.StaleHits != 1 || h.InflightRejections()-rejectedFast != 1 {
		t.Errorf("stale hits %d→%d→%d, rejections %d→%d→%d; want one each per path",
			cacheBefore.StaleHits, cacheFast.StaleHits, h.cache.Stats().StaleHits, rejectedBefore, rejectedFast, h.InflightRejections())
	}
}
