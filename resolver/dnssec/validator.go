package dnssec

import (
	"context"
	"errors"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/miekg/dns"
)

// Fetcher asks the upstreams for name and qtype with DO and CD set (so a
// site resolver passes what it would call bogus through, and its
// signatures with it) and returns the reply.
type Fetcher func(ctx context.Context, name string, qtype uint16) (*dns.Msg, error)

// Limits bound the work of one question (docs/security.md): each is a
// number of operations, zero meaning its Default.
type Limits struct {
	// Verifications: signature checks (RRSIG.Verify calls). KeyTrap
	// (CVE-2023-50387) is many keys with one tag and many signatures.
	Verifications int
	// Fetches: DS and DNSKEY queries sent for one question.
	Fetches int
	// Depth: zones and labels walked from the answer towards the anchor.
	Depth int
	// NSEC3Iterations: NSEC3 records with more iterations make the proof
	// insecure, unhashed (RFC 9276 §3.2, EDE 27).
	NSEC3Iterations int
	// NSEC3Hashes: SHA-1 computations for NSEC3 proofs of one question
	// (each name hashed costs its iterations + 1).
	NSEC3Hashes int
	// Keys: DNSKEYs one zone may publish; a larger set is bogus.
	Keys int
}

// Defaults of Limits and Config.
const (
	DefaultVerifications   = 32
	DefaultFetches         = 24
	DefaultDepth           = 16
	DefaultNSEC3Iterations = 150 // what unbound and BIND settled on before RFC 9276
	DefaultNSEC3Hashes     = 2000
	DefaultKeys            = 32
	DefaultCacheSize       = 1024 // zones
	// maxCacheTTL caps how long keys and proofs are kept; bogus results
	// are kept bogusTTL (unbound's val-bogus-ttl), so a broken zone is not
	// fetched for every question, yet is seen fixed within a minute.
	maxCacheTTL = time.Hour
	bogusTTL    = time.Minute
	// maxChain bounds the CNAME and DNAME links followed in one answer.
	maxChain = 16
)

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.Verifications, DefaultVerifications)
	def(&l.Fetches, DefaultFetches)
	def(&l.Depth, DefaultDepth)
	def(&l.NSEC3Iterations, DefaultNSEC3Iterations)
	def(&l.NSEC3Hashes, DefaultNSEC3Hashes)
	def(&l.Keys, DefaultKeys)
	return l
}

// Config is what a Validator is made of.
type Config struct {
	// Anchors are DS or DNSKEY records (ParseAnchors); their owners are
	// the secure entry points.
	Anchors []dns.RR
	// NegativeAnchors are names at and below which nothing is validated
	// (RFC 7646): private zones under a signed parent.
	NegativeAnchors []string
	// Fetch asks the upstreams for DS and DNSKEY records.
	Fetch Fetcher
	// Now is the clock signatures and the key cache are judged by; nil =
	// time.Now.
	Now func() time.Time
	// CacheSize: zones whose keys (or proven insecurity) are kept; 0 =
	// DefaultCacheSize.
	CacheSize int
	Limits    Limits
}

// Validator validates answers; safe for concurrent use.
type Validator struct {
	anchors  map[string][]dns.RR
	negative []string
	fetch    Fetcher
	now      func() time.Time
	limits   Limits
	zones    *lru.Cache[string, *zoneInfo]
}

// New makes a Validator; it fails without anchors or a Fetcher.
func New(c Config) (*Validator, error) {
	if len(c.Anchors) == 0 {
		return nil, errors.New("no trust anchors")
	}
	if c.Fetch == nil {
		return nil, errors.New("no fetcher")
	}
	v := &Validator{anchors: map[string][]dns.RR{}, fetch: c.Fetch, now: c.Now, limits: c.Limits.withDefaults()}
	if v.now == nil {
		v.now = time.Now
	}
	for _, rr := range c.Anchors {
		owner := dns.CanonicalName(rr.Header().Name)
		v.anchors[owner] = append(v.anchors[owner], rr)
	}
	for _, n := range c.NegativeAnchors {
		v.negative = append(v.negative, dns.CanonicalName(n))
	}
	size := c.CacheSize
	if size <= 0 {
		size = DefaultCacheSize
	}
	v.zones, _ = lru.New[string, *zoneInfo](size) // size > 0
	return v, nil
}

// Covers reports whether answers for name are validated at all: an anchor
// is at or above it and no negative anchor is.
func (v *Validator) Covers(name string) bool {
	name = dns.CanonicalName(name)
	return v.anchorFor(name) != "" && !v.negativeAt(name)
}

func (v *Validator) negativeAt(name string) bool {
	for _, n := range v.negative {
		if under(name, n) {
			return true
		}
	}
	return false
}

// anchorFor is the closest anchor at or above name, "" for none.
func (v *Validator) anchorFor(name string) string {
	for n := name; ; {
		if _, ok := v.anchors[n]; ok {
			return n
		}
		p, ok := parent(n)
		if !ok {
			return ""
		}
		n = p
	}
}

// Validate judges m, the reply to qname and qtype, fetching the keys it
// lacks within the question's work limits.
func (v *Validator) Validate(ctx context.Context, qname string, qtype uint16, m *dns.Msg) Result {
	qname = dns.CanonicalName(qname)
	if v.negativeAt(qname) {
		return insecure("negative trust anchor")
	}
	if v.anchorFor(qname) == "" {
		return insecure("no trust anchor")
	}
	w := &work{v: v, ctx: ctx, now: v.now()}
	switch m.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError:
	default:
		return insecure("rcode " + dns.RcodeToString[m.Rcode])
	}
	answer := groupRRsets(m.Answer)
	res := secure()
	for _, set := range answer {
		if set.typ == dns.TypeCNAME && len(set.sigs) == 0 && synthesized(answer, set) {
			continue // RFC 6672 §5.3.1: the DNAME's signature covers it
		}
		r := w.verifyRRset(set)
		if set.verifiedBy != nil {
			w.verified(set.verifiedBy)
		}
		if r.Verdict == Secure && set.wildcard != "" {
			r = w.wildcardProof(set.name, set.wildcardLabels, m)
		}
		if res = worse(res, r); res.Verdict == Bogus {
			return res
		}
	}
	// The chain's end: data of qtype, or a name whose denial the
	// authority section must prove.
	name := qname
	for i := 0; ; i++ {
		if i == maxChain {
			return worse(res, bogus(edeBogus, "CNAME chain too long"))
		}
		if find(answer, name, qtype) != nil || qtype == dns.TypeANY {
			return w.withTTL(res)
		}
		if c := find(answer, name, dns.TypeCNAME); c != nil {
			name = dns.CanonicalName(c.rrs[0].(*dns.CNAME).Target)
			continue
		}
		if target, ok := dnameTarget(answer, name); ok {
			name = target
			continue
		}
		break
	}
	return w.withTTL(worse(res, w.denial(name, qtype, m.Rcode, m)))
}

func (w *work) withTTL(r Result) Result {
	if r.Verdict == Secure {
		r.TTL = w.ttl
	}
	return r
}

// work is one question's validation: its clock reading and budgets.
type work struct {
	v             *Validator
	ctx           context.Context
	now           time.Time
	verifications int
	fetches       int
	depth         int
	hashes        int
	// ttl is the least of the verified signatures' original TTLs and
	// seconds to expiry (Result.TTL); 0 until one verified.
	ttl uint32
}

// verified notes a signature that verified: its limits on the answer's
// TTL.
func (w *work) verified(sig *dns.RRSIG) {
	left := int64(sig.Expiration) - w.now.Unix()
	ttl := uint32(max(min(left, int64(sig.OrigTtl)), 1))
	if w.ttl == 0 || ttl < w.ttl {
		w.ttl = ttl
	}
}

var errWorkLimit = errors.New("work limit reached")

// fetch asks for name and qtype within the question's fetch budget.
func (w *work) fetch(name string, qtype uint16) (*dns.Msg, error) {
	if w.fetches >= w.v.limits.Fetches {
		return nil, errWorkLimit
	}
	w.fetches++
	return w.v.fetch(w.ctx, name, qtype)
}

// enter takes one step of depth; leave gives it back.
func (w *work) enter() bool {
	if w.depth >= w.v.limits.Depth {
		return false
	}
	w.depth++
	return true
}

func (w *work) leave() { w.depth-- }

// rrset is one RRset of a section with the signatures that cover it.
type rrset struct {
	name string // canonical
	typ  uint16
	rrs  []dns.RR
	sigs []*dns.RRSIG
	// wildcard is set once a signature verified with fewer labels than
	// the owner has: the answer was expanded from a wildcard with
	// wildcardLabels labels below the root (RFC 4035 §5.3.4).
	wildcard       string
	wildcardLabels int
	// verifiedBy is the signature that verified it.
	verifiedBy *dns.RRSIG
}

// groupRRsets splits a section into RRsets, each with its RRSIGs.
func groupRRsets(section []dns.RR) []*rrset {
	var sets []*rrset
	var sigs []*dns.RRSIG
	for _, rr := range section {
		h := rr.Header()
		if h.Class != dns.ClassINET || h.Rrtype == dns.TypeOPT {
			continue
		}
		if s, ok := rr.(*dns.RRSIG); ok {
			sigs = append(sigs, s)
			continue
		}
		name := dns.CanonicalName(h.Name)
		if set := find(sets, name, h.Rrtype); set != nil {
			set.rrs = append(set.rrs, rr)
			continue
		}
		sets = append(sets, &rrset{name: name, typ: h.Rrtype, rrs: []dns.RR{rr}})
	}
	for _, s := range sigs {
		if set := find(sets, dns.CanonicalName(s.Hdr.Name), s.TypeCovered); set != nil {
			set.sigs = append(set.sigs, s)
		}
	}
	return sets
}

func find(sets []*rrset, name string, typ uint16) *rrset {
	for _, s := range sets {
		if s.typ == typ && equalNames(s.name, name) {
			return s
		}
	}
	return nil
}

// dnameTarget is name rewritten by a DNAME of the answer above it.
func dnameTarget(sets []*rrset, name string) (string, bool) {
	for _, s := range sets {
		if s.typ != dns.TypeDNAME || equalNames(s.name, name) || !under(name, s.name) {
			continue
		}
		target := name[:len(name)-len(s.name)] + dns.CanonicalName(s.rrs[0].(*dns.DNAME).Target)
		if _, ok := dns.IsDomainName(target); ok {
			return target, true
		}
	}
	return "", false
}

// synthesized reports whether the unsigned CNAME set is what a DNAME of
// the answer says its owner becomes.
func synthesized(sets []*rrset, set *rrset) bool {
	target, ok := dnameTarget(sets, set.name)
	return ok && equalNames(target, dns.CanonicalName(set.rrs[0].(*dns.CNAME).Target))
}
