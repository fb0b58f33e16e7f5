package upstream

import (
	"errors"

	"github.com/towerd/towerd/resolver/dnswire"
)

// MaxChainLinks bounds a question's CNAME/DNAME chain, in one reply and
// joined across zones (the resolver's chase): past it the reply is no
// answer (ErrBrokenChain). unbound 1.17 completes 11 links (its
// MAX_RESTART_COUNT) and SERVFAILs from 12; chains of 20 and 40 are real
// (CDNs, issue 23), and 64 still fit the UDP size a stub asks for.
const MaxChainLinks = 64

// ErrBrokenChain is a reply whose CNAME/DNAME chain loops or is longer
// than MaxChainLinks: no answer, and never cached (the resolution fails as
// on SERVFAIL; unbound SERVFAILs a DNAME loop). Not a failure of the
// server: it answered.
var ErrBrokenChain = errors.New("broken CNAME chain")

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
	// Broken, when set, wraps ErrBrokenChain: the chain loops or is too
	// long, and the reply is no answer.
	Broken error
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

// Scrub's rules (scrubwire.go reads a reply's bytes by them) remove from a
// reply every record that the server asked about its question had no
// business sending, so it is neither cached nor relayed (unbound's
// iterator/iter_scrub.c is the model):
//
//   - answer: only the records of the question's CNAME/DNAME chain: the
//     owner is the question's name, then each CNAME target in order; a
//     DNAME whose owner encloses the current name counts with the CNAME it
//     synthesizes (a CNAME that disagrees with it is dropped). The chain
//     stops at the records of the question's type, at its end (where the
//     last name's records of any type are kept: what a server says about
//     the name it was asked is relayed as it said it, Consul's A records
//     for a TXT question included), or where it leaves the scope
//     (ChaseName); a loop, or more than MaxChainLinks links, breaks it
//     (Broken);
//   - authority: the SOA of a negative answer (NXDOMAIN or NODATA) whose
//     owner encloses a chain name (the one record allowed outside the
//     scope), NS records whose owner encloses one, and NSEC/NSEC3 proofs;
//   - additional: A and AAAA records of names the kept records point to
//     (NS, MX and SRV targets, the chain's names), TXT records (Consul's
//     node meta), and the OPT record;
//
// and of all these only names in the scope (the group's zone less the
// zones configured below it; every name is inside "."), with the RRSIGs
// that cover a kept RRset. Names compare case-insensitively.

// scrubRaw scrubs raw, a reply whose view is m, for scope, and counts what
// it dropped: raw itself when nothing is, else the reply written again
// without it.
func (g *Group) scrubRaw(m *dnswire.Msg, raw []byte, scope *Scope) ([]byte, ScrubResult) {
	if m.QDCount != 1 {
		return raw, ScrubResult{}
	}
	var keep keepSet
	result := scrubReply(m, scope, &keep)
	if result.Dropped() == 0 {
		return raw, result
	}
	g.scrubbed[sectionAnswer].Add(uint64(result.Answer))
	g.scrubbed[sectionAuthority].Add(uint64(result.Authority))
	g.scrubbed[sectionAdditional].Add(uint64(result.Additional))
	return scrubbed(m, &keep), result
}

// ScrubCheck is the scrubber's verdict on reply, a message for one
// question whose servers are believed about scope, without scrubbing or
// counting anything: what Scrub's rules would drop, where the chain
// leaves the scope, and whether it is broken (Broken). It is for bytes that did not come from a server of
// towerd's (a snapshot an operator loads: issue 21), which must be what
// the scrubber would have passed unchanged.
func ScrubCheck(reply []byte, scope Scope) (ScrubResult, error) {
	var m dnswire.Msg
	if err := m.Parse(reply); err != nil {
		return ScrubResult{}, err
	}
	if m.QDCount != 1 {
		return ScrubResult{}, errNotOneQuestion
	}
	var keep keepSet
	return scrubReply(&m, &scope, &keep), nil
}

var errNotOneQuestion = errors.New("not one question")
