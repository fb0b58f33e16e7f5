package dnssec

import (
	"context"
	"crypto"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// A signed-zone kit for the validator's tests: zones with Ed25519 keys
// signed in memory, and a Fetcher that answers from them.

var testNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

type testZone struct {
	name     string
	ksk, zsk *dns.DNSKEY
	kskPriv  crypto.Signer
	zskPriv  crypto.Signer
}

func newKey(t testing.TB, name string, flags uint16) (*dns.DNSKEY, crypto.Signer) {
	t.Helper()
	k := &dns.DNSKEY{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeDNSKEY, Class: dns.ClassINET, Ttl: 300},
		Flags: flags, Protocol: 3, Algorithm: dns.ED25519}
	priv, err := k.Generate(256)
	if err != nil {
		t.Fatal(err)
	}
	return k, priv.(crypto.Signer)
}

func newTestZone(t testing.TB, name string) *testZone {
	z := &testZone{name: dns.CanonicalName(name)}
	z.ksk, z.kskPriv = newKey(t, z.name, 257)
	z.zsk, z.zskPriv = newKey(t, z.name, 256)
	return z
}

func rr(t testing.TB, s string) dns.RR {
	t.Helper()
	r, err := dns.NewRR(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return r
}

// signWith signs rrset with key, valid from an hour before testNow to an
// hour after unless from/until say otherwise.
func signWith(t testing.TB, key *dns.DNSKEY, priv crypto.Signer, rrset []dns.RR, from, until time.Time) *dns.RRSIG {
	t.Helper()
	h := rrset[0].Header()
	sig := &dns.RRSIG{Hdr: dns.RR_Header{Name: h.Name, Rrtype: dns.TypeRRSIG, Class: dns.ClassINET, Ttl: h.Ttl},
		Algorithm: key.Algorithm, SignerName: key.Hdr.Name, KeyTag: key.KeyTag(),
		Inception: uint32(from.Unix()), Expiration: uint32(until.Unix())}
	if err := sig.Sign(priv, rrset); err != nil {
		t.Fatal(err)
	}
	return sig
}

// sign returns rrset and its ZSK signature.
func (z *testZone) sign(t testing.TB, rrset ...dns.RR) []dns.RR {
	t.Helper()
	return append(rrset, signWith(t, z.zsk, z.zskPriv, rrset, testNow.Add(-time.Hour), testNow.Add(time.Hour)))
}

// keys is the zone's DNSKEY RRset signed by its KSK.
func (z *testZone) keys(t testing.TB) []dns.RR {
	set := []dns.RR{z.ksk, z.zsk}
	return append(set, signWith(t, z.ksk, z.kskPriv, set, testNow.Add(-time.Hour), testNow.Add(time.Hour)))
}

func (z *testZone) ds() *dns.DS {
	ds := z.ksk.ToDS(dns.SHA256)
	ds.Hdr.Ttl = 300
	return ds
}

// fakeUpstream answers Fetch from fixed replies and counts the fetches.
type fakeUpstream struct {
	mu      sync.Mutex
	replies map[string]*dns.Msg
	// fallback, if set, answers what replies lacks.
	fallback func(name string, qtype uint16) *dns.Msg
	fetches  int
}

func newFakeUpstream() *fakeUpstream { return &fakeUpstream{replies: map[string]*dns.Msg{}} }

func fetchKey(name string, qtype uint16) string {
	return dns.CanonicalName(name) + "/" + dns.TypeToString[qtype]
}

func (f *fakeUpstream) set(name string, qtype uint16, rcode int, answer, ns []dns.RR) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Response, m.Rcode, m.Answer, m.Ns = true, rcode, answer, ns
	f.mu.Lock()
	f.replies[fetchKey(name, qtype)] = m
	f.mu.Unlock()
}

func (f *fakeUpstream) fetch(_ context.Context, name string, qtype uint16) (*dns.Msg, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fetches++
	if m, ok := f.replies[fetchKey(name, qtype)]; ok {
		return m.Copy(), nil
	}
	if f.fallback != nil {
		if m := f.fallback(name, qtype); m != nil {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no reply for %s", fetchKey(name, qtype))
}

func (f *fakeUpstream) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fetches
}

// serveKeys makes the upstream answer z's DNSKEY query.
func (f *fakeUpstream) serveKeys(t testing.TB, z *testZone) {
	f.set(z.name, dns.TypeDNSKEY, dns.RcodeSuccess, z.keys(t), nil)
}

func newTestValidator(t testing.TB, up *fakeUpstream, anchors []dns.RR, limits Limits, cacheSize int) *Validator {
	t.Helper()
	v, err := New(Config{Anchors: anchors, Fetch: up.fetch, Now: func() time.Time { return testNow },
		Limits: limits, CacheSize: cacheSize})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func reply(rcode int, answer, ns []dns.RR) *dns.Msg {
	m := new(dns.Msg)
	m.Response, m.Rcode, m.Answer, m.Ns = true, rcode, answer, ns
	return m
}

func expect(t *testing.T, label string, got Result, verdict Verdict, ede uint16) {
	t.Helper()
	if got.Verdict != verdict || (ede != 0 && got.EDE != ede) {
		t.Errorf("%s: %s EDE %d (%s), want %s EDE %d", label, got.Verdict, got.EDE, got.Reason, verdict, ede)
	}
}
