package dnssec

import (
	"strings"
	"time"

	"github.com/miekg/dns"
)

// The chain of trust, bottom-up: a signature names its zone (the signer),
// the zone's DS is asked of the upstreams and is signed by the zone above
// (whose keys are found the same way), until an anchor. Only real zone cuts
// are walked, two queries each, and what is learnt is kept per zone. An
// answer without signatures has no signer to start from: its name's DS
// reply says which zone holds it (the reply's signer, or the proof that
// the name is an unsigned delegation), and a reply without signatures
// moves the question one label up (unsignedAt).

// zoneInfo is what is known of a zone's keys, or of the zone holding a
// name: secure with its validated keys, insecure, or bogus with why.
type zoneInfo struct {
	res     Result
	keys    []*dns.DNSKEY
	tags    []uint16 // keys' tags, computed once
	expires time.Time
	// transient: a failure to reach the upstreams, which is not kept.
	transient bool
}

// Cache key prefixes: a zone's keys, and the verdict on unsigned data at a
// name.
const (
	keysEntry     = "K"
	unsignedEntry = "U"
	// delegationEntry: a proven unsigned delegation, which makes every
	// name below it insecure without another question (unless an anchor
	// of its own sits between).
	delegationEntry = "D"
)

func (w *work) cached(key string) (*zoneInfo, bool) {
	z, ok := w.v.zones.Get(key)
	if !ok || !w.now.Before(z.expires) {
		return nil, false
	}
	return z, true
}

func (w *work) store(key string, z *zoneInfo) {
	if z.transient {
		return
	}
	switch {
	case z.res.Verdict == Bogus:
		z.expires = w.now.Add(bogusTTL)
	case z.expires.IsZero():
		z.expires = w.now.Add(maxCacheTTL)
	}
	w.v.zones.Add(key, z)
}

func info(r Result) *zoneInfo { return &zoneInfo{res: r} }

func unreachable(err error) *zoneInfo {
	return &zoneInfo{res: bogus(edeNoReachable, "fetching keys: "+err.Error()), transient: true}
}

func workLimit(what string) *zoneInfo {
	return &zoneInfo{res: bogus(edeBogus, "work limit: "+what), transient: true}
}

// keysFor returns zone's validated keys, or why there are none; dsReply,
// if not nil, is the reply to zone's DS query, already fetched.
func (w *work) keysFor(zone string) *zoneInfo { return w.keysWith(zone, nil) }

func (w *work) keysWith(zone string, dsReply *dns.Msg) *zoneInfo {
	zone = dns.CanonicalName(zone)
	if z, ok := w.cached(keysEntry + zone); ok {
		return z
	}
	if !w.enter() {
		return workLimit("chain depth")
	}
	defer w.leave()
	z := w.loadKeys(zone, dsReply)
	w.store(keysEntry+zone, z)
	return z
}

func (w *work) loadKeys(zone string, m *dns.Msg) *zoneInfo {
	if anchors, ok := w.v.anchors[zone]; ok {
		return w.dnskeys(zone, anchors, nil)
	}
	if w.v.negativeAt(zone) || w.v.anchorFor(zone) == "" {
		return info(insecure("no trust anchor for " + zone))
	}
	if m == nil {
		var err error
		if m, err = w.fetch(zone, dns.TypeDS); err != nil {
			if err == errWorkLimit {
				return workLimit("fetches")
			}
			return unreachable(err)
		}
	}
	if ds := find(groupRRsets(m.Answer), zone, dns.TypeDS); ds != nil && m.Rcode == dns.RcodeSuccess {
		// A DS is its parent's (RFC 4035 §5.2): a signature by the zone
		// itself proves nothing.
		sigs := ds.sigs[:0:0]
		for _, s := range ds.sigs {
			if !equalNames(dns.CanonicalName(s.SignerName), zone) {
				sigs = append(sigs, s)
			}
		}
		if len(sigs) == 0 {
			return info(w.unsignedAt(zone, m, edeRRSIGsMissing))
		}
		ds.sigs = sigs
		if r := w.verifyRRset(ds); r.Verdict != Secure {
			return info(r)
		}
		return w.dnskeys(zone, ds.rrs, ds.rrs)
	}
	r, delegation, signed := w.proveDenial(zone, dns.TypeDS, m.Rcode, m)
	switch {
	case !signed:
		return info(w.unsignedAt(zone, m, edeRRSIGsMissing))
	case delegation && r.Verdict != Bogus: // proven, or in an opt-out span
		return info(w.unsignedDelegation(zone, m).res)
	case r.Verdict != Secure:
		return info(r)
	}
	return info(bogus(edeDNSKEYMissing, "signer "+zone+" is no signed zone"))
}

// dnskeys fetches zone's DNSKEY RRset and validates it with trust (DS
// records of the parent, or the anchor's DS or DNSKEY records): one key
// the trust names must sign the set. ttlFrom are records whose TTLs also
// bound how long the keys are kept.
func (w *work) dnskeys(zone string, trust []dns.RR, ttlFrom []dns.RR) *zoneInfo {
	var usable []dns.RR
	for _, t := range trust {
		switch t := t.(type) {
		case *dns.DS:
			if supportedDigest(t.DigestType) && supportedAlgorithm(t.Algorithm) {
				usable = append(usable, t)
			}
		case *dns.DNSKEY:
			if supportedAlgorithm(t.Algorithm) {
				usable = append(usable, t)
			}
		}
	}
	if len(usable) == 0 {
		// RFC 6840 §5.2: only algorithms we cannot check: insecure.
		return info(insecure("no supported algorithm for " + zone))
	}
	m, err := w.fetch(zone, dns.TypeDNSKEY)
	if err != nil {
		if err == errWorkLimit {
			return workLimit("fetches")
		}
		return unreachable(err)
	}
	set := find(groupRRsets(m.Answer), zone, dns.TypeDNSKEY)
	if set == nil {
		return info(bogus(edeDNSKEYMissing, "no DNSKEY for "+zone))
	}
	if len(set.rrs) > w.v.limits.Keys {
		return info(bogus(edeBogus, "too many DNSKEYs for "+zone))
	}
	all := &zoneInfo{}
	trusted := &zoneInfo{}
	for _, rr := range set.rrs {
		k := rr.(*dns.DNSKEY)
		tag := k.KeyTag()
		all.keys, all.tags = append(all.keys, k), append(all.tags, tag)
		if trustedKey(k, tag, usable) {
			trusted.keys, trusted.tags = append(trusted.keys, k), append(trusted.tags, tag)
		}
	}
	if len(trusted.keys) == 0 {
		return info(bogus(edeDNSKEYMissing, "no DNSKEY of "+zone+" matches its DS or anchor"))
	}
	res := bogus(edeRRSIGsMissing, "DNSKEY of "+zone+" not signed")
	for _, sig := range set.sigs {
		if !equalNames(dns.CanonicalName(sig.SignerName), zone) {
			continue
		}
		if r := w.verifySig(sig, set, trusted); r.Verdict != Secure {
			res = r
			continue
		}
		all.res = secure()
		all.expires = w.now.Add(ttlOf(set.rrs, ttlFrom, sig.OrigTtl))
		return all
	}
	return info(res)
}

// trustedKey reports whether k is one trust names.
func trustedKey(k *dns.DNSKEY, tag uint16, trust []dns.RR) bool {
	for _, t := range trust {
		switch t := t.(type) {
		case *dns.DS:
			if t.KeyTag == tag && t.Algorithm == k.Algorithm {
				if ds := k.ToDS(t.DigestType); ds != nil && strings.EqualFold(ds.Digest, t.Digest) {
					return true
				}
			}
		case *dns.DNSKEY:
			if t.Flags == k.Flags && t.Protocol == k.Protocol && t.Algorithm == k.Algorithm && t.PublicKey == k.PublicKey {
				return true
			}
		}
	}
	return false
}

// ttlOf is the least TTL of the records (and orig, a signature's original
// TTL), at least a few seconds and at most maxCacheTTL.
func ttlOf(a, b []dns.RR, orig uint32) time.Duration {
	least := min(orig, uint32(maxCacheTTL/time.Second))
	for _, rr := range append(a[:len(a):len(a)], b...) {
		least = min(least, rr.Header().Ttl)
	}
	return max(time.Duration(least)*time.Second, 5*time.Second)
}

// unsignedAt is the verdict on unsigned records owned by name: insecure
// when a signed parent proves an unsigned delegation at or above it (or
// no anchor covers it), else bogus with ede. m, if not nil, is the reply
// to name's DS query.
func (w *work) unsignedAt(name string, m *dns.Msg, ede uint16) Result {
	name = dns.CanonicalName(name)
	if z, ok := w.cached(unsignedEntry + name); ok {
		return withEDE(z.res, ede)
	}
	z := w.classifyUnsigned(name, m, ede)
	w.store(unsignedEntry+name, z)
	return z.res
}

func withEDE(r Result, ede uint16) Result {
	if r.Verdict == Bogus && r.EDE == edeRRSIGsMissing {
		r.EDE = ede
	}
	return r
}

func (w *work) classifyUnsigned(name string, m *dns.Msg, ede uint16) *zoneInfo {
	for n := name; ; {
		if _, ok := w.cached(delegationEntry + n); ok {
			return info(insecure("unsigned delegation " + n))
		}
		if _, ok := w.v.anchors[n]; ok {
			break
		}
		p, ok := parent(n)
		if !ok {
			break
		}
		n = p
	}
	steps := 0
	defer func() { w.depth -= steps }()
	for n := name; ; {
		if w.v.negativeAt(n) || w.v.anchorFor(n) == "" {
			return info(insecure("no trust anchor for " + n))
		}
		if _, ok := w.v.anchors[n]; ok {
			// Nothing below proved an unsigned delegation: the data is
			// in the anchor's signed space. An anchor's own DS is not
			// asked: its parent may be no zone at all.
			return w.insideSigned(w.keysFor(n), name, ede)
		}
		if m == nil {
			var err error
			if m, err = w.fetch(n, dns.TypeDS); err != nil {
				if err == errWorkLimit {
					return workLimit("fetches")
				}
				return unreachable(err)
			}
		}
		if hasSignatures(m) {
			if ds := find(groupRRsets(m.Answer), n, dns.TypeDS); ds != nil {
				return w.insideSigned(w.keysWith(n, m), name, ede)
			}
			r, delegation, signed := w.proveDenial(n, dns.TypeDS, m.Rcode, m)
			switch {
			case signed && delegation && r.Verdict != Bogus: // proven, or in an opt-out span
				return w.unsignedDelegation(n, m)
			case signed && r.Verdict != Secure:
				return info(r)
			case signed:
				return info(bogus(ede, "unsigned "+name+" in a signed zone"))
			}
		}
		// Nothing signed about n: the zone holding it is unsigned, or
		// the path strips signatures; the name above decides.
		p, ok := parent(n)
		if !ok || !w.enter() {
			return workLimit("chain depth")
		}
		steps++
		n, m = p, nil
	}
}

// unsignedDelegation keeps and returns the verdict on a delegation to an
// unsigned zone at name, which m's proof showed, for as long as the proof
// lives: every name below it is insecure without another question.
func (w *work) unsignedDelegation(name string, m *dns.Msg) *zoneInfo {
	d := info(insecure("unsigned delegation " + name))
	d.expires = w.now.Add(ttlOf(m.Ns, nil, uint32(maxCacheTTL/time.Second)))
	w.store(delegationEntry+name, d)
	return info(d.res)
}

// insideSigned is the verdict on unsigned data at name inside the zone
// whose keys are z.
func (w *work) insideSigned(z *zoneInfo, name string, ede uint16) *zoneInfo {
	if z.res.Verdict != Secure {
		return info(z.res) // z is the zone's own entry: kept apart
	}
	return info(bogus(ede, "unsigned "+name+" in a signed zone"))
}

func hasSignatures(m *dns.Msg) bool {
	for _, sec := range [][]dns.RR{m.Answer, m.Ns} {
		for _, rr := range sec {
			if rr.Header().Rrtype == dns.TypeRRSIG {
				return true
			}
		}
	}
	return false
}
