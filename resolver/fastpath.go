package resolver

import (
	"net/netip"
	"time"
	"unsafe"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/consulcut"
	"github.com/towerd/towerd/resolver/dnswire"
)

// The fast path answers the query most nodes send most of the time — one
// question, plain name, maybe EDNS, its answer fresh in the cache — straight
// from the packet's bytes into a reply buffer: no dns.Msg, no unpacking, no
// packing, no allocation (issue 6). Anything else it declines, and the
// packet takes the general path (unpack, ServeDNS). Both apply the same
// rules from the same places (request.go: admit, replyShape, observe;
// Handler.planMiss), so the fast path gives the same answer or none.
// TestFastPathMatchesServeDNS*, TestFastRejectMatchesServeDNS* and
// FuzzFastPath check that.

// maxNameLen is the longest domain name in presentation form without
// escapes: 255 wire bytes less the root label's length byte.
const maxNameLen = 254

// plainQuery is a query as the fast path reads it: the request admission
// and the reply core read, and the bytes the fast path copies.
type plainQuery struct {
	request
	question []byte // the question section as sent (name, type, class)
	nameLen  int
	name     [maxNameLen + 1]byte // canonical: lower case, trailing dot
	view     dnswire.Msg          // the packet, as parse read it
	// udpAnswers and trims are Config.TrimUDP's say on the question, for
	// a UDP query: its answer is cut like Consul's (cutAsConsul).
	udpAnswers int
	trims      bool
	// replier, when set (by a UDP socket's reader or a TCP connection's
	// loop), lets a miss take the wire miss path (wiremiss.go); parse
	// leaves it as it is.
	replier wireReplier
	// joined, after answerPacket declined, is the refresh the fast path
	// joined or started for a stale answer the client must wait for: the
	// reader hands it to ServeDNS with the packet (flightJoiner), which
	// waits for that refresh rather than deciding again (issue 34: a
	// refresh that ended in NXDOMAIN meanwhile left no entry, and ServeDNS
	// asked the upstream a second time).
	joined *flight
}

// EDNS option codes the fast path accepts: ones towerd ignores and that
// cannot make unpacking fail (RFC 7873 cookie, RFC 7830 padding). Any other
// option sends the query down the general path.
const (
	optionCookie  = 10
	optionPadding = 12
)

// parse reads p into q with the wire view. It accepts only a query whose
// header passes acceptHeader, with no answer or authority records and at
// most one record in the additional section, an OPT with the root as its
// owner and no option but a cookie or padding; whose name is uncompressed
// and made of letters, digits, '-' and '_' (its canonical text, the cache
// key's name, is then its bytes lower-cased with dots); and nothing after
// the last record. The rest of admission (admit) is the caller's.
func (q *plainQuery) parse(p []byte) bool {
	hdr, ok := dnswire.ReadHeader(p)
	if !ok || len(p) < dnswire.HeaderLen+1+4 {
		return false
	}
	q.request = request{id: hdr.ID, flags: hdr.Flags, qdcount: int(hdr.QDCount)}
	if acceptHeader(q.flags, q.qdcount) != dns.MsgAccept {
		return false
	}
	m := &q.view
	if m.Parse(p) != nil || m.Counts[dnswire.Answer] != 0 || m.Counts[dnswire.Authority] != 0 ||
		m.Counts[dnswire.Additional] > 1 {
		return false // a second OPT (FORMERR) or other records: the general path's
	}
	name, inPlace := m.QuestionInPlace()
	if !inPlace {
		return false // compressed
	}
	end := m.QEnd
	if m.Counts[dnswire.Additional] == 1 {
		if m.OPT != 0 || !m.OPTOwnerRoot() || !m.EachOption(fastOption) {
			return false
		}
		q.udpSize, q.version, q.do = m.UDPSize(), m.EDNSVersion(), m.DO() // RFC 3225
		q.opts, q.edns = 1, true
		end = int(m.RR(0).End)
	}
	if end != len(p) {
		return false
	}
	if !dnswire.PlainLabels(name) {
		return false // would need escaping in presentation form
	}
	q.nameLen = len(dnswire.AppendText(q.name[:0], name, true))
	q.qtype, q.qclass = m.QType, m.QClass
	q.question = m.QuestionSection()
	return true
}

// fastOption is the EDNS options the fast path takes (optionCookie,
// optionPadding).
func fastOption(code uint16, _ []byte) bool { return code == optionCookie || code == optionPadding }

// recordsPacket is answerPacket for a name a RecordSource covers: the
// source's answer written as bytes when it can write it
// (RecordAppender: every answer of the Consul watch, fresh or stale),
// framed by the reply core like ServeDNS's a.records (a stale one with
// EDE 3 and the one stale TTL), and cut like Consul's on the bytes
// (cutAsConsul). Everything else it declines, dst unchanged, to
// ServeDNS, which asks the source's Answer.
func (h *Handler) recordsPacket(dst []byte, q *plainQuery, name []byte, s *settings, zone Zone, start time.Time) ([]byte, bool) {
	if q.qclass != dns.ClassINET {
		return dst, false
	}
	const rcode = dns.RcodeSuccess
	sh := s.replyShape(&q.request)
	reserve := sh.added(rcode, true)                     // room for EDE 3, should the answer be stale
	dst, headerAt := dnswire.StartReply(dst, q.question) // the header, written last
	dst, counts, stale, cutDone, label, why, ok := appendRecords(s.Records, dst, name, q.qtype,
		q.writeLimit(headerAt, sh, reserve), s.staleTTLSeconds(), q.cutTag(sh))
	if ok {
		dst, counts, ok = q.cutAsConsul(dst, headerAt, sh, rcode, stale, cutDone, counts)
	}
	if !ok {
		return dst[:headerAt], false
	}
	dst = sh.closeReply(dst, headerAt, q.id, cache.WireHit{Rcode: rcode, Answer: counts[0], Ns: counts[1], Extra: counts[2]}, stale)
	if stale {
		label = SourceStale
	}
	q.rule = why
	q.reply = dst[headerAt:]
	h.observe(s, &q.request, zone.Name, label, rcode, start, false)
	return dst, true
}

// cutClass is q's class for Consul's cut of an answer with rcode
// (package consulcut).
func (q *plainQuery) cutClass(sh replyShape, rcode int, stale bool) consulcut.Class {
	return consulcut.Class{Limit: sh.limit, EDNS: sh.opt, AnswerLimit: q.udpAnswers, Room: sh.added(rcode, stale)}
}

// cutTag is the tag of the cut answer a cache entry stores for q (its
// answer decided once, when the entry was made: cutForNarrow), 0 when q
// is no UDP client without EDNS under the Consul domain.
func (q *plainQuery) cutTag(sh replyShape) uint16 {
	if !q.trims || sh.opt {
		return 0
	}
	return consulcut.NarrowTag(q.udpAnswers)
}

// cutAsConsul cuts the answer written at dst[headerAt:] (header room, q's
// question, then counts records of each section) as Consul's DNS cuts its
// own for q (issue 34), on the bytes: an answer already cut (decided, a
// cache entry's cut answer) or that the cut leaves whole as it is; one of
// A or AAAA records alone (every record one size, its owner a pointer to
// the question: a watched address answer, or a cached one an older entry
// holds) to the first records consulcut's KeepFixed keeps; any other
// planned and written again (cutWritten). ok false (an answer cutWritten
// declines, or one still bigger than the client's size) leaves it to
// ServeDNS.
func (q *plainQuery) cutAsConsul(dst []byte, headerAt int, sh replyShape, rcode int, stale, decided bool, counts [3]uint16) ([]byte, [3]uint16, bool) {
	if !q.trims {
		return dst, counts, true
	}
	out, ok := dst, true
	if !decided {
		out, counts, ok = q.cutConsul(dst, headerAt, q.cutClass(sh, rcode, stale), counts)
	}
	if ok && len(out)-headerAt > sh.limit-sh.added(rcode, stale) {
		// Written past the client's size for the cut (writeLimit), and
		// still too big: ServeDNS's.
		return out[:headerAt], counts, false
	}
	return out, counts, ok
}

// writeLimit is where an answer for q written at dst[headerAt:] must end:
// the client's size less reserve, or, for an answer Consul's cut may make
// fit (q.trims), the largest message: cutAsConsul cuts it, then holds it
// to the client's size.
func (q *plainQuery) writeLimit(headerAt int, sh replyShape, reserve int) int {
	if q.trims {
		return headerAt + dnswire.MaxMessageLen
	}
	return headerAt + sh.limit - reserve
}

// cutConsul is cutAsConsul's cut for class c.
func (q *plainQuery) cutConsul(dst []byte, headerAt int, c consulcut.Class, counts [3]uint16) ([]byte, [3]uint16, bool) {
	if !c.Cuts(int(counts[0]), len(dst)-headerAt) {
		return dst, counts, true
	}
	n := int(counts[0])
	base := dnswire.HeaderLen + len(q.question)
	at := headerAt + base
	if n == 0 {
		return dst, counts, false
	}
	if counts[1] != 0 || counts[2] != 0 || (len(dst)-at)%n != 0 {
		return q.cutWritten(dst, headerAt, c, counts)
	}
	rec := (len(dst) - at) / n
	for i := at; i < len(dst); i += rec {
		if rec < 12 || dst[i] != 0xC0 || dst[i+1] != dnswire.HeaderLen || int(dst[i+10])<<8|int(dst[i+11]) != rec-12 {
			return q.cutWritten(dst, headerAt, c, counts)
		}
	}
	keep := c.KeepFixed(n, len(q.question), rec)
	return dst[:at+keep*rec], [3]uint16{uint16(keep)}, true
}

// answerPacket answers the query in pkt from a client at from, if it is a
// plain query whose answer is fresh in the cache, by appending the reply to
// dst. tcp says the query came over TCP (its message without the length
// prefix): the reply then has TCP's size limit. A miss with nothing in the
// cache goes the wire miss path when q.replier is set (UDP readers, TCP
// connections): it reports true with nothing appended, and the flight
// answers later, through q.replier. It
// reports false, having written nothing and counted nothing, for every
// other packet: the caller then unpacks it and calls ServeDNS. q is the
// caller's scratch space, reused from packet to packet.
func (h *Handler) answerPacket(dst, pkt []byte, from netip.AddrPort, tcp bool, q *plainQuery) ([]byte, bool) {
	s := h.settings.Load()
	start := s.Now()
	q.joined = nil
	if !q.parse(pkt) {
		return dst, false
	}
	q.client, q.port, q.pkt = from.Addr(), from.Port(), pkt
	q.tcp = tcp
	q.qname = unsafe.String(&q.name[0], q.nameLen) // for the query log; copied only if it logs
	if _, ok := admit(s, &q.request); !ok {
		return dst, false // towerd's own answer (REFUSED, BADVERS...): the general path writes it
	}
	name := q.name[:q.nameLen]
	q.udpAnswers, q.trims = 0, false
	if !tcp && s.TrimUDP != nil {
		q.udpAnswers, q.trims = s.TrimUDP(name)
	}
	zone := s.router.routeCanonical(name)
	if s.Records != nil && s.Records.Covers(name) {
		return h.recordsPacket(dst, q, name, s, zone, start)
	}

	sh := s.replyShape(&q.request)
	reserve := 0
	if sh.opt {
		reserve = dnswire.OPTLen
	}
	dst, headerAt := dnswire.StartReply(dst, q.question) // the header, written last
	dst, hit, ok := h.cache.AppendFresh(dst, name, q.qtype, q.qclass, q.do, q.cd(), q.writeLimit(headerAt, sh, reserve), q.cutTag(sh))
	if !ok {
		return h.notFresh(dst, headerAt, pkt, from, q, name, s, sh, zone, start)
	}
	var counts [3]uint16
	if dst, counts, ok = q.cutAsConsul(dst, headerAt, sh, hit.Rcode, false, hit.Cut, [3]uint16{hit.Answer, hit.Ns, hit.Extra}); !ok {
		return dst[:headerAt], false
	}
	hit.Answer, hit.Ns, hit.Extra = counts[0], counts[1], counts[2]
	dst = sh.closeReply(dst, headerAt, q.id, hit, false)

	prefetch := false
	if s.wantsPrefetch(hit.TTL, hit.Remaining) {
		// Rare (near expiry), so the key's own string is allocated here only.
		key := cache.NewKey(string(name), q.qtype, q.qclass, q.do, q.cd())
		prefetch = h.prefetch(s, zone, key, hit.TTL, hit.Remaining)
	}
	q.reply = dst[headerAt:]
	h.observe(s, &q.request, zone.Name, SourceCache, hit.Rcode, start, prefetch)
	return dst, true
}

// notFresh is answerPacket for a question without a fresh answer that
// fits: dst holds, from headerAt, the room for the header and the
// question. An entry that may be served stale is the stale answer's
// (stalePacket); no entry at all is a miss: the fast reject with the
// in-flight cap full, else the wire miss when the reader has a replier.
// Everything else (an entry too big for the client's size, a stale one
// the client must wait for) it declines, dst cut back to headerAt.
func (h *Handler) notFresh(dst []byte, headerAt int, pkt []byte, from netip.AddrPort, q *plainQuery, name []byte,
	s *settings, sh replyShape, zone Zone, start time.Time) ([]byte, bool) {
	reserve := 0
	if sh.opt {
		reserve = dnswire.OPTLen + dnswire.EDELen // a stale answer carries EDE 3
	}
	dst, st, found := h.cache.AppendStale(dst, name, q.qtype, q.qclass, q.do, q.cd(), q.writeLimit(headerAt, sh, reserve), s.staleTTLSeconds(), q.cutTag(sh))
	switch {
	case found == cache.StaleWritten && s.ServeStale:
		return h.stalePacket(dst, headerAt, q, name, s, sh, zone, start, st)
	case found != cache.StaleNone:
		return dst[:headerAt], false
	case h.flights.full(s.MaxInflight) || h.failedLately(cache.Key{Name: unsafe.String(&name[0], len(name)),
		Type: q.qtype, Class: q.qclass, DO: q.do, CD: q.cd()}, zone, start):
		// The cap is full, or the question failed lately (failures.go):
		// the reject asks the miss decision.
		return h.rejectPacket(dst, headerAt, q, name, s, sh, zone, start)
	case q.replier != nil && h.missPacket(pkt, from, q, name, s, zone, start):
		return dst[:headerAt], true // answered later, by the flight
	}
	return dst[:headerAt], false
}

// stalePacket is the fast path's stale answer (RFC 8767), made by
// ServeDNS's rules: the miss decision (planMiss: the failure recheck, the
// refresh joined or started, the cap) and how long the client waits
// (staleWait). When the answer is due now, the stale records AppendStale
// wrote after dst[:headerAt] (every TTL the stale answer TTL) are framed
// by the reply core, EDE 3 for EDNS clients, and the refresh, if one was
// started, runs behind the answer as any flight. A client that must wait
// for the refresh is left to ServeDNS with the refresh in q.joined: it
// waits for that flight, whatever it ends in, and asks nothing itself.
func (h *Handler) stalePacket(dst []byte, headerAt int, q *plainQuery, name []byte, s *settings, sh replyShape,
	zone Zone, start time.Time, st cache.StaleHit) ([]byte, bool) {
	dst, counts, ok := q.cutAsConsul(dst, headerAt, sh, st.Rcode, true, st.Cut, [3]uint16{st.Answer, st.Ns, st.Extra})
	if !ok {
		return dst[:headerAt], false
	}
	st.Answer, st.Ns, st.Extra = counts[0], counts[1], counts[2]
	// A key aliasing name: planMiss copies it into a flight it starts.
	k := cache.Key{Name: unsafe.String(&name[0], len(name)), Type: q.qtype, Class: q.qclass, DO: q.do, CD: q.cd()}
	fl, plan := h.planMiss(s, zone, k, true, st.RefreshFailedAt, start, planStartAliased, searchNone)
	if plan == missWait && (fl.f == nil || s.staleWait(fl, zone, st.TTL, st.Expired) > 0) {
		// A refresh stored a fresh entry since (a flight made of it), or
		// the client waits for the refresh: ServeDNS's, with the flight.
		q.joined = fl
		return dst[:headerAt], false
	}
	dst = sh.closeReply(dst, headerAt, q.id, st.WireHit, true)
	h.cache.CountStaleHit() // ServeDNS's lookup would have counted it
	q.reply = dst[headerAt:]
	h.observe(s, &q.request, zone.Name, SourceStale, st.Rcode, start, false)
	return dst, true
}

// rejectPacket is the fast path's answer to a miss while the in-flight cap is
// full: SERVFAIL at once, as ServeDNS would answer it, but without the
// goroutine, the unpacking and the packing. Under a flood of unique names
// (issue 7) nearly every query ends here, and answering them in the reader
// keeps the flood from crowding out the cached names' answers. dst holds,
// from headerAt, answerPacket's room for the header and the question.
//
// The decision is ServeDNS's own (planMiss) for a question with nothing
// in the cache (notFresh looked), and not a search-list try with a held
// NXDOMAIN (searchahead.go), which ServeDNS's miss decision answers.
// Declining cuts dst back to headerAt and reports false.
func (h *Handler) rejectPacket(dst []byte, headerAt int, q *plainQuery, name []byte, s *settings, sh replyShape, zone Zone, start time.Time) ([]byte, bool) {
	// A key aliasing name, for lookups only: the flights keep no key they
	// are asked about, and planMiss starts nothing with planLook.
	k := cache.Key{Name: unsafe.String(&name[0], len(name)), Type: q.qtype, Class: q.qclass, DO: q.do, CD: q.cd()}
	if s.searchRoleOf(k) != searchNone && h.held.has(k) {
		return dst[:headerAt], false // ServeDNS's miss decision answers it (a held NXDOMAIN)
	}
	if _, plan := h.planMiss(s, zone, k, false, time.Time{}, start, planLook, searchNone); plan != missFallback {
		return dst[:headerAt], false
	}
	h.cache.CountMiss() // ServeDNS's lookup would have counted it
	return h.servfailPacket(dst, headerAt, q, s, sh, zone.Name, start), true
}

// servfailPacket writes towerd's SERVFAIL to q (EDE 22 for EDNS clients)
// into dst, whose header sits at headerAt with the question after it, and
// observes it: the fast reject's answer and a wire waiter's whose
// resolution failed or whose query_timeout ran out.
func (h *Handler) servfailPacket(dst []byte, headerAt int, q *plainQuery, s *settings, sh replyShape, zone string, start time.Time) []byte {
	const rcode = dns.RcodeServerFailure
	dst = sh.closeReply(dst, headerAt, q.id, cache.WireHit{Rcode: rcode}, false)
	q.reply = dst[headerAt:]
	h.observe(s, &q.request, zone, SourceUpstream, rcode, start, false)
	return dst
}
