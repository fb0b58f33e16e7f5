package cache

import (
	"encoding/binary"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// The wire store (issue 17) makes an entry straight from an upstream
// reply's bytes, for the shapes nearly every miss gets back: answer records
// of the question's type (A or AAAA) and CNAMEs, or a negative answer with
// nothing or one SOA, and at most an OPT record. (Which CNAME chains may be
// kept is the scrubber's and the router's call, made before: the store
// only writes them.) The entry is byte for
// byte the one Set makes from the same reply unpacked (prepare: question
// as the reply spells it, ID 0, OPT gone, compressed by miekg/dns's rules),
// so every reader (AppendFresh, Get, snapshots) sees no difference. Its
// encoder writes what miekg's packer writes for these shapes: every name
// (owners, CNAME targets, SOA names) goes through the same suffix table,
// label by label, with the same case-sensitive matching, so a record owned
// by the question's name points at the question and one owned by a CNAME's
// target at that target. Anything else is declined, and the caller takes
// the dns.Msg path. FuzzPrepareWire holds the two to the same bytes.

// WireAnswer is an upstream reply prepared from its bytes (PrepareWire):
// what an entry keeps, and what the first answer to the clients waiting
// for it is written from, whether it is stored or not (NXDOMAIN, TTL 0).
type WireAnswer struct {
	prepared
	rcode  int
	cnames int // CNAME records in the answer
}

// CNAMEs is the number of CNAME records in the answer.
func (a *WireAnswer) CNAMEs() int { return a.cnames }

// CNAMETargets calls yield with the target of each CNAME record in the
// answer, in order, in canonical form (lower case, fully qualified; the
// name is only valid during the call), until yield returns false; it
// reports whether every call returned true. The resolver checks with it
// that no target lies in another of its zones.
func (a *WireAnswer) CNAMETargets(yield func(name []byte) bool) bool {
	wire := a.wire()
	off := int(a.answerAt)
	var buf [maxWireNameLen]byte
	var text [maxWireNameLen]byte
	for range binary.BigEndian.Uint16(wire[6:]) {
		var err error
		if off, err = skipName(wire, off); err != nil || off+10 > len(wire) {
			return false
		}
		rdlen := int(binary.BigEndian.Uint16(wire[off+8:]))
		if binary.BigEndian.Uint16(wire[off:]) == dns.TypeCNAME {
			target, _, ok := dnswire.ReadPlainName(wire, off+10, buf[:0])
			if !ok || !yield(canonicalText(text[:0], target)) {
				return false
			}
		}
		off += 10 + rdlen
	}
	return true
}

// canonicalText appends name (uncompressed wire form of plain labels) to
// dst in presentation form, lower case, with the trailing dot.
func canonicalText(dst, name []byte) []byte {
	if len(name) == 1 {
		return append(dst, '.')
	}
	for i := 0; name[i] != 0; i += 1 + int(name[i]) {
		for _, c := range name[i+1 : i+1+int(name[i])] {
			dst = append(dst, lowerASCII(c))
		}
		dst = append(dst, '.')
	}
	return dst
}

// Rcode is the reply's rcode: NOERROR or NXDOMAIN.
func (a *WireAnswer) Rcode() int { return a.rcode }

// TTL is the entry's lifetime: the reply's, clamped.
func (a *WireAnswer) TTL() time.Duration { return a.ttl }

// maxWireNameLen is the longest name in wire form (RFC 1035 section 2.3.4).
const maxWireNameLen = dnswire.MaxNameLen

// maxCompressionOffset is the first offset a compression pointer cannot
// reach; miekg/dns records no name at or past it.
const maxCompressionOffset = 1 << 14

// PrepareWire makes the entry for k from raw, an upstream's reply to k's
// question, if raw has one of the wire store's shapes (see above): NOERROR
// or NXDOMAIN, not truncated, answer records of k's type (A, AAAA) and
// CNAMEs, names of plain labels only, or none and at most an SOA in
// authority, additional at most an OPT with extended rcode 0. It applies the TTL clamps as Set does and reports
// false for anything else. raw is only read.
func (c *Cache) PrepareWire(k Key, raw []byte) (WireAnswer, bool) {
	return prepareWire(k, raw, c.policy.Load().bounds)
}

// SetWire stores a under k, as Set stores the reply a was prepared from:
// NOERROR only (NXDOMAIN is never cached), counted the same way.
func (c *Cache) SetWire(k Key, a *WireAnswer) (stored bool, reason string) {
	if a.rcode != dns.RcodeSuccess {
		c.stats.refused.Add(1)
		return false, "rcode " + dnswire.RcodeName(a.rcode)
	}
	c.store(k, a.prepared)
	return true, ""
}

// AppendRecords is AppendFresh for a just prepared answer: its records
// with every TTL the one a hit right after storing shows, if they fit in
// limit bytes of dst. It counts nothing.
func (a *WireAnswer) AppendRecords(dst []byte, limit int) ([]byte, WireHit, bool) {
	return a.appendRecords(dst, shownTTL(a.ttl, 0), limit)
}

// Message is the answer as a dns.Msg the caller owns, as Shape makes it
// from the reply: every TTL the entry's, no OPT.
func (a *WireAnswer) Message() *dns.Msg {
	m := new(dns.Msg)
	if err := m.Unpack(a.wire()); err != nil {
		panic("cache: prepared wire answer does not unpack: " + err.Error())
	}
	setTTLs(shownTTL(a.ttl, 0), m.Answer, m.Ns, m.Extra)
	return m
}

// appendRecords writes p's record sections to dst, every TTL set to ttl,
// when they fit in limit bytes; see AppendFresh.
func (p *prepared) appendRecords(dst []byte, ttl uint32, limit int) ([]byte, WireHit, bool) {
	wire := p.wire()
	records := wire[p.answerAt:]
	if len(dst)+len(records) > limit {
		return dst, WireHit{}, false
	}
	base := len(dst) - int(p.answerAt)
	dst = append(dst, records...)
	for offsets := p.data[p.wireLen:]; len(offsets) >= 2; offsets = offsets[2:] {
		binary.BigEndian.PutUint32(dst[base+int(binary.BigEndian.Uint16(offsets)):], ttl)
	}
	const adBit = 1 << 5 // in the flags' second byte
	return dst, WireHit{
		Rcode:             int(wire[3] & 0xF),
		AuthenticatedData: wire[3]&adBit != 0,
		Answer:            binary.BigEndian.Uint16(wire[6:]),
		Ns:                binary.BigEndian.Uint16(wire[8:]),
		Extra:             binary.BigEndian.Uint16(wire[10:]),
		TTL:               p.ttl,
	}, true
}

// maxWireEntry bounds an entry the wire store makes: the upstream is
// asked for at most 1232 bytes over UDP, so more is never needed, and a
// fixed buffer keeps the encoder off the heap.
const maxWireEntry = 4096

// wireWriter builds an entry the way miekg/dns packs it with compression.
// Its buffers are arrays, not slices it appends to, so that it lives on
// its caller's stack (one allocation per entry: the entry itself).
type wireWriter struct {
	out      [maxWireEntry]byte
	n        int  // bytes of out written
	overflow bool // out was too small: the entry is declined
	// The compression table: every name suffix written so far, uncompressed
	// (a range of names), at the offset it was written at.
	suffixes [64]struct {
		at, start, end int
	}
	nsuffixes int
	names     [4 * maxWireNameLen]byte // the names written, uncompressed
	nnames    int
	ttls      [64]uint16 // the offsets of the TTL fields
	nttls     int
}

// put appends b to the entry.
func (w *wireWriter) put(b ...byte) {
	if w.n+len(b) > len(w.out) {
		w.overflow = true
		return
	}
	w.n += copy(w.out[w.n:], b)
}

// ttlHere records that a TTL field starts 4 bytes from here (after type
// and class).
func (w *wireWriter) ttlHere() {
	if w.nttls == len(w.ttls) {
		w.overflow = true
		return
	}
	w.ttls[w.nttls] = uint16(w.n + 4)
	w.nttls++
}

// name writes name (uncompressed wire form) as packDomainName does: label by
// label, each remaining suffix looked up in the table (an exact,
// case-sensitive match, as miekg's map of presentation strings is) and, when
// absent, recorded at its offset; the first match ends the name with a
// pointer. The root name is one zero byte and is never recorded.
func (w *wireWriter) name(name []byte) {
	if len(name) == 1 {
		w.put(0)
		return
	}
	if w.nnames+len(name) > len(w.names) {
		w.overflow = true
		return
	}
	base := w.nnames
	w.nnames += copy(w.names[base:], name)
	for i := 0; name[i] != 0; i += 1 + int(name[i]) {
		if at, ok := w.find(name[i:]); ok {
			w.put(byte(at>>8)|0xC0, byte(at))
			return
		}
		if w.n < maxCompressionOffset {
			if w.nsuffixes == len(w.suffixes) {
				w.overflow = true
				return
			}
			w.suffixes[w.nsuffixes] = struct{ at, start, end int }{w.n, base + i, base + len(name)}
			w.nsuffixes++
		}
		w.put(name[i : i+1+int(name[i])]...)
	}
	w.put(0)
}

func (w *wireWriter) find(suffix []byte) (int, bool) {
	for _, s := range w.suffixes[:w.nsuffixes] {
		if string(w.names[s.start:s.end]) == string(suffix) {
			return s.at, true
		}
	}
	return 0, false
}

// prepareWire is PrepareWire's pure part, as prepare is Set's.
func prepareWire(k Key, raw []byte, bounds ttlBounds) (WireAnswer, bool) {
	if len(raw) < headerLen || len(raw) >= maxCompressionOffset {
		return WireAnswer{}, false
	}
	flags := binary.BigEndian.Uint16(raw[2:])
	rcode := int(flags & 0xF)
	const flagQR, flagTC = 1 << 15, 1 << 9
	if flags&flagQR == 0 || flags&flagTC != 0 || (rcode != dns.RcodeSuccess && rcode != dns.RcodeNameError) {
		return WireAnswer{}, false
	}
	qd, an := binary.BigEndian.Uint16(raw[4:]), binary.BigEndian.Uint16(raw[6:])
	ns, ar := binary.BigEndian.Uint16(raw[8:]), binary.BigEndian.Uint16(raw[10:])
	if qd != 1 || ns > 1 || ar > 1 || (an > 0 && rcode != dns.RcodeSuccess) {
		return WireAnswer{}, false
	}

	var qbuf, nbuf, tbuf, mbuf, rbuf [maxWireNameLen]byte
	qname, off, ok := dnswire.ReadPlainName(raw, headerLen, qbuf[:0])
	if !ok || off+4 > len(raw) || len(qname) == 1 || !sameNameFold(qname, k.Name) {
		return WireAnswer{}, false
	}
	qtype, qclass := binary.BigEndian.Uint16(raw[off:]), binary.BigEndian.Uint16(raw[off+2:])
	if qtype != k.Type || qclass != k.Class || (an > 0 && qtype != dns.TypeA && qtype != dns.TypeAAAA) {
		return WireAnswer{}, false
	}
	off += 4

	var w wireWriter
	w.put(0, 0, raw[2], raw[3], 0, 1, byte(an>>8), byte(an), 0, byte(ns), 0, 0)
	w.name(qname)
	w.put(raw[off-4 : off]...)
	answerAt := w.n

	smallest := time.Duration(-1)
	cnames := 0
	for range an {
		var owner []byte
		owner, off, ok = dnswire.ReadPlainName(raw, off, nbuf[:0])
		if !ok || off+10 > len(raw) {
			return WireAnswer{}, false
		}
		rtype, class := binary.BigEndian.Uint16(raw[off:]), binary.BigEndian.Uint16(raw[off+2:])
		rdlen := int(binary.BigEndian.Uint16(raw[off+8:]))
		if class != qclass || off+10+rdlen > len(raw) {
			return WireAnswer{}, false
		}
		w.name(owner) // the question's name, or a CNAME's target: a pointer
		w.ttlHere()
		switch {
		case rtype == qtype && rdlen == dnswire.AddressLen(rtype):
			w.put(raw[off : off+10+rdlen]...)
		case rtype == dns.TypeCNAME:
			target, end, ok := dnswire.ReadPlainName(raw, off+10, tbuf[:0])
			if !ok || end != off+10+rdlen {
				return WireAnswer{}, false
			}
			w.put(raw[off : off+8]...) // type, class, TTL
			rdlenAt := w.n
			w.put(0, 0)
			w.name(target) // compressed, as miekg packs a CNAME's target
			if w.overflow {
				return WireAnswer{}, false
			}
			binary.BigEndian.PutUint16(w.out[rdlenAt:], uint16(w.n-rdlenAt-2))
			cnames++
		default:
			return WireAnswer{}, false
		}
		if ttl := rrTTL(binary.BigEndian.Uint32(raw[off+4:])); smallest < 0 || ttl < smallest {
			smallest = ttl
		}
		off += 10 + rdlen
	}
	ttl := smallest
	if ns == 1 {
		var owner, mname, rname []byte
		owner, off, ok = dnswire.ReadPlainName(raw, off, nbuf[:0])
		if !ok || off+10 > len(raw) || binary.BigEndian.Uint16(raw[off:]) != dns.TypeSOA {
			return WireAnswer{}, false
		}
		header := raw[off : off+8] // type, class, TTL
		end := off + 10 + int(binary.BigEndian.Uint16(raw[off+8:]))
		off += 10
		if end > len(raw) {
			return WireAnswer{}, false
		}
		if mname, off, ok = dnswire.ReadPlainName(raw, off, mbuf[:0]); !ok {
			return WireAnswer{}, false
		}
		if rname, off, ok = dnswire.ReadPlainName(raw, off, rbuf[:0]); !ok || off+20 != end {
			return WireAnswer{}, false
		}
		w.name(owner)
		w.ttlHere()
		w.put(header...)
		rdlenAt := w.n
		w.put(0, 0)
		w.name(mname)
		w.name(rname)
		w.put(raw[off:end]...)
		if w.overflow {
			return WireAnswer{}, false
		}
		binary.BigEndian.PutUint16(w.out[rdlenAt:], uint16(w.n-rdlenAt-2))
		// RFC 2308 section 5: a negative answer lives min(SOA TTL,
		// MINIMUM), and no longer than any record before it (replyTTL:
		// NODATA at the end of a CNAME chain).
		soaTTL := min(rrTTL(binary.BigEndian.Uint32(header[4:])), rrTTL(binary.BigEndian.Uint32(raw[end-4:])))
		if ttl < 0 || soaTTL < ttl {
			ttl = soaTTL
		}
		off = end
	}
	if ttl < 0 {
		ttl = 0 // no records: noDataTTL's "nothing bounds it", stored expired
	}
	if ar == 1 {
		if off, ok = dnswire.SkipPlainOPT(raw, off); !ok {
			return WireAnswer{}, false
		}
	}
	if off != len(raw) || w.overflow || w.n >= maxCompressionOffset {
		return WireAnswer{}, false
	}

	kind := Positive
	if an == 0 {
		kind = NoData
	}
	data := make([]byte, w.n, w.n+2*w.nttls)
	copy(data, w.out[:w.n])
	for _, at := range w.ttls[:w.nttls] {
		data = binary.BigEndian.AppendUint16(data, at)
	}
	return WireAnswer{prepared: prepared{data: data, wireLen: uint16(w.n), answerAt: uint16(answerAt),
		kind: kind, ttl: bounds.clamp(ttl)}, rcode: rcode, cnames: cnames}, true
}
