package upstream

import (
	"fmt"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// The scrubber (unbound's iterator/iter_scrub.c is the model) works on the
// reply's dnswire view: it marks the records a server had no business
// sending about its question, and a reply from which it drops nothing is
// used as the bytes it came in; one from which it drops something is
// written again, without them, by dnswire's encoder. There is no other
// copy of its rules: "scrubbing would change nothing" is its own verdict.
//
// Its scope is the zone the group forwards for, less the zones configured
// below it (Scope.Below: the servers of "." know nothing of "consul."):
// a name in scope is one the group's servers are believed about.

// Scope is what a resolution's servers are believed about: names at or
// below Zone, except those at or below any of Below. Names in uncompressed
// wire form.
type Scope struct {
	Zone  []byte
	Below [][]byte
}

// holds reports whether name is in scope.
func (s *Scope) holds(name []byte) bool {
	if !dnswire.InZone(name, s.Zone) {
		return false
	}
	for _, below := range s.Below {
		if dnswire.InZone(name, below) {
			return false
		}
	}
	return true
}

// keepSet marks records of one reply: kept or dropped.
type keepSet struct {
	inline [64]bool
	more   []bool
}

func (k *keepSet) reset(n int) {
	k.inline = [64]bool{}
	k.more = nil
	if n > len(k.inline) {
		k.more = make([]bool, n)
	}
}

func (k *keepSet) at(i int) *bool {
	if k.more != nil {
		return &k.more[i]
	}
	return &k.inline[i]
}

// chainNames are the names of a question's CNAME/DNAME chain, the
// question's first, in uncompressed wire form: the first inlineChain on
// the stack, the rest of a long chain (rare) on the heap.
type chainNames struct {
	buf  [inlineChain * dnswire.MaxNameLen]byte
	ends [inlineChain]int
	more [][]byte
	n    int
}

// inlineChain is how many names a chain keeps on the stack: the question
// and eight links, more than nearly every chain has.
const inlineChain = 9

func (c *chainNames) add(name []byte) []byte {
	if c.n >= inlineChain {
		c.more = append(c.more, append([]byte(nil), name...))
		c.n++
		return c.more[len(c.more)-1]
	}
	start := 0
	if c.n > 0 {
		start = c.ends[c.n-1]
	}
	end := start + copy(c.buf[start:], name)
	c.ends[c.n] = end
	c.n++
	return c.buf[start:end]
}

func (c *chainNames) name(i int) []byte {
	if i >= inlineChain {
		return c.more[i-inlineChain]
	}
	start := 0
	if i > 0 {
		start = c.ends[i-1]
	}
	return c.buf[start:c.ends[i]]
}

// has reports whether name is in the chain, letters compared without case.
func (c *chainNames) has(name []byte) bool {
	for i := range c.n {
		if dnswire.EqualName(c.name(i), name) {
			return true
		}
	}
	return false
}

// enclosed reports whether a name of the chain is owner or below it.
func (c *chainNames) enclosed(owner []byte) bool {
	for i := range c.n {
		if dnswire.InZone(c.name(i), owner) {
			return true
		}
	}
	return false
}

// scrubReply marks in keep what stays of m, a reply to its own question,
// for scope: see Scrub's rules (scrub.go). It returns what it dropped,
// where the chain leaves the scope, and whether the chain is broken.
func scrubReply(m *dnswire.Msg, scope *Scope, keep *keepSet) ScrubResult {
	keep.reset(m.Len())
	var result ScrubResult
	var chain chainNames
	var qbuf [dnswire.MaxNameLen]byte
	hasData, chase, broken := scrubAnswer(m, scope, keep, &chain, m.Question(qbuf[:0]))
	if chase != nil {
		result.ChaseName = string(dnswire.AppendText(nil, chase, true))
	}
	result.Broken = broken

	// A chain leaving the scope ends in the zone that owns the target: what
	// this server says about the rest, negative or not, is not evidence.
	negative := !hasData && chase == nil
	from, to := m.Range(dnswire.Authority)
	var owner [dnswire.MaxNameLen]byte
	for i := from; i < to; i++ {
		rr := m.RR(i)
		name := m.Owner(i, owner[:0])
		switch rr.Type {
		case dns.TypeRRSIG:
		case dns.TypeSOA:
			// The SOA may sit above the zone (a zone configured below the
			// server's apex): it only gives the negative answer its TTL
			// (RFC 2308) and says nothing about other names.
			*keep.at(i) = negative && chain.enclosed(name)
		case dns.TypeNS:
			*keep.at(i) = chase == nil && scope.holds(name) && chain.enclosed(name)
		case dns.TypeNSEC, dns.TypeNSEC3:
			*keep.at(i) = chase == nil && scope.holds(name)
		}
	}
	keepSignatures(m, keep, from, to)

	// Additional: addresses of the names the kept records point to (the
	// chain's names, NS, MX and SRV targets) and TXT records, inside the
	// scope, and OPT. The TXT records are Consul's node meta
	// (dns_config.enable_additional_node_meta_txt), which it adds for the
	// node of every instance, also one with an address of its own, whose
	// SRV target is not the node: in a cache of whole answers, keyed by
	// their question, they are relayed with it and nothing else.
	afrom, ato := m.Range(dnswire.Additional)
	for i := afrom; i < ato; i++ {
		rr := m.RR(i)
		switch rr.Type {
		case dnswire.TypeOPT:
			*keep.at(i) = true
		case dns.TypeTXT:
			*keep.at(i) = scope.holds(m.Owner(i, owner[:0]))
		case dns.TypeA, dns.TypeAAAA:
			name := m.Owner(i, owner[:0])
			*keep.at(i) = scope.holds(name) && (chain.has(name) || pointedTo(m, keep, name, to))
		}
	}
	keepSignatures(m, keep, afrom, ato)

	for i := range m.Len() {
		if *keep.at(i) {
			continue
		}
		switch m.SectionOf(i) {
		case dnswire.Answer:
			result.Answer++
		case dnswire.Authority:
			result.Authority++
		default:
			result.Additional++
		}
	}
	return result
}

// scrubAnswer keeps the records of the question's chain (see Scrub): from
// qname, each CNAME's target in order; a DNAME whose owner encloses the
// current name counts with the CNAME it synthesizes (a CNAME that
// disagrees with it is dropped). The chain stops at the records of the
// question's type, at its end (where the records of any other type at
// the last name are kept too), or where it leaves the scope (chase, a
// name in chain's buffer). It reports whether the chain ends in records,
// and breaks it (ErrBrokenChain) on a loop or past MaxChainLinks links.
func scrubAnswer(m *dnswire.Msg, scope *Scope, keep *keepSet, chain *chainNames, qname []byte) (hasData bool, chase []byte, broken error) {
	name := chain.add(qname)
	if !scope.holds(name) {
		return false, nil, nil
	}
	from, to := m.Range(dnswire.Answer)
	var target, synth [dnswire.MaxNameLen]byte
	for step := 0; ; step++ {
		cname := -1
		for i := from; i < to; i++ {
			rr := m.RR(i)
			if !m.OwnerIs(i, name) {
				continue
			}
			switch {
			case rr.Type == m.QType || m.QType == dns.TypeANY:
				*keep.at(i), hasData = true, true
			case rr.Type == dns.TypeCNAME && cname < 0:
				cname = i
			}
		}
		if hasData {
			break
		}
		var next []byte
		if dname, rewritten := findDNAME(m, scope, name, synth[:0]); dname >= 0 {
			// RFC 6672 section 2.2: the DNAME is the authority; a CNAME
			// beside it is only its synthesis and must agree.
			*keep.at(dname) = true
			next = rewritten
			if cname >= 0 && dnswire.EqualName(targetOf(m, cname, target[:0]), next) {
				*keep.at(cname) = true
			}
		} else if cname >= 0 {
			*keep.at(cname) = true
			next = targetOf(m, cname, target[:0])
		}
		if next == nil {
			// The chain's end. What the server says about the name it came
			// to is relayed as it said it, whatever the type: Consul
			// answers a TXT question for a service with its addresses.
			hasData = keepEnd(m, keep, name, from, to)
			break
		}
		if chain.has(next) {
			broken = fmt.Errorf("%w: a loop at %s", ErrBrokenChain, dnswire.AppendText(nil, next, true))
			break
		}
		if chain.n > MaxChainLinks { // the question and MaxChainLinks links so far
			broken = fmt.Errorf("%w: more than %d links", ErrBrokenChain, MaxChainLinks)
			break
		}
		// The chain's copy from here on: the buffers above are reused.
		name = chain.add(next)
		if !scope.holds(name) {
			chase = name
			break
		}
	}
	keepSignatures(m, keep, from, to)
	return hasData, chase, broken
}

// keepEnd keeps the answer records at name, the chain's last, of any type
// but CNAME and DNAME (the chain's own), and reports whether there were
// any.
func keepEnd(m *dnswire.Msg, keep *keepSet, name []byte, from, to int) bool {
	kept := false
	for i := from; i < to; i++ {
		if t := m.RR(i).Type; t != dns.TypeCNAME && t != dns.TypeDNAME && t != dns.TypeRRSIG && m.OwnerIs(i, name) {
			*keep.at(i), kept = true, true
		}
	}
	return kept
}

// findDNAME returns the index of an answer DNAME whose owner, in scope,
// strictly encloses name, and the name it rewrites name to, appended to
// dst; -1 if none applies or the rewritten name would be too long (RFC 6672
// section 2.2: YXDOMAIN).
func findDNAME(m *dnswire.Msg, scope *Scope, name, dst []byte) (int, []byte) {
	from, to := m.Range(dnswire.Answer)
	var owner, target [dnswire.MaxNameLen]byte
	for i := from; i < to; i++ {
		if m.RR(i).Type != dns.TypeDNAME {
			continue
		}
		o := m.Owner(i, owner[:0])
		if len(o) >= len(name) || !scope.holds(o) || !dnswire.InZone(name, o) {
			continue
		}
		t, ok := m.Target(i, 0, target[:0])
		if !ok {
			return -1, nil // an empty target rewrites name to no name at all
		}
		prefix := name[:len(name)-len(o)]
		if len(prefix)+len(t) > dnswire.MaxNameLen {
			return -1, nil
		}
		return i, append(append(dst, prefix...), t...)
	}
	return -1, nil
}

// pointedTo reports whether a kept answer or authority record (indexes
// below end) is an NS, MX or SRV record whose target is name.
func pointedTo(m *dnswire.Msg, keep *keepSet, name []byte, end int) bool {
	var target [dnswire.MaxNameLen]byte
	for i := range end {
		switch m.RR(i).Type {
		case dns.TypeNS, dns.TypeMX, dns.TypeSRV:
			if !*keep.at(i) {
				continue
			}
			if dnswire.EqualName(targetOf(m, i, target[:0]), name) {
				return true
			}
		}
	}
	return false
}

// targetOf is the first name in record i's rdata (a CNAME's, NS's, MX's,
// SRV's target), appended to dst: the root when the rdata ends before it,
// as miekg/dns reads an empty name field.
func targetOf(m *dnswire.Msg, i int, dst []byte) []byte {
	if t, ok := m.Target(i, 0, dst); ok {
		return t
	}
	return append(dst, 0)
}

// keepSignatures marks the RRSIGs among records from to to-1 that cover a
// kept RRset among them (same owner, type covered), so a validating client
// still gets them.
func keepSignatures(m *dnswire.Msg, keep *keepSet, from, to int) {
	for i := from; i < to; i++ {
		rr := m.RR(i)
		if rr.Type != dns.TypeRRSIG || *keep.at(i) {
			continue
		}
		covered, ok := m.TypeCovered(i)
		if !ok {
			continue
		}
		for j := from; j < to; j++ {
			if j != i && *keep.at(j) && m.RR(j).Type == covered && m.SameOwner(i, j) {
				*keep.at(i) = true
				break
			}
		}
	}
}

// scrubbed is m without the records keep drops, written again by dnswire's
// encoder: a new message of its own.
func scrubbed(m *dnswire.Msg, keep *keepSet) []byte {
	var b dnswire.Builder
	b.Start(m.ID, m.Flags)
	if m.QDCount == 1 {
		var q [dnswire.MaxNameLen]byte
		b.Question(m.Question(q[:0]), m.QType, m.QClass)
	}
	for i := range m.Len() {
		if *keep.at(i) {
			b.Record(m.SectionOf(i), m, i)
		}
	}
	if _, err := b.Finish(); err != nil {
		return nil // fewer records than came: it cannot be longer
	}
	return b.AppendTo(nil)
}
