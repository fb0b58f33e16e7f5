package resolver

import (
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/dnswire"
)

// This file is the one admission step and the one reply core of every
// answer route (see the package doc): both parsers fill a request, admit
// decides what a request gets without going further, replyShape frames the
// reply, and observe counts it. The routes differ only in how they read
// the packet and how they write the reply (bytes or dns.Msg).

// advertisedUDPSize is the EDNS buffer towerd offers to clients and asks of
// upstreams (DNS flag day 2020: 1232 bytes fits any path without IP
// fragmentation).
const advertisedUDPSize = 1232

// DefaultMaxUDPSize is the largest UDP answer towerd sends when
// Config.MaxUDPSize is 0: the DNS Flag Day 2020 value. A client advertising
// more gets at most this many bytes and TC past it, so a spoofed query
// cannot be turned into a large reflected datagram (issue 13).
const DefaultMaxUDPSize = 1232

// request is what admission and the reply core know of a query. The fast
// path's parser (plainQuery.parse) and ServeDNS (fromMsg) fill it.
type request struct {
	id      uint16
	flags   uint16 // header flags as sent
	qdcount int    // questions in the packet
	qtype   uint16
	qclass  uint16
	opts    int   // OPT records in the additional section
	edns    bool  // the client spoke EDNS (one OPT record or more)
	version uint8 // EDNS version of the OPT record
	do      bool  // RFC 3225 DNSSEC OK
	udpSize uint16
	tcp     bool
	client  netip.Addr

	// For the query log and Trace only (issue 15), never for decisions.
	qname    string // the question's name; on the fast path it aliases plainQuery.name
	upstream string // host:port of the server whose reply is relayed, when known
	trace    *Query // Trace's: observe copies the observation here
	// What decided (Query.Rule, Query.Passed, Query.Entry).
	rule, passed string
	entry        cache.Origin

	// For the dnstap hook only (dnstap.go): the client's port, the query's
	// bytes and the reply's on the fast path (aliasing the reader's
	// buffers), and what observe saw, for the general path's writer.
	port               uint16
	pkt, reply         []byte
	tapSource, tapZone string
	tapStart           time.Time
}

// fromMsg fills r from an unpacked query and the connection it came on.
func (r *request) fromMsg(m *dns.Msg, w dns.ResponseWriter) {
	*r = request{id: m.Id, flags: msgFlags(m), qdcount: len(m.Question)}
	if len(m.Question) == 1 {
		r.qtype, r.qclass, r.qname = m.Question[0].Qtype, m.Question[0].Qclass, m.Question[0].Name
	}
	for _, rr := range m.Extra {
		if rr.Header().Rrtype == dns.TypeOPT {
			r.opts++
		}
	}
	if opt := m.IsEdns0(); opt != nil {
		r.edns, r.version, r.do, r.udpSize = true, opt.Version(), opt.Do(), opt.UDPSize()
	}
	switch a := w.RemoteAddr().(type) {
	case *net.UDPAddr:
		r.client, _ = netip.AddrFromSlice(a.IP)
		r.port = uint16(a.Port)
	case *net.TCPAddr:
		r.client, _ = netip.AddrFromSlice(a.IP)
		r.port = uint16(a.Port)
		r.tcp = true
	}
}

// msgFlags is the header flags word of m, as it was on the wire (without
// the rcode, which a query does not carry).
func msgFlags(m *dns.Msg) uint16 {
	f := uint16(m.Opcode&0xF) << 11
	set := func(b bool, flag uint16) {
		if b {
			f |= flag
		}
	}
	set(m.Response, dnswire.FlagQR)
	set(m.Authoritative, dnswire.FlagAA)
	set(m.Truncated, dnswire.FlagTC)
	set(m.RecursionDesired, dnswire.FlagRD)
	set(m.RecursionAvailable, dnswire.FlagRA)
	set(m.Zero, dnswire.FlagZ)
	set(m.AuthenticatedData, dnswire.FlagAD)
	set(m.CheckingDisabled, dnswire.FlagCD)
	return f
}

// cd is the request's Checking Disabled bit, part of the cache key.
func (r *request) cd() bool { return r.flags&dnswire.FlagCD != 0 }

func (r *request) proto() string {
	if r.tcp {
		return "tcp"
	}
	return "udp"
}

// acceptHeader is the part of admission that reads the header alone, run on
// every packet before the rest is parsed (AcceptRequest for dns.Server,
// servePacket and the fast parser): responses are dropped (they are never
// queries, and answering them could be used for reflection), opcodes other
// than QUERY get NOTIMP, anything but exactly one question gets FORMERR.
func acceptHeader(flags uint16, qdcount int) dns.MsgAcceptAction {
	if flags&dnswire.FlagQR != 0 {
		return dns.MsgIgnore
	}
	if dnswire.Opcode(flags) != dns.OpcodeQuery {
		return dns.MsgRejectNotImplemented
	}
	if qdcount != 1 {
		return dns.MsgReject
	}
	return dns.MsgAccept
}

// admit is the admission step of every answer route: it returns the rcode a
// request is answered with by towerd itself and false, or true when the
// request goes on to records, cache and upstream. Its order is the order
// clients see: header rules, then the allow-list (a client outside it
// learns nothing but REFUSED), then EDNS, then the question.
func admit(s *settings, r *request) (rcode int, ok bool) {
	// QR is the listener's to judge (it drops responses before parsing); a
	// message handed to ServeDNS directly is judged as the query it carries.
	switch acceptHeader(r.flags&^dnswire.FlagQR, r.qdcount) {
	case dns.MsgRejectNotImplemented:
		return dns.RcodeNotImplemented, false
	case dns.MsgReject:
		return dns.RcodeFormatError, false
	}
	if !allowedAddr(s.Allow, r.client) {
		return dns.RcodeRefused, false
	}
	if r.opts > 1 {
		return dns.RcodeFormatError, false // RFC 6891 §6.1.1: at most one OPT
	}
	if r.edns && r.version != 0 {
		return dns.RcodeBadVers, false // RFC 6891 §6.1.3
	}
	if r.qclass != dns.ClassINET {
		return dns.RcodeRefused, false
	}
	switch r.qtype {
	case dns.TypeAXFR, dns.TypeIXFR:
		// towerd holds no zones to transfer; refusing also keeps an open
		// TCP stream from being turned into an amplifier.
		return dns.RcodeRefused, false
	}
	return dns.RcodeSuccess, true
}

// replyShape is how every answer to a request is framed, whichever route
// writes it: header flags, towerd's OPT record with the client's DO bit and
// an Extended DNS Error, and the most bytes the reply may take.
type replyShape struct {
	flags uint16 // QR, RA, the request's opcode, RD and CD; rcode and AD come with the answer
	adOK  bool   // RFC 6840 §5.8: AD only for clients that asked with DO or AD
	opt   bool   // the client spoke EDNS: the reply carries towerd's OPT
	do    bool
	limit int // bytes; past it records are dropped and TC set
	// failEDE is the Extended DNS Error of a SERVFAIL that has its own
	// (a bogus answer's, validate.go); 0: towerd's 22.
	failEDE uint16
}

// replyShape frames replies to r. UDP replies stop at the client's
// advertised size (512 bytes without EDNS, RFC 1035), and never above
// MaxUDPSize whatever the client advertises (issue 13, DNS Flag Day 2020);
// TCP carries up to a message's maximum.
func (s *settings) replyShape(r *request) replyShape {
	sh := replyShape{
		flags: uint16(dnswire.FlagQR|dnswire.FlagRA) | r.flags&(opcodeBits|dnswire.FlagRD|dnswire.FlagCD),
		adOK:  r.do || r.flags&dnswire.FlagAD != 0,
		opt:   r.edns,
		do:    r.do,
		limit: dns.MinMsgSize,
	}
	switch {
	case r.tcp:
		sh.limit = dns.MaxMsgSize
	case r.edns:
		sh.limit = max(dns.MinMsgSize, min(int(r.udpSize), s.MaxUDPSize))
	}
	return sh
}

// opcodeBits are the opcode's in a header's flags word: a reply has its
// request's (RFC 1035 section 4.1.1), as miekg/dns's SetReply copies it.
const opcodeBits = 0xF << 11

// reply is how the one encoder (dnswire.Reply) closes an answer to the
// request's one question with rcode, the source's AD bit ad: the reply
// core's flags, OPT and Extended DNS Error.
func (sh replyShape) reply(id uint16, rcode int, ad, stale bool) dnswire.Reply {
	return dnswire.Reply{ID: id, Flags: sh.header(rcode, ad), Rcode: rcode, Questions: 1,
		EDNS: sh.opt, UDPSize: advertisedUDPSize, DO: sh.do, EDE: sh.ede(rcode, stale)}
}

// closeReply ends the reply to q whose header room is at dst[headerAt:],
// followed by the question and hit's records: the fast path's answers and
// the wire miss's, fresh or stale (stale: hit's TTLs are stale ones).
func (sh replyShape) closeReply(dst []byte, headerAt int, id uint16, hit cache.WireHit, stale bool) []byte {
	r := sh.reply(id, hit.Rcode, hit.AuthenticatedData, stale)
	r.Answer, r.Authority, r.Additional = hit.Answer, hit.Ns, hit.Extra
	return r.Close(dst, headerAt)
}

// appendEmptyReply appends the reply with rcode and no records to req,
// framed by sh, to dst: towerd's own error answers on the general path
// (REFUSED, FORMERR, BADVERS, SERVFAIL; the panic's). Like miekg/dns's
// SetReply, it carries req's first question, if any; ok is false when
// that question's name cannot be written (then no reply could be).
func (sh replyShape) appendEmptyReply(dst []byte, req *dns.Msg, rcode int) ([]byte, bool) {
	r := sh.reply(req.Id, rcode, false, false)
	var question []byte
	if len(req.Question) > 0 {
		q := req.Question[0]
		var name [dnswire.MaxNameLen]byte
		n, ok := dnswire.AppendWireName(name[:0], q.Name)
		if !ok {
			return dst, false
		}
		question = dnswire.AppendQuestion(make([]byte, 0, len(n)+4), n, q.Qtype, q.Qclass)
	} else {
		r.Questions = 0
	}
	return dnswire.AppendEmptyReply(dst, question, r), true
}

// added is how many bytes the reply core adds to an answer with rcode:
// its OPT record, with an EDE option when it carries one.
func (sh replyShape) added(rcode int, stale bool) int {
	if !sh.opt {
		return 0
	}
	if sh.ede(rcode, stale) != 0 {
		return dnswire.OPTLen + dnswire.EDELen
	}
	return dnswire.OPTLen
}

// header is the reply's flags word for an answer with rcode (its low four
// bits; the rest travels in the OPT record) whose source set AD as ad.
func (sh replyShape) header(rcode int, ad bool) uint16 {
	f := sh.flags | uint16(rcode&0xF)
	if ad && sh.adOK {
		f |= dnswire.FlagAD
	}
	return f
}

// ede is the Extended DNS Error the reply carries, 0 for none: 3 (Stale
// Answer, RFC 8914 §4.4) on stale answers, 22 (No Reachable Authority) on
// towerd's SERVFAIL. Only EDNS clients get one.
func (sh replyShape) ede(rcode int, stale bool) uint16 {
	switch {
	case !sh.opt:
		return 0
	case stale:
		return dns.ExtendedErrorCodeStaleAnswer
	case rcode == dns.RcodeServerFailure && sh.failEDE != 0:
		return sh.failEDE
	case rcode == dns.RcodeServerFailure:
		return dns.ExtendedErrorCodeNoReachableAuthority
	}
	return 0
}

// apply frames out, the general path's reply (built with SetReply, carrying
// the answer's rcode and sections), as sh says: flags, AD, OPT with EDE,
// and truncation to the size limit.
func (sh replyShape) apply(out *dns.Msg, ad, stale bool) {
	f := sh.header(out.Rcode, ad)
	out.Response = true
	out.RecursionAvailable = true
	out.RecursionDesired = f&dnswire.FlagRD != 0
	out.CheckingDisabled = f&dnswire.FlagCD != 0
	out.AuthenticatedData = f&dnswire.FlagAD != 0
	if sh.opt {
		out.SetEdns0(advertisedUDPSize, sh.do)
		if code := sh.ede(out.Rcode, stale); code != 0 {
			opt := out.IsEdns0()
			opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: code})
		}
	}
	// Truncate drops whole RRs and sets TC when the answer does not fit;
	// the client then retries over TCP, where there is no such limit.
	out.Truncate(sh.limit)
	// Compressed on every route, like the fast path's replies (cached
	// entries are packed that way), so an answer has one size whichever
	// way it goes (issue 11). After Truncate, which turns compression off
	// whenever the uncompressed reply fits (over TCP, always); compressed,
	// it fits all the more.
	out.Compress = true
}

// panicReply is the SERVFAIL for req, come on w, whose handler panicked:
// written by the one encoder as every SERVFAIL of towerd's (issue 34: it
// had no OPT and no EDE), with the default UDP size, as the handler's
// settings are not at hand (an empty reply fits any); nil when req's
// question cannot be written.
func panicReply(req *dns.Msg, w dns.ResponseWriter) []byte {
	var r request
	r.fromMsg(req, w)
	s := settings{Config: Config{MaxUDPSize: DefaultMaxUDPSize}}
	out, ok := s.replyShape(&r).appendEmptyReply(nil, req, dns.RcodeServerFailure)
	if !ok {
		return nil
	}
	return out
}

// observe is the one Observer call of every route, made just before the
// answer is written, so a client that has its answer is already counted:
// /metrics never lags behind it. It also writes the query log's line when
// the log is on (one atomic load when it is off), hands Trace its copy and
// the dnstap hook its exchange (a nil check when dnstap is off).
func (h *Handler) observe(s *settings, r *request, zone, source string, rcode int, start time.Time, prefetch bool) {
	if s.Tap != nil {
		tapObserved(s.Tap, r, zone, source, start, s.Now())
	}
	logging := h.logQueries.Load()
	if h.obs == nil && !logging && r.trace == nil {
		return
	}
	q := Query{Proto: r.proto(), Qtype: r.qtype, Zone: zone, Source: source, Server: r.upstream,
		Rcode: rcode, Duration: s.Now().Sub(start), Prefetch: prefetch, Rule: r.rule, Passed: r.passed, Entry: r.entry}
	if h.obs != nil {
		h.obs.ObserveQuery(q)
	}
	if logging && h.queryLines.take(s.Now(), s.QueryLogRate) {
		h.logQuery(r, q)
	}
	if r.trace != nil {
		*r.trace = q
	}
}

// allowedAddr reports whether the client address is inside the allow-list.
func allowedAddr(allow []netip.Prefix, ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
