package upstream

import (
	"encoding/binary"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// The wire check decides, on a reply's bytes, that Scrub would leave it as
// it is, so the resolver can store and answer it without unpacking it into
// a dns.Msg (issue 17). It accepts only the shapes nearly every miss gets
// back from a recursive upstream, and declines everything else to the
// unpack-and-scrub path, whose outcome is then the same as before:
//
//   - NOERROR with answer records of the question's type, A or AAAA, owned
//     by the question's name, or at the end of a chain of up to seven
//     CNAMEs that starts there, every target inside the zone and none
//     twice (the same bytes throughout: each owner spelled as the name
//     before points to it), with no authority records: no DNAME, no RRSIGs,
//     nothing about other names;
//   - NOERROR without answer records (NODATA), or with only such a CNAME
//     chain (NODATA at its end), or NXDOMAIN without answer records, with
//     nothing or exactly one SOA in the authority section, whose owner
//     encloses a name of the chain (Scrub keeps that SOA, and only that,
//     for a negative answer);
//   - in the additional section at most one OPT record, extended rcode 0,
//     carrying no option but a cookie or padding (options that cannot make
//     unpacking fail).
//
// The question's name lies inside the zone (an answer about a name outside
// it is dropped by Scrub). Names are read strictly: backward compression
// pointers only, labels of letters, digits, '-' and '_', nothing that would
// need escaping in presentation form. Every accepted reply unpacks, and
// Scrub drops nothing from it (TestWireCleanAgreesWithScrub,
// FuzzWireClean).

// maxWireName is the longest name in wire form (RFC 1035 section 2.3.4).
const maxWireName = dnswire.MaxNameLen

// wireClean reports whether raw, a reply whose ID and question the socket
// already matched (accepts), needs no scrubbing for zoneWire (the zone's
// name in wire form, lower case) and may be used as it is. It allocates
// nothing.
func wireClean(raw, zoneWire []byte) bool {
	if len(raw) < 12 {
		return false
	}
	flags := binary.BigEndian.Uint16(raw[2:])
	rcode := int(flags & 0xF)
	if flags&(1<<15) == 0 || flags&(1<<9) != 0 || (opcodeOf(flags) != dns.OpcodeQuery) ||
		(rcode != dns.RcodeSuccess && rcode != dns.RcodeNameError) {
		return false
	}
	qd, an := binary.BigEndian.Uint16(raw[4:]), binary.BigEndian.Uint16(raw[6:])
	ns, ar := binary.BigEndian.Uint16(raw[8:]), binary.BigEndian.Uint16(raw[10:])
	if qd != 1 || ns > 1 || ar > 1 || (an > 0 && rcode != dns.RcodeSuccess) {
		return false
	}
	var qbuf [maxWireName]byte
	qname, off, ok := dnswire.ReadPlainName(raw, 12, qbuf[:0])
	if !ok || off+4 > len(raw) || raw[12] == 0 || !nameInside(qname, zoneWire) {
		return false
	}
	qtype, qclass := binary.BigEndian.Uint16(raw[off:]), binary.BigEndian.Uint16(raw[off+2:])
	off += 4
	if an > 0 && qtype != dns.TypeA && qtype != dns.TypeAAAA {
		return false
	}
	if qtype == dns.TypeANY || qtype == dns.TypeRRSIG || qtype == dns.TypeOPT {
		return false
	}
	// The answer: a chain of CNAMEs from the question's name (each owned by
	// the name the one before points to, every target inside the zone, no
	// name twice), then the records of the question's type at its end,
	// owned by that name spelled as the chain spells it.
	var nbuf, tbuf [maxWireName]byte
	var chain chainNames
	chain.add(qname)
	current := qname
	cnames, data := 0, false
	for range an {
		var owner []byte
		owner, off, ok = dnswire.ReadPlainName(raw, off, nbuf[:0])
		if !ok || string(owner) != string(current) || off+10 > len(raw) {
			return false
		}
		rtype, class := binary.BigEndian.Uint16(raw[off:]), binary.BigEndian.Uint16(raw[off+2:])
		rdlen := int(binary.BigEndian.Uint16(raw[off+8:]))
		if class != qclass || off+10+rdlen > len(raw) {
			return false
		}
		switch {
		case rtype == qtype && rdlen == dnswire.AddressLen(rtype):
			data = true
		case rtype == dns.TypeCNAME && !data && cnames < maxWireCNAMEs:
			target, end, ok := dnswire.ReadPlainName(raw, off+10, tbuf[:0])
			if !ok || end != off+10+rdlen || len(target) == 1 || !nameInside(target, zoneWire) || chain.has(target) {
				return false
			}
			current = chain.add(target)
			cnames++
		default:
			return false
		}
		off += 10 + rdlen
	}
	if data && ns > 0 {
		return false // Scrub keeps an SOA only for a negative answer
	}
	if ns == 1 {
		var owner []byte
		owner, off, ok = dnswire.ReadPlainName(raw, off, nbuf[:0])
		// The SOA of a negative answer (NODATA, NXDOMAIN, NODATA at the
		// end of a chain) encloses a name of the chain.
		if !ok || off+10 > len(raw) || binary.BigEndian.Uint16(raw[off:]) != dns.TypeSOA ||
			!chain.enclosed(owner) {
			return false
		}
		rdlen := int(binary.BigEndian.Uint16(raw[off+8:]))
		off += 10
		end := off + rdlen
		if end > len(raw) {
			return false
		}
		for range 2 { // MNAME, RNAME
			if _, off, ok = dnswire.ReadPlainName(raw, off, nbuf[:0]); !ok {
				return false
			}
		}
		if off+20 != end {
			return false
		}
		off = end
	}
	if ar == 1 {
		if off, ok = dnswire.SkipPlainOPT(raw, off); !ok {
			return false
		}
	}
	return off == len(raw)
}

func opcodeOf(flags uint16) int { return int(flags>>11) & 0xF }

// maxWireCNAMEs bounds the CNAME chain the wire check accepts, below
// Scrub's maxChainLength, which cuts a longer one.
const maxWireCNAMEs = maxChainLength - 1

// chainNames are the names of a CNAME chain, uncompressed, for the loop
// check: on the stack, no allocation.
type chainNames struct {
	buf  [(maxWireCNAMEs + 1) * maxWireName]byte
	ends [maxWireCNAMEs + 1]int
	n    int
}

// add appends name and returns the chain's copy of it.
func (c *chainNames) add(name []byte) []byte {
	start := 0
	if c.n > 0 {
		start = c.ends[c.n-1]
	}
	end := start + copy(c.buf[start:], name)
	c.ends[c.n] = end
	c.n++
	return c.buf[start:end]
}

// enclosed reports whether a name of the chain is parent or below it.
func (c *chainNames) enclosed(parent []byte) bool {
	start := 0
	for i := range c.n {
		if nameInside(c.buf[start:c.ends[i]], parent) {
			return true
		}
		start = c.ends[i]
	}
	return false
}

// has reports whether name is in the chain, letters compared without case
// (Scrub's loop check).
func (c *chainNames) has(name []byte) bool {
	start := 0
	for i := range c.n {
		if equalFoldASCII(c.buf[start:c.ends[i]], name) {
			return true
		}
		start = c.ends[i]
	}
	return false
}

// nameInside reports whether name (uncompressed wire form) is parent or
// below it, letters compared without case.
func nameInside(name, parent []byte) bool {
	for i := 0; i < len(name); i += 1 + int(name[i]) {
		if len(name)-i == len(parent) && equalFoldASCII(name[i:], parent) {
			return true
		}
		if name[i] == 0 {
			break
		}
	}
	return false
}

func equalFoldASCII(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

// wireZone is zone (fully qualified, lower case) in uncompressed wire form.
func wireZone(zone string) []byte {
	buf := make([]byte, 256)
	n, err := dns.PackDomainName(zone, buf, 0, nil, false)
	if err != nil {
		return nil
	}
	return buf[:n:n]
}
