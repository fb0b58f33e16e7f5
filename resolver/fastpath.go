package resolver

import (
	"encoding/binary"
	"net/netip"
	"time"
	"unsafe"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
)

// The fast path answers the query most nodes send most of the time — one
// question, plain name, maybe EDNS, its answer fresh in the cache — straight
// from the packet's bytes into a reply buffer: no dns.Msg, no unpacking, no
// packing, no allocation (issue 6). Anything else it declines, and the
// packet takes the general path (unpack, ServeDNS), which holds every rule;
// the fast path must give the same answer or none. TestFastPathMatchesServeDNS
// and FuzzFastPath check that.

// maxNameLen is the longest domain name in presentation form without
// escapes: 255 wire bytes less the root label's length byte.
const maxNameLen = 254

// plainQuery is a query as the fast path reads it.
type plainQuery struct {
	id       uint16
	flags    uint16 // the request's header flags
	question []byte // the question section as sent (name, type, class)
	qtype    uint16
	qclass   uint16
	edns     bool
	do       bool
	udpSize  uint16
	nameLen  int
	name     [maxNameLen + 1]byte // canonical: lower case, trailing dot
}

// Header flag bits (RFC 1035 §4.1.1, RFC 4035 §3.2 for AD and CD).
const (
	flagQR = 1 << 15
	flagRD = 1 << 8
	flagRA = 1 << 7
	flagAD = 1 << 5
	flagCD = 1 << 4
)

// EDNS option codes the fast path accepts: ones towerd ignores and that
// cannot make unpacking fail (RFC 7873 cookie, RFC 7830 padding). Any other
// option sends the query down the general path.
const (
	optionCookie  = 10
	optionPadding = 12
)

// parse reads p into q. It accepts only a QUERY with exactly one question,
// no answer or authority records and at most an OPT record of version 0,
// whose name is uncompressed and made of letters, digits, '-' and '_'.
func (q *plainQuery) parse(p []byte) bool {
	if len(p) < 12+1+4 {
		return false
	}
	q.id = binary.BigEndian.Uint16(p)
	q.flags = binary.BigEndian.Uint16(p[2:])
	if q.flags&flagQR != 0 || (q.flags>>11)&0xF != dns.OpcodeQuery {
		return false
	}
	if binary.BigEndian.Uint16(p[4:]) != 1 || binary.BigEndian.Uint16(p[6:]) != 0 ||
		binary.BigEndian.Uint16(p[8:]) != 0 {
		return false
	}
	extra := binary.BigEndian.Uint16(p[10:])
	if extra > 1 {
		return false
	}
	off, ok := q.readName(p, 12)
	if !ok || off+4 > len(p) {
		return false
	}
	q.qtype = binary.BigEndian.Uint16(p[off:])
	q.qclass = binary.BigEndian.Uint16(p[off+2:])
	off += 4
	q.question = p[12:off]
	q.edns, q.do, q.udpSize = false, false, 0
	if extra == 1 {
		if off, ok = q.readOPT(p, off); !ok {
			return false
		}
	}
	return off == len(p)
}

// readName copies the name at off into q.name in canonical form and returns
// the offset after it.
func (q *plainQuery) readName(p []byte, off int) (int, bool) {
	n := 0
	for {
		if off >= len(p) {
			return 0, false
		}
		l := int(p[off])
		off++
		if l == 0 {
			break
		}
		// Compression pointers and extended label types have no business in
		// a question; the general path judges them.
		if l > 63 || off+l > len(p) || n+l+1 > maxNameLen {
			return 0, false
		}
		for _, c := range p[off : off+l] {
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			default:
				return 0, false // would need escaping in presentation form
			}
			q.name[n] = c
			n++
		}
		q.name[n] = '.'
		n++
		off += l
	}
	if n == 0 {
		q.name[0] = '.'
		n = 1
	}
	q.nameLen = n
	return off, true
}

// readOPT reads the OPT record at off (RFC 6891 §6.1.2).
func (q *plainQuery) readOPT(p []byte, off int) (int, bool) {
	if off+11 > len(p) || p[off] != 0 || binary.BigEndian.Uint16(p[off+1:]) != dns.TypeOPT {
		return 0, false
	}
	q.udpSize = binary.BigEndian.Uint16(p[off+3:])
	version := p[off+6]
	flags := binary.BigEndian.Uint16(p[off+7:])
	rdlen := int(binary.BigEndian.Uint16(p[off+9:]))
	off += 11
	if version != 0 || off+rdlen > len(p) {
		return 0, false // BADVERS is the general path's answer
	}
	for opts := p[off : off+rdlen]; len(opts) > 0; {
		if len(opts) < 4 {
			return 0, false
		}
		code, l := binary.BigEndian.Uint16(opts), int(binary.BigEndian.Uint16(opts[2:]))
		if (code != optionCookie && code != optionPadding) || 4+l > len(opts) {
			return 0, false
		}
		opts = opts[4+l:]
	}
	q.edns = true
	q.do = flags&0x8000 != 0 // RFC 3225
	return off + rdlen, true
}

// cd is the request's Checking Disabled bit, part of the cache key.
func (q *plainQuery) cd() bool { return q.flags&flagCD != 0 }

// replyFlags are the reply's header flags, as ServeDNS sets them (SetReply,
// then RA): QR and RA, the request's RD and CD, the rcode. AD is the
// caller's to add.
func (q *plainQuery) replyFlags(rcode int) uint16 {
	return uint16(flagQR|flagRA) | q.flags&(flagRD|flagCD) | uint16(rcode&0xF)
}

// putHeader writes a reply's header into hdr[:12]: one question, and the
// records of each section.
func putHeader(hdr []byte, id, flags, answer, ns, extra uint16) {
	binary.BigEndian.PutUint16(hdr[0:], id)
	binary.BigEndian.PutUint16(hdr[2:], flags)
	binary.BigEndian.PutUint16(hdr[4:], 1)
	binary.BigEndian.PutUint16(hdr[6:], answer)
	binary.BigEndian.PutUint16(hdr[8:], ns)
	binary.BigEndian.PutUint16(hdr[10:], extra)
}

// optLen is the size of the OPT record towerd appends to a fresh answer:
// root name, type, class (UDP size), TTL (extended rcode, version, flags),
// empty RDATA.
const optLen = 1 + 2 + 2 + 4 + 2

// appendOPT appends towerd's OPT record (RFC 6891): its UDP size, the
// client's DO bit, and an Extended DNS Error option when ede is not 0.
func appendOPT(dst []byte, do bool, ede uint16) []byte {
	var flags, rdlen byte
	if do {
		flags = 0x80
	}
	if ede != 0 {
		rdlen = 6
	}
	dst = append(dst, 0, byte(dns.TypeOPT>>8), byte(dns.TypeOPT), advertisedUDPSize>>8, advertisedUDPSize&0xFF,
		0, 0, flags, 0, 0, rdlen)
	if ede != 0 {
		dst = append(dst, byte(dns.EDNS0EDE>>8), byte(dns.EDNS0EDE&0xFF), 0, 2, byte(ede>>8), byte(ede))
	}
	return dst
}

// answerPacket answers the UDP query in pkt from a client at from, if it is a
// plain query whose answer is fresh in the cache, by appending the reply to
// dst. It reports false, having written nothing and counted nothing, for
// every other packet: the caller then unpacks it and calls ServeDNS.
// q is the caller's scratch space, reused from packet to packet.
func (h *Handler) answerPacket(dst, pkt []byte, from netip.AddrPort, q *plainQuery) ([]byte, bool) {
	s := h.settings.Load()
	start := s.Now()
	if !q.parse(pkt) || q.qclass != dns.ClassINET || q.qtype == dns.TypeAXFR || q.qtype == dns.TypeIXFR {
		return dst, false
	}
	if !allowedAddr(s.Allow, from.Addr()) {
		return dst, false
	}
	name := q.name[:q.nameLen]
	if s.Records != nil && coversName(s.Records, name) {
		return dst, false
	}
	zone := s.router.routeCanonical(name)

	size, reserve := dns.MinMsgSize, 0 // RFC 1035: 512 bytes without EDNS
	if q.edns {
		size, reserve = max(size, int(q.udpSize)), optLen
	}
	headerAt := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) // the header, written last
	dst = append(dst, q.question...)
	dst, hit, ok := h.cache.AppendFresh(dst, name, q.qtype, q.qclass, q.do, q.cd(), headerAt+size-reserve)
	if !ok {
		if h.flights.full(s.MaxInflight) {
			return h.rejectPacket(dst, headerAt, q, name, s, zone, start)
		}
		return dst[:headerAt], false
	}

	flags := q.replyFlags(hit.Rcode)
	// RFC 6840 §5.8: set AD only for clients that asked with DO or AD.
	if hit.AuthenticatedData && (q.do || q.flags&flagAD != 0) {
		flags |= flagAD
	}
	extra := hit.Extra
	if q.edns {
		extra++
		dst = appendOPT(dst, q.do, 0)
	}
	putHeader(dst[headerAt:], q.id, flags, hit.Answer, hit.Ns, extra)

	prefetch := s.wantsPrefetch(hit.TTL, hit.Remaining)
	if prefetch {
		// Rare (near expiry, once per flight), so the key's
		// own string is allocated here only.
		key := cache.NewKey(string(name), q.qtype, q.qclass, q.do, q.cd())
		h.flights.join(key, s.MaxInflight, h.resolver(s, zone, key))
	}
	if h.obs != nil {
		h.obs.ObserveQuery(Query{Proto: "udp", Qtype: q.qtype, Zone: zone.Name, Source: SourceCache,
			Rcode: hit.Rcode, Duration: s.Now().Sub(start), Prefetch: prefetch})
	}
	return dst, true
}

// rejectPacket is the fast path's answer to a miss while the in-flight cap is
// full: SERVFAIL at once, as ServeDNS would answer it, but without the
// goroutine, the unpacking and the packing. Under a flood of unique names
// (issue 7) nearly every query ends here, and answering them in the reader
// keeps the flood from crowding out the cached names' answers. dst holds,
// from headerAt, answerPacket's room for the header and the question. It
// declines (false, dst cut back to headerAt) when ServeDNS would do
// something else: the name has an entry (stale may be served) or a
// resolution for it runs (join it).
func (h *Handler) rejectPacket(dst []byte, headerAt int, q *plainQuery, name []byte, s *settings, zone Zone, start time.Time) ([]byte, bool) {
	// A key aliasing name, for lookups only: neither the cache nor the
	// flights keep a key they are asked about.
	k := cache.Key{Name: unsafe.String(&name[0], len(name)), Type: q.qtype, Class: q.qclass, DO: q.do, CD: q.cd()}
	if h.cache.Has(k) || !h.flights.rejectNew(k, s.MaxInflight) {
		return dst[:headerAt], false
	}
	h.cache.CountMiss()

	var extra uint16
	if q.edns {
		extra = 1
		// RFC 8914: EDE 22, No Reachable Authority, as ServeDNS marks it.
		dst = appendOPT(dst, q.do, dns.ExtendedErrorCodeNoReachableAuthority)
	}
	putHeader(dst[headerAt:], q.id, q.replyFlags(dns.RcodeServerFailure), 0, 0, extra)
	if h.obs != nil {
		h.obs.ObserveQuery(Query{Proto: "udp", Qtype: q.qtype, Zone: zone.Name, Source: SourceUpstream,
			Rcode: dns.RcodeServerFailure, Duration: s.Now().Sub(start)})
	}
	return dst, true
}

// NameCoverer is implemented by a RecordSource that can tell, from a
// canonical name alone, whether it might answer for it. Without it the fast
// path leaves every query to the general path, where Lookup is asked.
// name is canonical (lower case, fully qualified) and only read during the
// call.
type NameCoverer interface {
	Covers(name []byte) bool
}

func coversName(rs RecordSource, name []byte) bool {
	c, ok := rs.(NameCoverer)
	return !ok || c.Covers(name)
}

// allowedAddr is allowed for an address read with ReadFromUDPAddrPort.
func allowedAddr(allow []netip.Prefix, ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
