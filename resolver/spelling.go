package resolver

import (
	"strings"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// An answer is spelled the way a cache hit's bytes spell it (issue 23):
// the entry's records are compressed against its own question (the
// upstream's spelling of towerd's lower-case question: cache/entry.go),
// and a hit writes the client's spelling of the question over it, so every
// name the compressor pointed into the question comes out in the client's
// letter case, and every other name as the upstream wrote it. The general
// path's answers (a hit unpacked, a first answer, a stale one, the Consul
// watch's records built for the lower-case question) are spelled here by
// the same means: packed with miekg/dns's compression (which the entry
// builder's is), the client's spelling written over the question, unpacked.
// So an answer reads the same on every path, fast or not, forwarded or
// watched; the question's own name always in the client's spelling.

// spelled returns body as a client asking question sees it; body itself
// when its question is already spelled so, or it has none (local data,
// built for the question as asked). body is not modified.
func spelled(body *dns.Msg, question []dns.Question) *dns.Msg {
	if len(question) != 1 || len(body.Question) != 1 {
		return body
	}
	asked, stored := question[0].Name, body.Question[0].Name
	if asked == stored || !strings.EqualFold(asked, stored) {
		return body
	}
	cp := *body
	cp.Compress = true
	wire, err := cp.Pack()
	if err != nil {
		return body
	}
	name, ok := dnswire.AppendWireName(nil, asked)
	if !ok || !dnswire.Respell(wire, name) {
		return body
	}
	out := new(dns.Msg)
	if out.Unpack(wire) != nil {
		return body
	}
	return out
}
