package resolver

import (
	"github.com/miekg/dns"
)

// answer writes one reply to one request on the general path (UDP general,
// TCP, wildcard UDP). The framing comes from the reply core (replyShape),
// the same the fast path writes as bytes.
type answer struct {
	w   dns.ResponseWriter
	req *dns.Msg
	sh  replyShape
	s   *settings
}

// rcode writes an empty reply with the given rcode.
func (a answer) rcode(rcode int) {
	out := new(dns.Msg)
	out.SetRcode(a.req, rcode)
	a.write(out, false, false)
}

// msg writes body (a cached entry or an upstream reply) as the answer to the
// request; a stale answer's TTLs become the stale answer TTL.
func (a answer) msg(body *dns.Msg, stale bool) { a.body(body, stale, stale) }

// records writes an answer built from pushed records. Unlike cached stale
// answers their TTLs are kept; stale only adds the EDE mark.
func (a answer) records(body *dns.Msg, stale bool) { a.body(body, stale, false) }

// body writes body as the answer. The header and question come from the
// request, so the client's ID and its letter case (DNS 0x20) are kept; body
// is not modified (it may be shared by every client of a flight).
func (a answer) body(body *dns.Msg, stale, staleTTLs bool) {
	out := new(dns.Msg)
	out.SetReply(a.req)
	out.Rcode = body.Rcode
	out.Answer = body.Answer
	out.Ns = body.Ns
	out.Extra = withoutOPT(body.Extra)
	if staleTTLs {
		ttl := a.s.staleTTLSeconds()
		out.Answer = withTTL(out.Answer, ttl)
		out.Ns = withTTL(out.Ns, ttl)
		out.Extra = withTTL(out.Extra, ttl)
	}
	a.write(out, body.AuthenticatedData, stale)
}

// write frames out with the reply core and sends it.
func (a answer) write(out *dns.Msg, ad, stale bool) {
	a.sh.apply(out, ad, stale)
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

// withTTL returns copies of rrs with every TTL set to ttl; the originals may
// be shared with other readers.
func withTTL(rrs []dns.RR, ttl uint32) []dns.RR {
	if len(rrs) == 0 {
		return rrs
	}
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		out[i] = dns.Copy(rr)
		out[i].Header().Ttl = ttl
	}
	return out
}
