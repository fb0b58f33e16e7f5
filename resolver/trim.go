package resolver

import (
	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/consulcut"
	"github.com/towerd/towerd/resolver/dnswire"
)

// A UDP answer about a name whose records source says so
// (RecordSource.TrimsUDP: the Consul domain) is cut to fit the client as
// Consul's DNS cuts its own (agent/dns.go trimUDPResponse, v1.14), without
// TC: so the watch's answer for a service of many instances is the one the
// agent gives (issue 23: towerd set TC where the agent trimmed to fit
// 1232 bytes), and a forwarded one, already cut by the agent for towerd's
// 1232 bytes, is cut again as the agent would for a smaller client (to
// udp_answer_limit records without EDNS). Over TCP nothing is cut. The
// rule is package consulcut's, on an answer's bytes, for every path
// (issue 34).

// maxConsulAnswers is Consul's maxUDPAnswerLimit: the most records a UDP
// client without EDNS gets, whatever udp_answer_limit says.
const maxConsulAnswers = 8

// cutMsgLikeConsul cuts out, ServeDNS's answer, for a UDP client of
// class c as Consul's DNS cuts its own: without EDNS the answer keeps at
// most min(answerLimit, 8) records, counted uncompressed; then records go
// from the end of the answer, the authority first, until the message fits
// (in a binary search when over by more than 100 bytes), each cut leaving
// in the additional section only the first record of each SRV target, as
// Consul's syncExtra does. At least one answer record stays. The choice
// is made on out's bytes by the one rule the fast path and the cache's
// cut answers use (consulcut.Cut); out keeps the records it keeps.
func cutMsgLikeConsul(out *dns.Msg, c consulcut.Class) {
	// Consul measures its answers compressed (as the reply core sends
	// them), except the answer-limited ones (consulcut.Class.Keep).
	out.Compress = true
	if !c.Cuts(len(out.Answer), out.Len()) {
		return
	}
	packed, err := out.Pack()
	var v dnswire.Msg
	var cut consulcut.Cut
	if err != nil || v.Parse(packed) != nil || v.OPT >= 0 || !cut.Plan(&v, c) {
		return // out packs (it is about to be sent): not met
	}
	first, _ := v.Range(dnswire.Additional)
	out.Answer = out.Answer[:cut.Answers]
	if !cut.NS {
		out.Ns = nil
	}
	if len(out.Extra) > 0 {
		kept := cut.Extra(&v)
		extra := make([]dns.RR, 0, len(kept))
		for _, j := range kept {
			extra = append(extra, out.Extra[int(j)-first])
		}
		out.Extra = extra
	}
}
