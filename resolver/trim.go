package resolver

import (
	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// A UDP answer about a name whose records source says so
// (RecordSource.TrimsUDP: the Consul domain) is cut to fit the client as
// Consul's DNS cuts its own (agent/dns.go trimUDPResponse, v1.14), without
// TC: so the watch's answer for a service of many instances is the one the
// agent gives (issue 23: towerd set TC where the agent trimmed to fit
// 1232 bytes), and a forwarded one, already cut by the agent for towerd's
// 1232 bytes, is cut again as the agent would for a smaller client (to
// udp_answer_limit records without EDNS). Over TCP nothing is cut. When
// it cuts is consulCuts's rule, how many records it keeps consulKeep's,
// and which the additional section keeps consulCut's (consulcut.go), on
// an answer's bytes, for every path (issue 34).

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
// cut answers use (consulCut.plan); out keeps the records it keeps.
func cutMsgLikeConsul(out *dns.Msg, c cutClass) {
	// Consul measures its answers compressed (as the reply core sends
	// them), except the answer-limited ones (consulKeep).
	out.Compress = true
	if !c.cuts(len(out.Answer), out.Len()) {
		return
	}
	packed, err := out.Pack()
	var v dnswire.Msg
	var cut consulCut
	if err != nil || v.Parse(packed) != nil || v.OPT >= 0 || !cut.plan(&v, c) {
		return // out packs (it is about to be sent): not met
	}
	first, _ := v.Range(dnswire.Additional)
	out.Answer = out.Answer[:cut.answers]
	if !cut.ns {
		out.Ns = nil
	}
	if len(out.Extra) > 0 {
		kept, from := cut.tables()
		extra := make([]dns.RR, 0, from[cut.answers])
		for _, j := range kept[:from[cut.answers]] {
			extra = append(extra, out.Extra[int(j)-first])
		}
		out.Extra = extra
	}
}

// consulKeep is how many of an answer's answers records the cut keeps
// (trimLikeConsul's rule, on counts: the fast path asks it of the bytes
// it wrote, issue 34), and whether the authority section stays. size(k,
// compress, ns) is the message's length with the first k answer records
// (and the additional records they keep), compressed or not, with or
// without its authority section. Without EDNS the answer keeps at most
// min(answerLimit, 8) records, measured uncompressed; then records go from
// the end of the answer, the authority first, until the message fits (in
// a binary search when over by more than 100 bytes).
func consulKeep(limit int, edns bool, answerLimit, room, answers int, size func(k int, compress, ns bool) int) (int, bool) {
	k, compress, ns := answers, true, true
	if !edns || limit == dns.MinMsgSize {
		if n := min(maxConsulAnswers, answerLimit); k > n {
			k, compress = n, false
		}
	}
	maxSize := limit - room
	// 8: the UDP header, as Consul counts it.
	for k > 1 && size(k, compress, ns) > maxSize-8 {
		ns = false
		if size(k, compress, ns)-maxSize > 100 {
			k = consulBinaryCut(k, maxSize, func(m int) int { return size(m, compress, false) })
		} else {
			k--
		}
	}
	return k, ns
}

// consulCuts reports whether trimLikeConsul cuts an answer of answers
// records, size bytes long compressed without the reply core's additions
// (room), for a UDP client whose answers may be limit bytes: the one rule
// of when the cut applies. trimLikeConsul asks it of its message; the fast
// path asks it of the bytes it wrote for a cached or stale answer under
// the Consul domain, and answers there when nothing is cut (issue 34),
// leaving the cut to the general path: the count and the length are the
// hit's, from the bytes the cache just wrote.
func consulCuts(limit int, edns bool, answerLimit, room, answers, size int) bool {
	if (!edns || limit == dns.MinMsgSize) && answers > min(maxConsulAnswers, answerLimit) {
		return true
	}
	// 8: the UDP header, as Consul counts it.
	return answers > 1 && size > limit-room-8
}

// consulBinaryCut is Consul's dnsBinaryTruncate: the most of answers
// records (found by halving) with which the message fits maxSize (size of
// a count), or a count within 10 bytes of it.
func consulBinaryCut(answers, maxSize int, size func(k int) int) int {
	lo, hi := 0, answers+1
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if n := size(mid); n <= maxSize {
			if maxSize-n < 10 {
				return mid
			}
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
