// Package dnssec validates DNS answers (RFC 4033-4035, 5155, 6840) with
// miekg/dns's primitives: RRSIG.Verify and ValidityPeriod, DNSKEY.ToDS and
// NSEC3's Cover and Match. No maintained Go validator exists (issue 39), so
// this one is towerd's: a chain of trust from configured anchors, down
// through DS and DNSKEY fetched through the caller's Fetcher (the zone's
// upstreams, with DO and CD), to the answer's RRsets and its denial
// proofs. Every question has a work budget (Limits): signatures verified,
// queries fetched, zones walked, NSEC3 hashes computed; the keys learnt are
// kept in a bounded cache.
package dnssec

import "github.com/miekg/dns"

// Verdict is what validation concluded about an answer (RFC 4035 §4.3).
type Verdict uint8

const (
	// Insecure: no anchor covers the name, the name is under a negative
	// trust anchor, or a signed parent proved the zone unsigned (or signed
	// only with algorithms this validator cannot check, RFC 6840 §5.2).
	Insecure Verdict = iota
	// Secure: every RRset of the answer and its denial proofs verified
	// up to an anchor.
	Secure
	// Bogus: an anchor covers the name and the answer does not verify:
	// missing or wrong signatures, no keys, a missing proof.
	Bogus
)

// String is the verdict as metrics and logs name it.
func (v Verdict) String() string {
	switch v {
	case Secure:
		return "secure"
	case Bogus:
		return "bogus"
	}
	return "insecure"
}

// Result is the verdict with, for a bogus answer, the Extended DNS Error
// that says why (RFC 8914) and a line for the log.
type Result struct {
	Verdict Verdict
	EDE     uint16
	Reason  string
	// TTL, for a secure answer, is the most its records may be kept: no
	// longer than the signatures' original TTLs nor past their expiry
	// (RFC 4035 §5.3.3); 0 = no cap.
	TTL uint32
}

func secure() Result { return Result{Verdict: Secure} }

func insecure(reason string) Result { return Result{Verdict: Insecure, Reason: reason} }

func bogus(ede uint16, reason string) Result {
	return Result{Verdict: Bogus, EDE: ede, Reason: reason}
}

// worse combines two verdicts of parts of one answer: bogus wins, then
// insecure (a chain that leaves signed space is insecure as a whole).
func worse(a, b Result) Result {
	if a.Verdict == Bogus {
		return a
	}
	if b.Verdict == Bogus || b.Verdict == Insecure {
		return b
	}
	return a
}

// Extended DNS Error codes this package gives (RFC 8914 §4).
const (
	edeBogus          = dns.ExtendedErrorCodeDNSBogus                  // 6
	edeExpired        = dns.ExtendedErrorCodeSignatureExpired          // 7
	edeNotYetValid    = dns.ExtendedErrorCodeSignatureNotYetValid      // 8
	edeDNSKEYMissing  = dns.ExtendedErrorCodeDNSKEYMissing             // 9
	edeRRSIGsMissing  = dns.ExtendedErrorCodeRRSIGsMissing             // 10
	edeNSECMissing    = dns.ExtendedErrorCodeNSECMissing               // 12
	edeNoReachable    = dns.ExtendedErrorCodeNoReachableAuthority      // 22
	edeNSEC3Iteration = dns.ExtendedErrorCodeUnsupportedNSEC3IterValue // 27
)
