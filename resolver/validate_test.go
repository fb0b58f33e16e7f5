package resolver

import (
	"context"
	"crypto"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/test/dnstest"
)

// signedBench is an in-memory upstream for the zone bench.test., signed
// with one Ed25519 key (its anchor): every A question gets a signed record,
// except bad.bench.test., whose record is changed after signing.
type signedBench struct {
	key  *dns.DNSKEY
	priv crypto.Signer
	mu   sync.Mutex
	sigs map[string]*dns.RRSIG // by name: signing once per name
}

func newSignedBench(tb testing.TB) *signedBench {
	tb.Helper()
	k := &dns.DNSKEY{Hdr: dns.RR_Header{Name: "bench.test.", Rrtype: dns.TypeDNSKEY, Class: dns.ClassINET, Ttl: 3600},
		Flags: 257, Protocol: 3, Algorithm: dns.ED25519}
	priv, err := k.Generate(256)
	if err != nil {
		tb.Fatal(err)
	}
	return &signedBench{key: k, priv: priv.(crypto.Signer), sigs: map[string]*dns.RRSIG{}}
}

func (s *signedBench) sign(rrset []dns.RR) *dns.RRSIG {
	h := rrset[0].Header()
	key := h.Name + dns.TypeToString[h.Rrtype]
	s.mu.Lock()
	defer s.mu.Unlock()
	if sig, ok := s.sigs[key]; ok {
		return sig
	}
	now := time.Now()
	sig := &dns.RRSIG{Hdr: dns.RR_Header{Name: h.Name, Rrtype: dns.TypeRRSIG, Class: dns.ClassINET, Ttl: h.Ttl},
		Algorithm: s.key.Algorithm, SignerName: s.key.Hdr.Name, KeyTag: s.key.KeyTag(),
		Inception: uint32(now.Add(-time.Hour).Unix()), Expiration: uint32(now.Add(24 * time.Hour).Unix())}
	if err := sig.Sign(s.priv, rrset); err != nil {
		panic(err)
	}
	s.sigs[key] = sig
	return sig
}

func (s *signedBench) exchange(_ context.Context, q *dns.Msg) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.SetEdns0(1232, true)
	name, qtype := q.Question[0].Name, q.Question[0].Qtype
	switch {
	case qtype == dns.TypeDNSKEY && name == "bench.test.":
		m.Answer = []dns.RR{s.key, s.sign([]dns.RR{s.key})}
	case qtype == dns.TypeA:
		a := &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 3600}, A: []byte{192, 0, 2, 1}}
		sig := s.sign([]dns.RR{a})
		if name == "bad.bench.test." {
			a = &dns.A{Hdr: a.Hdr, A: []byte{192, 0, 2, 66}}
		}
		m.Answer = []dns.RR{a, sig}
	default:
		m.Rcode = dns.RcodeRefused
	}
	return m, nil
}

// validatingHandler is benchHandler validating in mode over s.
func validatingHandler(tb testing.TB, s *signedBench, mode DNSSECMode) *Handler {
	tb.Helper()
	c, err := cache.New(cache.Config{Capacity: 10000, MaxStaleAge: 24 * time.Hour})
	if err != nil {
		tb.Fatal(err)
	}
	h, err := NewHandler(Config{
		Zones:  []Zone{{Name: ".", Upstream: overLoopback(tb, ".", dnstest.ExchangeFunc(s.exchange))}},
		DNSSEC: DNSSECConfig{Mode: mode, Anchors: []dns.RR{s.key}},
	}, c, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(h.Close)
	return h
}

// TestValidationOnTheMissPath: in enforce a secure answer carries AD, from
// the upstream and from the cache alike, and keeps its signatures only for
// a client that asked with DO; a bogus one is SERVFAIL with EDE 6 and never
// cached; CD asks past the validator. In audit the bogus answer is given
// and counted.
func TestValidationOnTheMissPath(t *testing.T) {
	s := newSignedBench(t)
	h := validatingHandler(t, s, DNSSECEnforce)
	ask := func(h *Handler, name string, do, cd bool) *dns.Msg {
		q := new(dns.Msg)
		q.SetQuestion(name, dns.TypeA)
		q.SetEdns0(1232, do)
		q.CheckingDisabled = cd
		w := &benchWriter{buf: make([]byte, 0, 4096)}
		h.ServeDNS(w, q)
		m := new(dns.Msg)
		if err := m.Unpack(w.reply); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return m
	}
	for round := range 2 {
		m := ask(h, "www.bench.test.", true, false)
		if m.Rcode != dns.RcodeSuccess || !m.AuthenticatedData || len(m.Answer) != 2 {
			t.Errorf("round %d, DO: %s AD=%v %d records, want NOERROR AD with the A and its RRSIG", round, dns.RcodeToString[m.Rcode], m.AuthenticatedData, len(m.Answer))
		}
		m = ask(h, "www.bench.test.", false, false)
		if m.Rcode != dns.RcodeSuccess || m.AuthenticatedData || len(m.Answer) != 1 {
			t.Errorf("round %d, no DO: %s AD=%v %d records, want NOERROR, no AD, the A alone", round, dns.RcodeToString[m.Rcode], m.AuthenticatedData, len(m.Answer))
		}
		m = ask(h, "bad.bench.test.", true, false)
		if m.Rcode != dns.RcodeServerFailure || edeOf(m) != dns.ExtendedErrorCodeDNSBogus {
			t.Errorf("round %d, altered: %s EDE %d, want SERVFAIL EDE 6", round, dns.RcodeToString[m.Rcode], edeOf(m))
		}
		if m = ask(h, "bad.bench.test.", true, true); m.Rcode != dns.RcodeSuccess || m.AuthenticatedData {
			t.Errorf("round %d, altered with CD: %s AD=%v, want the data unchecked", round, dns.RcodeToString[m.Rcode], m.AuthenticatedData)
		}
	}
	if h.cache.Has(cache.Key{Name: "bad.bench.test.", Type: dns.TypeA, Class: dns.ClassINET, DO: true}) {
		t.Error("the bogus answer was cached")
	}
	if n := h.dnssecStats.bogus.Load(); n != 2 {
		t.Errorf("%d bogus verdicts, want 2 (never cached: asked twice)", n)
	}

	audit := validatingHandler(t, s, DNSSECAudit)
	if m := ask(audit, "bad.bench.test.", true, false); m.Rcode != dns.RcodeSuccess || m.AuthenticatedData {
		t.Errorf("audit, altered: %s AD=%v, want the answer as it came", dns.RcodeToString[m.Rcode], m.AuthenticatedData)
	}
	if n := audit.dnssecStats.bogus.Load(); n != 1 {
		t.Errorf("audit counted %d bogus verdicts, want 1", n)
	}
}

func edeOf(m *dns.Msg) uint16 {
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				return e.InfoCode
			}
		}
	}
	return 0
}

// BenchmarkServeDNSHitValidated is BenchmarkServeDNSHit for an answer that
// was validated (enforce, AD stored with the entry): the verdict travels
// in the entry, so the figure should be BenchmarkServeDNSHit's.
func BenchmarkServeDNSHitValidated(b *testing.B) {
	h := validatingHandler(b, newSignedBench(b), DNSSECEnforce)
	req := benchQuery("hit.bench.test.")
	req.AuthenticatedData = true
	w := &benchWriter{buf: make([]byte, 0, 4096)}
	h.ServeDNS(w, req) // the miss that validates
	if m := new(dns.Msg); m.Unpack(w.reply) != nil || !m.AuthenticatedData {
		b.Fatal("the warm-up answer is not secure")
	}
	b.ReportAllocs()
	for b.Loop() {
		w.reply = nil
		h.ServeDNS(w, req)
		if len(w.reply) == 0 {
			b.Fatal("no reply")
		}
	}
}

// BenchmarkServeDNSMissValidated is BenchmarkServeDNSMiss with enforce:
// a new signed name each time, its signature verified (the zone's keys
// cached after the first).
func BenchmarkServeDNSMissValidated(b *testing.B) {
	s := newSignedBench(b)
	h := validatingHandler(b, s, DNSSECEnforce)
	w := &benchWriter{buf: make([]byte, 0, 4096)}
	const n = 1 << 12
	names := make([]*dns.Msg, 0, n)
	for i := range n {
		names = append(names, benchQuery(fmt.Sprintf("m%d.bench.test.", i)))
		s.sign([]dns.RR{&dns.A{Hdr: dns.RR_Header{Name: names[i].Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 3600}, A: []byte{192, 0, 2, 1}}})
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(names) {
			b.StopTimer()
			h = validatingHandler(b, s, DNSSECEnforce)
			i = 0
			b.StartTimer()
		}
		w.reply = nil
		h.ServeDNS(w, names[i])
		if len(w.reply) < 12 || w.reply[3]&0x0f != dns.RcodeSuccess {
			b.Fatal("no NOERROR answer")
		}
		i++
	}
}
