package upstream

import (
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// maxChainLength bounds the CNAME/DNAME chain Scrub follows in one reply;
// unbound's iterator gives up after 8 restarts as well (MAX_RESTART_COUNT).
const maxChainLength = 8

// Sections of a reply, as indexes of Group.scrubbed and label values of
// towerd_upstream_scrubbed_records_total.
const (
	sectionAnswer = iota
	sectionAuthority
	sectionAdditional
)

var sectionNames = [...]string{"answer", "authority", "additional"}

// ScrubResult says what Scrub dropped from a reply and where its answer
// stops.
type ScrubResult struct {
	// Answer, Authority and Additional count the records dropped from each
	// section (the OPT record is never dropped, nor counted).
	Answer, Authority, Additional int
	// ChaseName, when set, is the lower-cased name at which the question's
	// CNAME/DNAME chain leaves the zone: the kept answer ends with the
	// record pointing there, and whatever the server said about the name
	// itself (its records, and its rcode: an NXDOMAIN is about the target)
	// was not believed. The caller resolves ChaseName through the zone that
	// owns it and joins the answers.
	ChaseName string
}

// Dropped is the number of records Scrub removed.
func (r ScrubResult) Dropped() int { return r.Answer + r.Authority + r.Additional }

// Scrub removes from reply, in place, every record that the server asked
// about q in zone had no business sending, so it is neither cached nor
// relayed (unbound's iterator/iter_scrub.c is the model):
//
//   - answer: only the records of q's CNAME/DNAME chain: the owner is
//     q.Name, then each CNAME target in order; a DNAME whose owner encloses
//     the current name counts with the CNAME it synthesizes (a CNAME that
//     disagrees with it is dropped). The chain stops at the records of q's
//     type, at its end, after maxChainLength steps, at a loop, or where it
//     leaves zone (ChaseName);
//   - authority: the SOA of a negative answer (NXDOMAIN or NODATA) whose
//     owner encloses a chain name (the one record allowed above zone), NS
//     records whose owner encloses one, and NSEC/NSEC3 proofs;
//   - additional: A and AAAA records of names the kept records point to
//     (NS, MX and SRV targets, the chain's names), and the OPT record;
//
// and of all these only names inside zone (every name is inside "."), with
// the RRSIGs that cover a kept RRset. Names compare case-insensitively.
func Scrub(q dns.Question, reply *dns.Msg, zone string) ScrubResult {
	zone = strings.ToLower(dns.Fqdn(zone))
	var result ScrubResult
	answer, chain, hasData, chase := scrubAnswer(q, reply.Answer, zone)
	result.Answer = len(reply.Answer) - len(answer)
	result.ChaseName = chase
	reply.Answer = answer

	// A chain leaving the zone ends in the zone that owns the target: what
	// this server says about the rest, negative or not, is not evidence.
	negative := !hasData && chase == ""
	authority := keepRRs(reply.Ns, func(rr dns.RR) bool {
		owner := lowerName(rr.Header().Name)
		if rr.Header().Rrtype == dns.TypeSOA {
			// The SOA may sit above the zone (a zone configured below the
			// server's apex): it only gives the negative answer its TTL
			// (RFC 2308) and says nothing about other names.
			return negative && enclosesAny(owner, chain)
		}
		if !inZone(owner, zone) {
			return false
		}
		switch rr.Header().Rrtype {
		case dns.TypeNS:
			return chase == "" && enclosesAny(owner, chain)
		case dns.TypeNSEC, dns.TypeNSEC3:
			return chase == ""
		}
		return false
	})
	result.Authority = len(reply.Ns) - len(authority)
	reply.Ns = authority

	targets := map[string]bool{}
	for _, name := range chain {
		targets[name] = true
	}
	for _, rr := range append(append([]dns.RR(nil), answer...), authority...) {
		switch rr := rr.(type) {
		case *dns.NS:
			targets[lowerName(rr.Ns)] = true
		case *dns.MX:
			targets[lowerName(rr.Mx)] = true
		case *dns.SRV:
			targets[lowerName(rr.Target)] = true
		}
	}
	additional := keepRRs(reply.Extra, func(rr dns.RR) bool {
		h := rr.Header()
		switch h.Rrtype {
		case dns.TypeOPT:
			return true
		case dns.TypeA, dns.TypeAAAA:
			owner := lowerName(h.Name)
			return targets[owner] && inZone(owner, zone)
		}
		return false
	})
	result.Additional = len(reply.Extra) - len(additional)
	reply.Extra = additional
	return result
}

// scrubAnswer keeps the records of q's chain. It returns them with the
// chain's names in order (q.Name first), whether the chain ends in records
// of q's type, and the name where the chain left zone, if it did.
func scrubAnswer(q dns.Question, rrs []dns.RR, zone string) (kept []dns.RR, chain []string, hasData bool, chase string) {
	name := lowerName(q.Name)
	chain = []string{name}
	if !inZone(name, zone) {
		return keepRRs(rrs, func(dns.RR) bool { return false }), chain, false, ""
	}
	keep := make([]bool, len(rrs))
	for step := 0; ; step++ {
		cname := -1
		for i, rr := range rrs {
			h := rr.Header()
			if lowerName(h.Name) != name {
				continue
			}
			switch {
			case h.Rrtype == q.Qtype || q.Qtype == dns.TypeANY:
				keep[i], hasData = true, true
			case h.Rrtype == dns.TypeCNAME && cname < 0:
				cname = i
			}
		}
		if hasData || step == maxChainLength {
			break
		}
		next := ""
		if dname, target := findDNAME(rrs, name, zone); dname >= 0 {
			// RFC 6672 section 2.2: the DNAME is the authority; a CNAME
			// beside it is only its synthesis and must agree.
			keep[dname] = true
			next = target
			if cname >= 0 && lowerName(rrs[cname].(*dns.CNAME).Target) == target {
				keep[cname] = true
			}
		} else if cname >= 0 {
			keep[cname] = true
			next = lowerName(rrs[cname].(*dns.CNAME).Target)
		}
		if next == "" || slices.Contains(chain, next) {
			break
		}
		chain = append(chain, next)
		if !inZone(next, zone) {
			chase = next
			break
		}
		name = next
	}
	keepSignatures(rrs, keep)
	for i, rr := range rrs {
		if keep[i] {
			kept = append(kept, rr)
		}
	}
	return kept, chain, hasData, chase
}

// findDNAME returns the index of a DNAME in rrs whose owner, inside zone,
// strictly encloses name, and the name it rewrites name to; -1 if none
// applies or the rewritten name would be too long (RFC 6672 YXDOMAIN).
func findDNAME(rrs []dns.RR, name, zone string) (int, string) {
	for i, rr := range rrs {
		dname, ok := rr.(*dns.DNAME)
		if !ok {
			continue
		}
		owner := lowerName(dname.Hdr.Name)
		if owner == name || !inZone(owner, zone) || !dns.IsSubDomain(owner, name) {
			continue
		}
		prefix := strings.TrimSuffix(name, owner)
		if owner == "." {
			prefix = name
		}
		target := lowerName(prefix + dns.Fqdn(dname.Target))
		if dname.Target == "." {
			target = lowerName(prefix)
		}
		if _, ok := dns.IsDomainName(target); !ok || len(target) > 255 {
			return -1, ""
		}
		return i, target
	}
	return -1, ""
}

// keepSignatures marks the RRSIGs that cover a kept RRset (same owner, type
// covered among the kept ones), so a validating client still gets them.
func keepSignatures(rrs []dns.RR, keep []bool) {
	type rrset struct {
		owner string
		rtype uint16
	}
	kept := map[rrset]bool{}
	for i, rr := range rrs {
		if keep[i] {
			kept[rrset{lowerName(rr.Header().Name), rr.Header().Rrtype}] = true
		}
	}
	for i, rr := range rrs {
		if sig, ok := rr.(*dns.RRSIG); ok && kept[rrset{lowerName(sig.Hdr.Name), sig.TypeCovered}] {
			keep[i] = true
		}
	}
}

// keepRRs returns the records of rrs that keepRR accepts, with the RRSIGs
// of those, in their order.
func keepRRs(rrs []dns.RR, keepRR func(dns.RR) bool) []dns.RR {
	keep := make([]bool, len(rrs))
	for i, rr := range rrs {
		if rr.Header().Rrtype != dns.TypeRRSIG {
			keep[i] = keepRR(rr)
		}
	}
	keepSignatures(rrs, keep)
	var kept []dns.RR
	for i, rr := range rrs {
		if keep[i] {
			kept = append(kept, rr)
		}
	}
	return kept
}

// enclosesAny reports whether owner is one of names or an ancestor of one.
func enclosesAny(owner string, names []string) bool {
	for _, name := range names {
		if dns.IsSubDomain(owner, name) {
			return true
		}
	}
	return false
}

// inZone reports whether name is zone or below it.
func inZone(name, zone string) bool { return dns.IsSubDomain(zone, name) }

func lowerName(name string) string { return strings.ToLower(dns.Fqdn(name)) }

// scrub runs Scrub on a reply to a query with question qs and counts what
// it dropped.
func (g *Group) scrub(qs []dns.Question, reply *dns.Msg) ScrubResult {
	var result ScrubResult
	if len(qs) == 1 {
		result = Scrub(qs[0], reply, g.zone)
		g.scrubbed[sectionAnswer].Add(uint64(result.Answer))
		g.scrubbed[sectionAuthority].Add(uint64(result.Authority))
		g.scrubbed[sectionAdditional].Add(uint64(result.Additional))
	}
	return result
}
