package dnssec

import (
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// Authenticated denial (RFC 4035 §5.4, RFC 5155 §8, RFC 6840 §4.1): the
// authority section's NSEC or NSEC3 records, each RRset verified first,
// prove that a name does not exist (NXDOMAIN), that it has no data of a
// type (NODATA), or that a wildcard answer's name did not exist.

// denial is the verdict on a negative answer for name and qtype (or on
// the end of a CNAME chain that has no data): its proof, or, without a
// signed one, whether name is in unsigned space.
func (w *work) denial(name string, qtype uint16, rcode int, m *dns.Msg) Result {
	r, _, signed := w.proveDenial(name, qtype, rcode, m)
	if !signed {
		return w.unsignedAt(name, nil, edeNSECMissing)
	}
	return r
}

// proveDenial checks m's proof that name has no qtype (rcode NOERROR) or
// does not exist (NXDOMAIN). delegation: the proof shows name is a zone
// cut (NS without SOA), which for a DS question means an unsigned
// delegation. signed is false when m has no signed proof records at all.
func (w *work) proveDenial(name string, qtype uint16, rcode int, m *dns.Msg) (res Result, delegation, signed bool) {
	nsecs, nsec3s, r, signed := w.proofRecords(m)
	switch {
	case !signed || r.Verdict != Secure:
		return r, false, signed
	case len(nsecs) > 0:
		r, delegation = w.nsecDenial(name, qtype, rcode, nsecs)
	case len(nsec3s) > 0:
		r, delegation = w.nsec3Denial(name, qtype, rcode, nsec3s)
	default:
		r = bogus(edeNSECMissing, "no NSEC or NSEC3 for "+name)
	}
	return r, delegation, true
}

// proofRecords verifies the authority section's SOA, NSEC and NSEC3
// RRsets that carry signatures and returns the NSEC and NSEC3 records
// that verified. Unsigned ones prove nothing and are left out; a signed
// one that fails makes the answer bogus.
func (w *work) proofRecords(m *dns.Msg) (nsecs []*dns.NSEC, nsec3s []*dns.NSEC3, res Result, signed bool) {
	res = secure()
	soaUnsigned := false
	for _, set := range groupRRsets(m.Ns) {
		switch set.typ {
		case dns.TypeNSEC, dns.TypeNSEC3, dns.TypeSOA:
		default:
			continue
		}
		if len(set.sigs) == 0 {
			soaUnsigned = soaUnsigned || set.typ == dns.TypeSOA
			continue
		}
		signed = true
		r := w.verifyRRset(set)
		switch r.Verdict {
		case Bogus:
			return nil, nil, r, true
		case Insecure:
			res = r
			continue
		}
		w.verified(set.verifiedBy)
		for _, rr := range set.rrs {
			switch rr := rr.(type) {
			case *dns.NSEC:
				if set.wildcard != "" {
					// Served expanded, as unbound's auth-zone serves a
					// wildcard's NSEC: its signature says its owner
					// is the wildcard, and that is what it proves.
					c := *rr
					c.Hdr.Name = "*." + set.wildcard
					rr = &c
				}
				nsecs = append(nsecs, rr)
			case *dns.NSEC3:
				if set.wildcard == "" { // an expanded NSEC3 proves nothing
					nsec3s = append(nsec3s, rr)
				}
			}
		}
	}
	if signed && soaUnsigned && res.Verdict == Secure {
		return nil, nil, bogus(edeRRSIGsMissing, "unsigned SOA beside a signed proof"), true
	}
	return nsecs, nsec3s, res, signed
}

func hasType(bitmap []uint16, t uint16) bool { return slices.Contains(bitmap, t) }

// typeDenied checks a matching NSEC or NSEC3 bitmap for a NODATA of qtype
// at its owner: neither qtype nor CNAME there, and not a parent's record
// for a child's apex (RFC 6840 §4.1), nor a child's for a DS question.
func typeDenied(bitmap []uint16, qtype uint16, apex bool) (Result, bool) {
	ns, soa := hasType(bitmap, dns.TypeNS), hasType(bitmap, dns.TypeSOA)
	switch {
	case hasType(bitmap, qtype) || hasType(bitmap, dns.TypeCNAME):
		return bogus(edeBogus, "denial proof shows the type exists"), false
	case qtype != dns.TypeDS && ns && !soa:
		return bogus(edeBogus, "delegation's denial used for data below it"), false
	case qtype == dns.TypeDS && soa && !apex:
		return bogus(edeBogus, "child apex denial used for DS"), false
	}
	return secure(), ns && !soa
}

func (w *work) nsecDenial(name string, qtype uint16, rcode int, nsecs []*dns.NSEC) (Result, bool) {
	for _, n := range nsecs {
		if !equalNames(n.Hdr.Name, name) {
			continue
		}
		if rcode == dns.RcodeNameError {
			return bogus(edeBogus, "NSEC shows "+name+" exists"), false
		}
		return typeDenied(n.TypeBitMap, qtype, name == ".")
	}
	var cover *dns.NSEC
	for _, n := range nsecs {
		if nsecCovers(n.Hdr.Name, n.NextDomain, name) {
			cover = n
			break
		}
	}
	if cover == nil {
		return bogus(edeNSECMissing, "no NSEC covers "+name), false
	}
	if under(name, cover.Hdr.Name) && hasType(cover.TypeBitMap, dns.TypeNS) && !hasType(cover.TypeBitMap, dns.TypeSOA) {
		return bogus(edeBogus, "delegation's NSEC used for "+name), false
	}
	if rcode != dns.RcodeNameError && under(cover.NextDomain, name) {
		return secure(), false // an empty non-terminal: it exists, without data
	}
	ce := commonAncestor(name, cover.Hdr.Name)
	if c := commonAncestor(name, cover.NextDomain); dns.CountLabel(c) > dns.CountLabel(ce) {
		ce = c
	}
	wildcard := "*." + ce
	if ce == "." {
		wildcard = "*."
	}
	for _, n := range nsecs {
		if equalNames(n.Hdr.Name, wildcard) {
			if rcode == dns.RcodeNameError {
				return bogus(edeBogus, "wildcard "+wildcard+" exists"), false
			}
			r, _ := typeDenied(n.TypeBitMap, qtype, false)
			return r, false
		}
		if rcode == dns.RcodeNameError && nsecCovers(n.Hdr.Name, n.NextDomain, wildcard) {
			return secure(), false
		}
	}
	return bogus(edeNSECMissing, "no NSEC denies "+wildcard), false
}

// nsec3Set is the verified NSEC3 records of one zone and its parameters.
type nsec3Set struct {
	w       *work
	zone    string
	param   *dns.NSEC3
	records []*dns.NSEC3
	hashes  map[string]string
}

func (w *work) nsec3Denial(name string, qtype uint16, rcode int, all []*dns.NSEC3) (Result, bool) {
	for _, n := range all {
		if int(n.Iterations) > w.v.limits.NSEC3Iterations {
			// RFC 9276 §3.2: insecure, never hashed.
			r := insecure("NSEC3 iterations above the limit")
			r.EDE = edeNSEC3Iteration
			return r, false
		}
	}
	p := all[0]
	zone, _ := parent(dns.CanonicalName(p.Hdr.Name))
	if p.Hash != dns.SHA1 {
		return insecure("unsupported NSEC3 hash"), false
	}
	s := &nsec3Set{w: w, zone: zone, param: p, hashes: map[string]string{}}
	for _, n := range all {
		z, _ := parent(dns.CanonicalName(n.Hdr.Name))
		if z == zone && n.Hash == p.Hash && n.Iterations == p.Iterations && strings.EqualFold(n.Salt, p.Salt) {
			s.records = append(s.records, n)
		}
	}
	if !under(name, zone) {
		return bogus(edeBogus, "NSEC3 of "+zone+" for "+name), false
	}
	m, ok := s.match(name)
	if !ok {
		return bogus(edeBogus, "work limit: NSEC3 hashes"), false
	}
	if m != nil {
		if rcode == dns.RcodeNameError {
			return bogus(edeBogus, "NSEC3 shows "+name+" exists"), false
		}
		return typeDenied(m.TypeBitMap, qtype, name == zone)
	}
	// The closest encloser proof (RFC 5155 §8.3).
	var ce, nextCloser string
	var ceRecord *dns.NSEC3
	for n := name; under(n, zone); {
		p, ok := parent(n)
		if !ok {
			break
		}
		m, ok := s.match(p)
		if !ok {
			return bogus(edeBogus, "work limit: NSEC3 hashes"), false
		}
		if m != nil {
			ce, nextCloser, ceRecord = p, n, m
			break
		}
		n = p
	}
	if ceRecord == nil {
		return bogus(edeNSECMissing, "no closest encloser for "+name), false
	}
	if hasType(ceRecord.TypeBitMap, dns.TypeNS) && !hasType(ceRecord.TypeBitMap, dns.TypeSOA) || hasType(ceRecord.TypeBitMap, dns.TypeDNAME) {
		return bogus(edeBogus, "closest encloser of "+name+" is a delegation"), false
	}
	ncCover, ok := s.cover(nextCloser)
	if !ok {
		return bogus(edeBogus, "work limit: NSEC3 hashes"), false
	}
	if ncCover == nil {
		return bogus(edeNSECMissing, "no NSEC3 covers "+nextCloser), false
	}
	optOut := ncCover.Flags&1 != 0
	wildcard := "*." + ce
	if rcode == dns.RcodeNameError {
		if optOut {
			return insecure("NSEC3 opt-out span"), false // RFC 5155 §9.2
		}
		c, ok := s.cover(wildcard)
		switch {
		case !ok:
			return bogus(edeBogus, "work limit: NSEC3 hashes"), false
		case c == nil:
			return bogus(edeNSECMissing, "no NSEC3 denies "+wildcard), false
		}
		return secure(), false
	}
	if wm, ok := s.match(wildcard); ok && wm != nil {
		r, _ := typeDenied(wm.TypeBitMap, qtype, false)
		return r, false
	}
	if qtype == dns.TypeDS && optOut {
		// RFC 5155 §8.6: an unsigned delegation may sit in the span.
		return insecure("NSEC3 opt-out span"), true
	}
	return bogus(edeNSECMissing, "no NSEC3 proves "+name+" has no "+dns.TypeToString[qtype]), false
}

// hash is name's NSEC3 hash under the set's parameters, within the
// question's hash budget.
func (s *nsec3Set) hash(name string) (string, bool) {
	name = dns.CanonicalName(name)
	if h, ok := s.hashes[name]; ok {
		return h, true
	}
	cost := int(s.param.Iterations) + 1
	if s.w.hashes+cost > s.w.v.limits.NSEC3Hashes {
		return "", false
	}
	s.w.hashes += cost
	h := dns.HashName(name, s.param.Hash, s.param.Iterations, s.param.Salt)
	s.hashes[name] = h
	return h, true
}

func ownerHash(n *dns.NSEC3) string {
	owner := n.Hdr.Name
	if i := strings.IndexByte(owner, '.'); i > 0 {
		owner = owner[:i]
	}
	return strings.ToUpper(owner)
}

// match is the record whose owner hashes name; ok is false when the
// budget ran out.
func (s *nsec3Set) match(name string) (*dns.NSEC3, bool) {
	h, ok := s.hash(name)
	if !ok {
		return nil, false
	}
	for _, n := range s.records {
		if ownerHash(n) == h {
			return n, true
		}
	}
	return nil, true
}

// cover is the record whose interval holds name's hash.
func (s *nsec3Set) cover(name string) (*dns.NSEC3, bool) {
	h, ok := s.hash(name)
	if !ok {
		return nil, false
	}
	for _, n := range s.records {
		owner, next := ownerHash(n), strings.ToUpper(n.NextDomain)
		switch {
		case owner == h:
			continue
		case owner < next && owner < h && h < next,
			owner >= next && (h > owner || h < next): // the last interval wraps
			return n, true
		}
	}
	return nil, true
}

// wildcardProof checks that a wildcard answer's owner did not exist
// (RFC 4035 §5.3.4, RFC 5155 §8.8): an NSEC covers it, or an NSEC3 covers
// its next closer name, one label below the wildcard's parent.
func (w *work) wildcardProof(owner string, labels int, m *dns.Msg) Result {
	nsecs, nsec3s, r, signed := w.proofRecords(m)
	switch {
	case !signed:
		return bogus(edeNSECMissing, "wildcard answer for "+owner+" without proof")
	case r.Verdict != Secure:
		return r
	}
	for _, n := range nsecs {
		if nsecCovers(n.Hdr.Name, n.NextDomain, owner) {
			return secure()
		}
	}
	if len(nsec3s) > 0 {
		p := nsec3s[0]
		if int(p.Iterations) > w.v.limits.NSEC3Iterations {
			r := insecure("NSEC3 iterations above the limit")
			r.EDE = edeNSEC3Iteration
			return r
		}
		zone, _ := parent(dns.CanonicalName(p.Hdr.Name))
		s := &nsec3Set{w: w, zone: zone, param: p, records: nsec3s, hashes: map[string]string{}}
		c, ok := s.cover(ancestorWithLabels(owner, labels+1))
		if !ok {
			return bogus(edeBogus, "work limit: NSEC3 hashes")
		}
		if c != nil {
			return secure()
		}
	}
	return bogus(edeNSECMissing, "no proof that "+owner+" did not exist")
}
