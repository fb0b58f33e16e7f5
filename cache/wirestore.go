package cache

import (
	"encoding/binary"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// The wire store (issue 17): an entry made straight from an upstream
// reply's bytes by the entry builder (entry.go), stored and answered as
// bytes, never unpacked into a dns.Msg.

// PrepareAnswer makes the entry for k from raw, an upstream's reply to k's
// question: the answer of a NOERROR or NXDOMAIN reply, the TTL clamps applied, whether it may be
// stored or not (SetWire says). For anything else it gives the reason.
// raw is only read.
func (c *Cache) PrepareAnswer(k Key, raw []byte) (WireAnswer, string) {
	return prepareAnswer(k, raw, c.policy.Load().bounds)
}

// SetWire stores a under k if the store policy accepts it: NOERROR only
// (NXDOMAIN is never cached), not truncated; it returns false and a short
// reason on refusal, counted, and then leaves any existing entry for k
// untouched: a failure never replaces a good entry.
func (c *Cache) SetWire(k Key, a *WireAnswer) (stored bool, reason string) {
	if reason := a.storable(); reason != "" {
		c.stats.refused.Add(1)
		return false, reason
	}
	return c.store(k, a.prepared)
}

// AppendRecords is AppendFresh for a just prepared answer: its records
// (its cut answer under tag cut, if it has one; see AppendFresh) with
// every TTL the one a hit right after storing shows, if they fit in limit
// bytes of dst. It counts nothing.
func (a *WireAnswer) AppendRecords(dst []byte, limit int, cut uint16) ([]byte, WireHit, bool) {
	return a.appendRecords(dst, shownTTL(a.ttl, 0), limit, cut)
}

// Aged is a as it is elapsed after it was prepared: every TTL it shows
// lower by the whole seconds elapsed, as a cache hit's would be, never
// below 0. The resolver answers an NXDOMAIN it held a moment (never
// cached) this way.
func (a WireAnswer) Aged(elapsed time.Duration) WireAnswer {
	a.ttl = max(0, a.ttl-elapsed.Truncate(time.Second))
	return a
}

// Wire is the answer's message (ID 0, the entry's question, its records,
// no OPT), as a hit writes its records; only to be read.
func (a *WireAnswer) Wire() []byte { return a.wire() }

// Message is the answer as a dns.Msg the caller owns, as a hit right after
// storing shows it: every TTL the entry's, no OPT.
func (a *WireAnswer) Message() *dns.Msg {
	m := new(dns.Msg)
	if err := m.Unpack(a.wire()); err != nil {
		panic("cache: prepared wire answer does not unpack: " + err.Error())
	}
	setTTLs(shownTTL(a.ttl, 0), m.Answer, m.Ns, m.Extra)
	return m
}

// appendRecords writes the record sections of p (of its cut answer under
// tag cut, if it has one) to dst, every TTL set to ttl, when they fit in
// limit bytes; see AppendFresh.
func (p *prepared) appendRecords(dst []byte, ttl uint32, limit int, cut uint16) ([]byte, WireHit, bool) {
	if cut != 0 && p.cutTag == cut {
		c := p.cutAnswer()
		dst, hit, ok := c.appendRecords(dst, ttl, limit, 0)
		hit.Cut = ok
		return dst, hit, ok
	}
	wire := p.wire()
	records := wire[p.answerAt:]
	if len(dst)+len(records) > limit {
		return dst, WireHit{}, false
	}
	base := len(dst) - int(p.answerAt)
	dst = append(dst, records...)
	hdr, _ := dnswire.ReadHeader(wire) // an entry is a whole message
	n := int(hdr.ANCount) + int(hdr.NSCount) + int(hdr.ARCount)
	for offsets := p.data[p.wireLen : int(p.wireLen)+2*n]; len(offsets) >= 2; offsets = offsets[2:] {
		dnswire.SetTTL(dst, base+int(binary.BigEndian.Uint16(offsets)), ttl) // the entry's own offset table
	}
	return dst, WireHit{
		Rcode:             hdr.Rcode(),
		AuthenticatedData: hdr.Flags&dnswire.FlagAD != 0,
		Answer:            hdr.ANCount,
		Ns:                hdr.NSCount,
		Extra:             hdr.ARCount,
		TTL:               p.ttl,
	}, true
}
