package resolver

import (
	"net"

	"github.com/miekg/dns"
)

// advertisedUDPSize is the EDNS buffer towerd offers to clients and asks of
// upstreams (DNS flag day 2020: 1232 bytes fits any path without IP
// fragmentation).
const advertisedUDPSize = 1232

// answer writes one reply to one request.
type answer struct {
	w   dns.ResponseWriter
	req *dns.Msg
	s   *settings
}

func (a answer) proto() string {
	if _, ok := a.w.RemoteAddr().(*net.TCPAddr); ok {
		return "tcp"
	}
	return "udp"
}

// rcode writes an empty reply with the given rcode.
func (a answer) rcode(rcode int) {
	out := new(dns.Msg)
	out.SetRcode(a.req, rcode)
	out.RecursionAvailable = true
	a.write(out, false, rcode == dns.RcodeServerFailure)
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
	out.RecursionAvailable = true
	// RFC 6840 §5.8: set AD only for clients that asked with DO or AD.
	if opt := a.req.IsEdns0(); (opt != nil && opt.Do()) || a.req.AuthenticatedData {
		out.AuthenticatedData = body.AuthenticatedData
	}
	out.Answer = body.Answer
	out.Ns = body.Ns
	out.Extra = withoutOPT(body.Extra)
	if staleTTLs {
		ttl := a.s.staleTTLSeconds()
		out.Answer = withTTL(out.Answer, ttl)
		out.Ns = withTTL(out.Ns, ttl)
		out.Extra = withTTL(out.Extra, ttl)
	}
	a.write(out, stale, false)
}

// write adds EDNS when the client spoke it, truncates UDP answers to what the
// client can take, and sends.
func (a answer) write(out *dns.Msg, stale, failed bool) {
	// Compressed, like the fast path's replies (cached entries are packed
	// that way): the same answer fits the same client buffer either way.
	out.Compress = true
	size := dns.MinMsgSize // RFC 1035: 512 bytes without EDNS
	if opt := a.req.IsEdns0(); opt != nil {
		out.SetEdns0(advertisedUDPSize, opt.Do())
		if stale {
			// RFC 8914 §4.4: EDE 3 tells the client this answer is stale.
			addEDE(out, dns.ExtendedErrorCodeStaleAnswer)
		} else if failed {
			addEDE(out, dns.ExtendedErrorCodeNoReachableAuthority)
		}
		size = max(size, int(opt.UDPSize()))
	}
	if a.proto() == "udp" {
		// Truncate drops whole RRs and sets TC when the answer does not fit;
		// the client then retries over TCP, where there is no such limit.
		out.Truncate(size)
	} else {
		out.Truncate(dns.MaxMsgSize)
	}
	_ = a.w.WriteMsg(out) // the client is gone; nothing to do about it
}

func addEDE(m *dns.Msg, code uint16) {
	opt := m.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: code})
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
