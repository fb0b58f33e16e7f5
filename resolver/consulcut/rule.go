// Package consulcut is Consul's cut of a UDP answer (agent/dns.go
// trimUDPResponse, v1.14), the one copy of the rule (issue 34): how many
// answer records a client of a class keeps (Class.Keep), whether the cut
// applies at all (Class.Cuts), and which additional records stay (Cut, on
// an answer's dnswire view, Consul's syncExtra). The resolver cuts every
// UDP answer under the Consul domain by it (ServeDNS's, the fast path's,
// a cache entry's cut answer), and the Consul watch decides with it, when
// a service's answers are encoded, what a client without EDNS keeps.
package consulcut

import "github.com/miekg/dns"

// MaxAnswers is Consul's maxUDPAnswerLimit: the most records a UDP client
// without EDNS gets, whatever udp_answer_limit says.
const MaxAnswers = 8

// Class is what the cut of an answer depends on besides the answer: the
// client's UDP size in bytes, whether it spoke EDNS, the agent's
// udp_answer_limit, and the room the reply core adds (OPT, EDE).
type Class struct {
	Limit       int
	EDNS        bool
	AnswerLimit int
	Room        int
}

// Narrow is the class of a UDP client without EDNS: 512 bytes, the
// answer limit, nothing added (no OPT, so no EDE, fresh or stale). Its
// cut depends on the answer alone, so it is decided once per answer: a
// cache entry's cut answer, a watched answer's count.
func Narrow(answerLimit int) Class {
	return Class{Limit: dns.MinMsgSize, AnswerLimit: answerLimit}
}

// NarrowTag names the cut Narrow(answerLimit) makes, which depends on
// min(answerLimit, MaxAnswers) alone; never 0. A cut decided once is
// stored under it and used only by a question asked under the same.
func NarrowTag(answerLimit int) uint16 {
	return uint16(min(max(answerLimit, 0), MaxAnswers)) + 1
}

// limited: the answer limit applies (no EDNS, or EDNS at 512 bytes).
func (c Class) limited() bool { return !c.EDNS || c.Limit == dns.MinMsgSize }

// Cuts reports whether the cut changes an answer of answers records, size
// bytes long compressed without the reply core's additions: the one rule
// of when it applies, asked of a message before anything is planned.
func (c Class) Cuts(answers, size int) bool {
	if c.limited() && answers > min(MaxAnswers, c.AnswerLimit) {
		return true
	}
	// 8: the UDP header, as Consul counts it.
	return answers > 1 && size > c.Limit-c.Room-8
}

// Keep is how many of an answer's answers records the cut keeps, and
// whether the authority section stays. size(k, compress, ns) is the
// message's length with the first k answer records (and the additional
// records they keep), compressed or not, with or without its authority
// section. Without EDNS the answer keeps at most min(AnswerLimit, 8)
// records, measured uncompressed; then records go from the end of the
// answer, the authority first, until the message fits (in a binary search
// when over by more than 100 bytes). At least one record stays.
func (c Class) Keep(answers int, size func(k int, compress, ns bool) int) (int, bool) {
	k, compress, ns := answers, true, true
	if c.limited() {
		if n := min(MaxAnswers, c.AnswerLimit); k > n {
			k, compress = n, false
		}
	}
	maxSize := c.Limit - c.Room
	// 8: the UDP header, as Consul counts it.
	for k > 1 && size(k, compress, ns) > maxSize-8 {
		ns = false
		if size(k, compress, ns)-maxSize > 100 {
			k = binaryCut(k, maxSize, func(m int) int { return size(m, compress, false) })
		} else {
			k--
		}
	}
	return k, ns
}

// KeepFixed is Keep for an answer of answers records of one size alone
// (A or AAAA records, each owned by a pointer to the question): record
// bytes each compressed, the question section qlen bytes (its name and 4).
func (c Class) KeepFixed(answers, qlen, record int) int {
	base := 12 + qlen              // the header and the question
	whole := qlen - 4 + record - 2 // a record with its owner written out
	k, _ := c.Keep(answers, func(k int, compress, _ bool) int {
		if compress {
			return base + k*record
		}
		return base + k*whole
	})
	return k
}

// binaryCut is Consul's dnsBinaryTruncate: the most of answers records
// (found by halving) with which the message fits maxSize (size of a
// count), or a count within 10 bytes of it.
func binaryCut(answers, maxSize int, size func(k int) int) int {
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
