package resolver

import (
	"strings"

	"github.com/miekg/dns"
)

// A UDP answer about a name whose records source says so
// (RecordSource.TrimsUDP: the Consul domain) is cut to fit the client as
// Consul's DNS cuts its own (agent/dns.go trimUDPResponse, v1.14), without
// TC: so the watch's answer for a service of many instances is the one the
// agent gives (issue 23: towerd set TC where the agent trimmed to fit
// 1232 bytes), and a forwarded one, already cut by the agent for towerd's
// 1232 bytes, is cut again as the agent would for a smaller client (to
// udp_answer_limit records without EDNS). Over TCP nothing is cut. The
// rule is trimLikeConsul's on a dns.Msg; how many records it keeps is
// consulKeep's, on counts and a size, which the fast path also asks of
// an answer's bytes (fastpath.go, cutAsConsul; consulcut.go, cutWritten
// for SRV answers; issue 34).

// maxConsulAnswers is Consul's maxUDPAnswerLimit: the most records a UDP
// client without EDNS gets, whatever udp_answer_limit says.
const maxConsulAnswers = 8

// trimLikeConsul cuts out for a UDP client whose answers may be limit
// bytes (512 without EDNS: edns false), leaving room bytes for what the
// reply core adds (the OPT record, an EDE option). Without EDNS the answer
// keeps at most min(answerLimit, 8) records, counted uncompressed; then
// records go from the end of the answer, the authority first, until the
// message fits (in a binary search when over by more than 100 bytes), each
// cut leaving in the additional section only the first record of each SRV
// target, as Consul's syncExtra does. At least one answer record stays.
func trimLikeConsul(out *dns.Msg, limit int, edns bool, answerLimit, room int) {
	// Consul measures its answers compressed (as the reply core sends
	// them), except the answer-limited ones (consulKeep).
	out.Compress = true
	if !consulCuts(limit, edns, answerLimit, room, len(out.Answer), out.Len()) {
		return
	}
	all, ns := out.Answer, out.Ns
	hasExtra := len(out.Extra) > 0
	index := map[string]dns.RR{}
	for _, rr := range out.Extra {
		if name := strings.ToLower(rr.Header().Name); index[name] == nil {
			index[name] = rr
		}
	}
	set := func(k int, compress, keepNs bool) {
		out.Answer, out.Ns, out.Compress = all[:k], nil, compress
		if keepNs {
			out.Ns = ns
		}
		if hasExtra {
			syncConsulExtra(out, index)
		}
	}
	keep, keepNs := consulKeep(limit, edns, answerLimit, room, len(all), func(k int, compress, keepNs bool) int {
		set(k, compress, keepNs)
		return out.Len()
	})
	set(keep, true, keepNs)
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

// syncConsulExtra is Consul's syncExtra: the additional section becomes,
// for each SRV record of the answer in order, the first additional record
// of its target (following a CNAME there), each name once.
func syncConsulExtra(out *dns.Msg, index map[string]dns.RR) {
	extra := make([]dns.RR, 0, len(out.Answer))
	seen := map[string]bool{}
	for _, rr := range out.Answer {
		srv, ok := rr.(*dns.SRV)
		if !ok {
			continue
		}
		for target := strings.ToLower(srv.Target); !seen[target]; {
			seen[target] = true
			next, ok := index[target]
			if !ok {
				break
			}
			extra = append(extra, next)
			cname, ok := next.(*dns.CNAME)
			if !ok {
				break
			}
			target = strings.ToLower(cname.Target)
		}
	}
	out.Extra = extra
}
