package dnssec

import (
	"fmt"
	"strings"

	"github.com/miekg/dns"
)

// supportedAlgorithm: the DNSKEY algorithms RRSIG.Verify checks with Go's
// crypto. Others make a zone insecure, not bogus (RFC 6840 §5.2).
func supportedAlgorithm(alg uint8) bool {
	switch alg {
	case dns.RSASHA1, dns.RSASHA1NSEC3SHA1, dns.RSASHA256, dns.RSASHA512,
		dns.ECDSAP256SHA256, dns.ECDSAP384SHA384, dns.ED25519:
		return true
	}
	return false
}

// supportedDigest: the DS digest types DNSKEY.ToDS computes.
func supportedDigest(t uint8) bool {
	return t == dns.SHA1 || t == dns.SHA256 || t == dns.SHA384
}

// verifyRRset judges one RRset: secure when one of its signatures, by a
// zone at or above its owner, verifies with that zone's validated keys
// now; insecure when its owner is in provably unsigned space.
func (w *work) verifyRRset(set *rrset) Result {
	if w.v.negativeAt(set.name) || w.v.anchorFor(set.name) == "" {
		return insecure("no trust anchor for " + set.name)
	}
	if len(set.sigs) == 0 {
		return w.unsignedAt(set.name, nil, edeRRSIGsMissing)
	}
	res := bogus(edeRRSIGsMissing, fmt.Sprintf("no usable signature for %s %s", set.name, dns.TypeToString[set.typ]))
	for _, sig := range set.sigs {
		signer := dns.CanonicalName(sig.SignerName)
		if !under(set.name, signer) || int(sig.Labels) > dns.CountLabel(set.name) {
			continue // RFC 4035 §5.3.1
		}
		z := w.keysFor(signer)
		switch z.res.Verdict {
		case Insecure:
			return z.res
		case Bogus:
			res = z.res
			continue
		}
		r := w.verifySig(sig, set, z)
		if r.Verdict == Secure {
			set.verifiedBy = sig
			if n := int(sig.Labels); n < dns.CountLabel(set.name) && !strings.HasPrefix(set.name, "*.") {
				set.wildcard, set.wildcardLabels = ancestorWithLabels(set.name, n), n
			}
			return r
		}
		res = r
	}
	return res
}

// verifySig checks sig over set with the keys of z that match its tag
// and algorithm, each try within the question's budget.
func (w *work) verifySig(sig *dns.RRSIG, set *rrset, z *zoneInfo) Result {
	name := set.name + " " + dns.TypeToString[set.typ]
	if !supportedAlgorithm(sig.Algorithm) {
		return bogus(dns.ExtendedErrorCodeUnsupportedDNSKEYAlgorithm, "unsupported algorithm signing "+name)
	}
	if !sig.ValidityPeriod(w.now) {
		if int64(sig.Inception)-w.now.Unix() > 0 && int64(sig.Expiration)-w.now.Unix() > 0 {
			return bogus(edeNotYetValid, "signature not yet valid on "+name)
		}
		return bogus(edeExpired, "signature expired on "+name)
	}
	matched := false
	for i, k := range z.keys {
		if z.tags[i] != sig.KeyTag || k.Algorithm != sig.Algorithm {
			continue
		}
		matched = true
		if w.verifications >= w.v.limits.Verifications {
			return bogus(edeBogus, "work limit: signature checks")
		}
		w.verifications++
		if sig.Verify(k, set.rrs) == nil {
			return secure()
		}
	}
	if !matched {
		return bogus(edeDNSKEYMissing, fmt.Sprintf("no DNSKEY %d of %s for %s", sig.KeyTag, sig.SignerName, name))
	}
	return bogus(edeBogus, "signature does not verify on "+name)
}
