package dnssec

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// signedTree is a root anchored by DS, with example. signed under it and
// insecure. delegated without DS.
type signedTree struct {
	root, example *testZone
	up            *fakeUpstream
	anchors       []dns.RR
}

func newSignedTree(t testing.TB) *signedTree {
	t.Helper()
	tr := &signedTree{root: newTestZone(t, "."), example: newTestZone(t, "example."), up: newFakeUpstream()}
	tr.anchors = []dns.RR{tr.root.ds()}
	tr.up.serveKeys(t, tr.root)
	tr.up.serveKeys(t, tr.example)
	ds := tr.example.ds()
	ds.Hdr.Name = "example."
	tr.up.set("example.", dns.TypeDS, dns.RcodeSuccess, tr.root.sign(t, ds), nil)
	// insecure.: a delegation without DS, proven by the root's NSEC.
	tr.up.set("insecure.", dns.TypeDS, dns.RcodeSuccess, nil,
		tr.root.sign(t, rr(t, "insecure. 300 IN NSEC zzz. NS RRSIG NSEC")))
	tr.up.set("www.insecure.", dns.TypeDS, dns.RcodeSuccess, nil,
		[]dns.RR{rr(t, "insecure. 300 IN SOA ns.insecure. h.insecure. 1 2 3 4 300")})
	// www.example. has an A record only.
	tr.up.set("www.example.", dns.TypeDS, dns.RcodeSuccess, nil, append(
		tr.example.sign(t, rr(t, "example. 300 IN SOA ns.example. h.example. 1 2 3 4 300")),
		tr.example.sign(t, rr(t, "www.example. 300 IN NSEC zzz.example. A RRSIG NSEC"))...))
	return tr
}

func (tr *signedTree) validator(t testing.TB, limits Limits) *Validator {
	return newTestValidator(t, tr.up, tr.anchors, limits, 0)
}

func TestValidateVerdicts(t *testing.T) {
	tr := newSignedTree(t)
	v := tr.validator(t, Limits{})
	ex := tr.example
	a := rr(t, "www.example. 300 IN A 192.0.2.1")
	soa := ex.sign(t, rr(t, "example. 300 IN SOA ns.example. h.example. 1 2 3 4 300"))
	signed := ex.sign(t, a)
	altered := []dns.RR{rr(t, "www.example. 300 IN A 192.0.2.99"), signed[1]}
	expired := []dns.RR{a, signWith(t, ex.zsk, ex.zskPriv, []dns.RR{a}, testNow.Add(-48*time.Hour), testNow.Add(-24*time.Hour))}
	future := []dns.RR{a, signWith(t, ex.zsk, ex.zskPriv, []dns.RR{a}, testNow.Add(24*time.Hour), testNow.Add(48*time.Hour))}
	// nx.example. sorts between ns.example. and www.example.; the
	// wildcard *.example. sorts before example.'s first name.
	nxProof := append(append([]dns.RR(nil), soa...), append(
		ex.sign(t, rr(t, "ns.example. 300 IN NSEC www.example. A RRSIG NSEC")),
		ex.sign(t, rr(t, "example. 300 IN NSEC ns.example. NS SOA RRSIG NSEC DNSKEY"))...)...)
	for _, tc := range []struct {
		label   string
		name    string
		qtype   uint16
		m       *dns.Msg
		verdict Verdict
		ede     uint16
	}{
		{"signed A", "www.example.", dns.TypeA, reply(0, signed, nil), Secure, 0},
		{"altered after signing", "www.example.", dns.TypeA, reply(0, altered, nil), Bogus, edeBogus},
		{"expired signature", "www.example.", dns.TypeA, reply(0, expired, nil), Bogus, edeExpired},
		{"signature not yet valid", "www.example.", dns.TypeA, reply(0, future, nil), Bogus, edeNotYetValid},
		{"signatures stripped", "www.example.", dns.TypeA, reply(0, []dns.RR{a}, nil), Bogus, edeRRSIGsMissing},
		{"NODATA", "www.example.", dns.TypeTXT, reply(0, nil, append(append([]dns.RR(nil), soa...),
			ex.sign(t, rr(t, "www.example. 300 IN NSEC zzz.example. A RRSIG NSEC"))...)), Secure, 0},
		{"NODATA whose NSEC has the type", "www.example.", dns.TypeA, reply(0, nil, append(append([]dns.RR(nil), soa...),
			ex.sign(t, rr(t, "www.example. 300 IN NSEC zzz.example. A RRSIG NSEC"))...)), Bogus, edeBogus},
		{"NXDOMAIN", "nx.example.", dns.TypeA, reply(dns.RcodeNameError, nil, nxProof), Secure, 0},
		{"NXDOMAIN without the wildcard's NSEC", "nx.example.", dns.TypeA, reply(dns.RcodeNameError, nil, nxProof[:4]), Bogus, edeNSECMissing},
		{"NXDOMAIN without proof", "nx.example.", dns.TypeA, reply(dns.RcodeNameError, nil, soa[:1]), Bogus, 0},
		{"unsigned delegation", "www.insecure.", dns.TypeA, reply(0, []dns.RR{rr(t, "www.insecure. 300 IN A 192.0.2.7")}, nil), Insecure, 0},
	} {
		expect(t, tc.label, v.Validate(context.Background(), tc.name, tc.qtype, tc.m), tc.verdict, tc.ede)
	}
	// Keys and proofs are kept: the same answer again fetches nothing.
	before := tr.up.count()
	expect(t, "signed A again", v.Validate(context.Background(), "www.example.", dns.TypeA, reply(0, signed, nil)), Secure, 0)
	expect(t, "unsigned delegation again", v.Validate(context.Background(), "www.insecure.", dns.TypeA,
		reply(0, []dns.RR{rr(t, "www.insecure. 300 IN A 192.0.2.7")}, nil)), Insecure, 0)
	// Below a proven unsigned delegation, a new name needs no question.
	expect(t, "another name under the unsigned delegation", v.Validate(context.Background(), "mail.insecure.", dns.TypeA,
		reply(0, []dns.RR{rr(t, "mail.insecure. 300 IN A 192.0.2.8")}, nil)), Insecure, 0)
	if n := tr.up.count() - before; n != 0 {
		t.Errorf("validating again fetched %d times, want 0 (keys and unsigned delegations cached)", n)
	}
}

func TestValidateNoAnchorAndNegativeAnchor(t *testing.T) {
	tr := newSignedTree(t)
	v, err := New(Config{Anchors: []dns.RR{tr.example.ds()}, NegativeAnchors: []string{"private.example."},
		Fetch: tr.up.fetch, Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	tr.example.ds()
	for _, name := range []string{"www.other.", "host.private.example."} {
		if v.Covers(name) {
			t.Errorf("%s is covered", name)
		}
		expect(t, name, v.Validate(context.Background(), name, dns.TypeA, reply(0, []dns.RR{rr(t, name+" 300 IN A 192.0.2.1")}, nil)), Insecure, 0)
	}
	if tr.up.count() != 0 {
		t.Errorf("%d fetches for names nothing covers", tr.up.count())
	}
}

// TestKeyTrapIsBounded: many signatures with the key's tag (KeyTrap,
// CVE-2023-50387) cost at most Limits.Verifications checks; a DNSKEY set
// larger than Limits.Keys is bogus.
func TestKeyTrapIsBounded(t *testing.T) {
	tr := newSignedTree(t)
	v := tr.validator(t, Limits{Verifications: 8})
	a := rr(t, "www.example. 300 IN A 192.0.2.1")
	good := signWith(t, tr.example.zsk, tr.example.zskPriv, []dns.RR{a}, testNow.Add(-time.Hour), testNow.Add(time.Hour))
	answer := []dns.RR{a}
	for range 500 {
		bad := *good
		bad.Signature = strings.Repeat("A", len(good.Signature)-4) + "AA=="
		answer = append(answer, &bad)
	}
	start := time.Now()
	r := v.Validate(context.Background(), "www.example.", dns.TypeA, reply(0, answer, nil))
	expect(t, "500 bad signatures", r, Bogus, edeBogus)
	if !strings.Contains(r.Reason, "work limit") {
		t.Errorf("500 bad signatures: %q, want the work limit", r.Reason)
	}
	t.Logf("500 bad signatures judged in %v", time.Since(start))

	many := newTestZone(t, "many.")
	up := newFakeUpstream()
	keys := []dns.RR{many.ksk, many.zsk}
	for range DefaultKeys {
		k, _ := newKey(t, "many.", 256)
		keys = append(keys, k)
	}
	up.set("many.", dns.TypeDNSKEY, dns.RcodeSuccess,
		append(keys, signWith(t, many.ksk, many.kskPriv, keys, testNow.Add(-time.Hour), testNow.Add(time.Hour))), nil)
	v = newTestValidator(t, up, []dns.RR{many.ds()}, Limits{}, 0)
	expect(t, fmt.Sprintf("%d keys", len(keys)), v.Validate(context.Background(), "www.many.", dns.TypeA,
		reply(0, many.sign(t, rr(t, "www.many. 300 IN A 192.0.2.1")), nil)), Bogus, edeBogus)
}

// nsec3Proof is an NXDOMAIN proof of NSEC3 records (owners hashed with
// iterations) signed by z; they need not prove anything.
func nsec3Proof(t testing.TB, z *testZone, iterations uint16, owners ...string) []dns.RR {
	var out []dns.RR
	for _, o := range owners {
		h := dns.HashName(o, dns.SHA1, 0, "")
		n := &dns.NSEC3{Hdr: dns.RR_Header{Name: h + "." + z.name, Rrtype: dns.TypeNSEC3, Class: dns.ClassINET, Ttl: 300},
			Hash: dns.SHA1, Iterations: iterations, NextDomain: strings.Repeat("0", 32), HashLength: 20,
			TypeBitMap: []uint16{dns.TypeA, dns.TypeRRSIG}}
		out = append(out, z.sign(t, n)...)
	}
	return out
}

// TestNSEC3IterationsAreCapped: past the limit nothing is hashed and the
// proof is insecure (RFC 9276); below it, the hashes of one question are
// bounded however many labels the name has.
func TestNSEC3IterationsAreCapped(t *testing.T) {
	tr := newSignedTree(t)
	v := tr.validator(t, Limits{NSEC3Hashes: 1}) // any hash would exceed it
	proof := nsec3Proof(t, tr.example, 500, "a.example.", "b.example.", "c.example.")
	r := v.Validate(context.Background(), "nx.example.", dns.TypeA, reply(dns.RcodeNameError, nil, proof))
	expect(t, "500 iterations", r, Insecure, edeNSEC3Iteration)

	v = tr.validator(t, Limits{})
	long := strings.Repeat("x.", 100) + "example."
	proof = nsec3Proof(t, tr.example, DefaultNSEC3Iterations, "a.example.", "b.example.", "c.example.")
	start := time.Now()
	r = v.Validate(context.Background(), long, dns.TypeA, reply(dns.RcodeNameError, nil, proof))
	expect(t, "a 102-label name at 150 iterations", r, Bogus, edeBogus)
	if !strings.Contains(r.Reason, "NSEC3 hashes") {
		t.Errorf("a 102-label name: %q, want the hash limit", r.Reason)
	}
	t.Logf("102-label NSEC3 proof judged in %v", time.Since(start))
}

// TestLongChainIsBounded: an unsigned answer for a deep name walks up
// one label per DS question, at most Limits.Depth of them and
// Limits.Fetches fetches; a CNAME chain is followed at most maxChain links.
func TestLongChainIsBounded(t *testing.T) {
	tr := newSignedTree(t)
	tr.up.fallback = func(name string, qtype uint16) *dns.Msg {
		return reply(0, nil, []dns.RR{rr(t, "example. 300 IN SOA ns.example. h.example. 1 2 3 4 300")}) // unsigned
	}
	v := tr.validator(t, Limits{})
	deep := strings.Repeat("d.", 100) + "example."
	r := v.Validate(context.Background(), deep, dns.TypeA, reply(0, []dns.RR{rr(t, deep+" 300 IN A 192.0.2.1")}, nil))
	expect(t, "100 unsigned labels", r, Bogus, edeBogus)
	if n := tr.up.count(); n > DefaultFetches {
		t.Errorf("100 unsigned labels: %d fetches, want at most %d", n, DefaultFetches)
	}

	var chain []dns.RR
	for i := range 20 {
		chain = append(chain, tr.example.sign(t, rr(t, fmt.Sprintf("c%d.example. 300 IN CNAME c%d.example.", i, i+1)))...)
	}
	r = v.Validate(context.Background(), "c0.example.", dns.TypeA, reply(0, chain, nil))
	expect(t, "20 CNAMEs", r, Bogus, edeBogus)
}

// TestKeyCacheIsBounded: keys of more zones than CacheSize evict the least
// recently used.
func TestKeyCacheIsBounded(t *testing.T) {
	root := newTestZone(t, ".")
	up := newFakeUpstream()
	up.serveKeys(t, root)
	v := newTestValidator(t, up, []dns.RR{root.ds()}, Limits{}, 4)
	for i := range 10 {
		z := newTestZone(t, fmt.Sprintf("z%d.", i))
		up.serveKeys(t, z)
		up.set(z.name, dns.TypeDS, 0, root.sign(t, z.ds()), nil)
		r := v.Validate(context.Background(), "www."+z.name, dns.TypeA, reply(0, z.sign(t, rr(t, "www."+z.name+" 300 IN A 192.0.2.1")), nil))
		expect(t, z.name, r, Secure, 0)
	}
	if n := v.zones.Len(); n > 4 {
		t.Errorf("%d zones cached, want at most 4", n)
	}
}

func TestParseAnchors(t *testing.T) {
	good := ". 172800 IN DS 20326 8 2 E06D44B80B8F1D39A95C0B0D7C65D08458E880409BBC683457104237C7F8EC8D\n"
	if rrs, err := ParseAnchors([]byte(good), "root.ds"); err != nil || len(rrs) != 1 {
		t.Errorf("root.ds: %v, %v", rrs, err)
	}
	for _, bad := range []string{"", "example. 300 IN A 192.0.2.1\n", "example. 300 IN DNSKEY 0 3 15 AAAA\n", "garbage"} {
		if _, err := ParseAnchors([]byte(bad), "f"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if rrs, err := ReadAnchors(DefaultAnchorFile); err == nil && len(rrs) == 0 {
		t.Errorf("%s: no anchors", DefaultAnchorFile)
	}
}

// TestNSEC3OptOutDelegation: an unsigned delegation in an NSEC3 opt-out
// span (how com. and net. prove most of theirs) is insecure, and names
// below it need no further question.
func TestNSEC3OptOutDelegation(t *testing.T) {
	tr := newSignedTree(t)
	ex := tr.example
	nsec3 := func(owner, next string, flags uint8, types ...uint16) *dns.NSEC3 {
		return &dns.NSEC3{Hdr: dns.RR_Header{Name: owner + ".example.", Rrtype: dns.TypeNSEC3, Class: dns.ClassINET, Ttl: 300},
			Hash: dns.SHA1, Flags: flags, Iterations: 0, NextDomain: next, HashLength: 20, TypeBitMap: types}
	}
	apex := dns.HashName("example.", dns.SHA1, 0, "")
	// The apex's record spans nothing past the apex itself.
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUV"
	last := strings.IndexByte(digits, apex[len(apex)-1])
	if last == len(digits)-1 {
		t.Skip("the apex hash ends in V")
	}
	afterApex := apex[:len(apex)-1] + string(digits[last+1])
	proof := append(ex.sign(t, rr(t, "example. 300 IN SOA ns.example. h.example. 1 2 3 4 300")),
		ex.sign(t, nsec3(apex, afterApex, 0, dns.TypeNS, dns.TypeSOA, dns.TypeRRSIG, dns.TypeDNSKEY, dns.TypeNSEC3PARAM))...)
	proof = append(proof, ex.sign(t, nsec3(strings.Repeat("0", 32), strings.Repeat("V", 32), 1, dns.TypeNS))...)
	tr.up.set("optout.example.", dns.TypeDS, 0, nil, proof)
	tr.up.set("www.optout.example.", dns.TypeDS, 0, nil,
		[]dns.RR{rr(t, "optout.example. 300 IN SOA ns.optout.example. h.optout.example. 1 2 3 4 300")})
	v := tr.validator(t, Limits{})
	expect(t, "www.optout.example.", v.Validate(context.Background(), "www.optout.example.", dns.TypeA,
		reply(0, []dns.RR{rr(t, "www.optout.example. 300 IN A 192.0.2.9")}, nil)), Insecure, 0)
	before := tr.up.count()
	expect(t, "mail.optout.example.", v.Validate(context.Background(), "mail.optout.example.", dns.TypeA,
		reply(0, []dns.RR{rr(t, "mail.optout.example. 300 IN A 192.0.2.10")}, nil)), Insecure, 0)
	if n := tr.up.count() - before; n != 0 {
		t.Errorf("a second name under the opt-out delegation fetched %d times, want 0", n)
	}
	// Without the opt-out flag the same span proves nothing for a DS.
	tr.up.set("strict.example.", dns.TypeDS, 0, nil, append(proof[:4:4],
		ex.sign(t, nsec3(strings.Repeat("0", 32), strings.Repeat("V", 32), 0, dns.TypeNS))...))
	expect(t, "www.strict.example.", v.Validate(context.Background(), "www.strict.example.", dns.TypeA,
		reply(0, []dns.RR{rr(t, "www.strict.example. 300 IN A 192.0.2.11")}, nil)), Bogus, 0)
}

// TestSecureTTLIsCapped: a secure answer is kept no longer than its
// signature's original TTL nor past its expiry (RFC 4035 §5.3.3).
func TestSecureTTLIsCapped(t *testing.T) {
	tr := newSignedTree(t)
	v := tr.validator(t, Limits{})
	ex := tr.example
	a := rr(t, "www.example. 300 IN A 192.0.2.1")
	for _, tc := range []struct {
		until time.Time
		want  uint32
	}{{testNow.Add(time.Hour), 300}, {testNow.Add(100 * time.Second), 100}} {
		sig := signWith(t, ex.zsk, ex.zskPriv, []dns.RR{a}, testNow.Add(-time.Hour), tc.until)
		r := v.Validate(context.Background(), "www.example.", dns.TypeA, reply(0, []dns.RR{a, sig}, nil))
		if r.Verdict != Secure || r.TTL != tc.want {
			t.Errorf("signature until %v: %s TTL %d, want secure TTL %d", tc.until, r.Verdict, r.TTL, tc.want)
		}
	}
}
