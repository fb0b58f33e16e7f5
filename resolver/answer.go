package resolver

import (
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/consulcut"
)

// answer writes one reply to one request on the general path (UDP general,
// TCP, wildcard UDP). The framing comes from the reply core (replyShape),
// the same the fast path writes as bytes.
type answer struct {
	w   dns.ResponseWriter
	req *dns.Msg
	sh  replyShape
	s   *settings
	// entryTTL is the TTL the cache entry behind a stale answer was stored
	// with: its stale TTL is never more (staleTTL).
	entryTTL time.Duration
	// trimsUDP: a UDP answer is cut to fit as Consul's DNS cuts its own
	// (trim.go, cutMsgLikeConsul), with udpAnswers the answer limit without EDNS
	// (Config.TrimUDP).
	trimsUDP   bool
	udpAnswers int
	r          *request // for the dnstap hook (tapWritten)
}

// answer is the general path's writer of one reply to r, req unpacked, on
// w: its framing (replyShape) and whether it is cut like Consul's
// (Config.TrimUDP).
func (s *settings) answer(w dns.ResponseWriter, req *dns.Msg, r *request) answer {
	a := answer{w: w, req: req, sh: s.replyShape(r), s: s, r: r}
	if s.TrimUDP != nil && len(req.Question) == 1 {
		a.udpAnswers, a.trimsUDP = s.TrimUDP([]byte(dns.CanonicalName(req.Question[0].Name)))
	}
	return a
}

// rcode writes an empty reply with the given rcode (dnswire's encoder).
func (a answer) rcode(rcode int) {
	bp := replyBufs.Get().(*[]byte)
	defer replyBufs.Put(bp)
	out, ok := a.sh.appendEmptyReply((*bp)[:0], a.req, rcode)
	if !ok {
		return // a question miekg/dns could not pack either
	}
	*bp = out[:0]
	if a.s.Tap != nil {
		a.tapWritten(a.s.Tap, out)
	}
	_, _ = a.w.Write(out) // the client is gone; nothing to do about it
}

// msg writes body (a cached entry or an upstream reply) as the answer to the
// request. A stale answer's TTLs (0 in a stale entry) become the one stale
// TTL: the stale answer TTL, at most what the entry had fresh.
func (a answer) msg(body *dns.Msg, stale bool) {
	var ttl uint32
	if stale {
		ttl = cache.StaleTTL(a.s.staleTTLSeconds(), a.entryTTL)
	}
	a.body(body, stale, func(uint32) uint32 { return ttl })
}

// records writes an answer built from pushed records (the Consul watch's,
// local data), which carry their own TTLs; stale, each is capped as a
// cache entry's is: the one stale TTL.
func (a answer) records(body *dns.Msg, stale bool) {
	most := a.s.staleTTLSeconds()
	a.body(body, stale, func(own uint32) uint32 { return min(own, most) })
}

// body writes body as the answer, spelled for the request (spelled). The
// header and question come from the request, so the client's ID and its
// letter case (DNS 0x20) are kept; body is not modified (it may be shared
// by every client of a flight). A stale answer's every TTL is staleTTL of
// its own.
//
// The one stale TTL (RFC 8767 section 4 suggests 30 s) is never longer
// than the answer's life when fresh: a stale answer is the last known
// truth, not a longer-lived one, and a Consul answer's TTL 0 (the catalog
// may have moved on) stays 0 stale, from the watch and from the cache
// alike (issue 23: 0 from the watch, 30 from the cache before).
func (a answer) body(body *dns.Msg, stale bool, staleTTL func(own uint32) uint32) {
	body = spelled(body, a.req.Question)
	out := new(dns.Msg)
	out.SetReply(a.req)
	out.Rcode = body.Rcode
	out.Answer = body.Answer
	out.Ns = body.Ns
	out.Extra = withoutOPT(body.Extra)
	if stale {
		out.Answer = withTTL(out.Answer, staleTTL)
		out.Ns = withTTL(out.Ns, staleTTL)
		out.Extra = withTTL(out.Extra, staleTTL)
	}
	if a.trimsUDP && a.sh.limit < dns.MaxMsgSize {
		cutMsgLikeConsul(out, consulcut.Class{Limit: a.sh.limit, EDNS: a.sh.opt, AnswerLimit: a.udpAnswers, Room: a.sh.added(out.Rcode, stale)})
	}
	a.write(out, body.AuthenticatedData, stale)
}

// write frames out with the reply core and sends it.
func (a answer) write(out *dns.Msg, ad, stale bool) {
	a.sh.apply(out, ad, stale)
	if a.s.Tap != nil {
		if reply, err := out.Pack(); err == nil {
			a.tapWritten(a.s.Tap, reply)
		}
	}
	_ = a.w.WriteMsg(out) // the client is gone; nothing to do about it
}

// withoutOPT returns a new slice of rrs without OPT pseudo-records, with room
// for ours. It must be new: the answer's OPT is appended to it, and rrs may be
// shared by every client of a coalesced flight.
func withoutOPT(rrs []dns.RR) []dns.RR {
	out := make([]dns.RR, 0, len(rrs)+1)
	for _, rr := range rrs {
		if rr.Header().Rrtype != dns.TypeOPT {
			out = append(out, rr)
		}
	}
	return out
}

// withTTL returns copies of rrs with every TTL set to ttl of its own; the
// originals may be shared with other readers.
func withTTL(rrs []dns.RR, ttl func(own uint32) uint32) []dns.RR {
	if len(rrs) == 0 {
		return rrs
	}
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		out[i] = dns.Copy(rr)
		out[i].Header().Ttl = ttl(rr.Header().Ttl)
	}
	return out
}
