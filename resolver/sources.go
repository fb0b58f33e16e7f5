package resolver

import "github.com/miekg/dns"

// Chain is a RecordSource made of several, consulted in order: the first
// whose Answer answers wins (issue 15: local data, then the Consul watch).
// It covers the union of its sources' names, so the fast path never answers
// from the cache a name any of them might answer.
type Chain []ChainSource

// ChainSource is one source of a Chain and the label its answers are
// counted and logged under: SourceLocal, SourceRecords.
type ChainSource struct {
	RecordSource
	Label string
}

var _ RecordSource = Chain(nil)

// Answer implements RecordSource. Without an answer, why is the first
// reason a source gave for passing the question on.
func (c Chain) Answer(q dns.Question) (m *dns.Msg, stale bool, why string, ok bool) {
	m, stale, _, why, ok = c.answer(q)
	return m, stale, why, ok
}

// Covers implements RecordSource, without allocating.
func (c Chain) Covers(name []byte) bool {
	for i := range c {
		if c[i].Covers(name) {
			return true
		}
	}
	return false
}

func (c Chain) answer(q dns.Question) (m *dns.Msg, stale bool, label, why string, ok bool) {
	passed := ""
	for _, src := range c {
		m, stale, why, ok := src.Answer(q)
		if ok {
			return m, stale, src.Label, why, true
		}
		if passed == "" {
			passed = why
		}
	}
	return nil, false, "", passed, false
}

// lookupRecords asks rs (Config.Records) and names where the answer came
// from (a Chain's source label, SourceRecords for a single source) and why
// (RecordSource's why: the rule that answered, or why the question was
// passed on).
func lookupRecords(rs RecordSource, q dns.Question) (m *dns.Msg, stale bool, label, why string, ok bool) {
	switch rs := rs.(type) {
	case nil:
		return nil, false, "", "", false
	case Chain:
		return rs.answer(q)
	}
	m, stale, why, ok = rs.Answer(q)
	return m, stale, SourceRecords, why, ok
}

// appendRecords asks rs (Config.Records) for an answer as bytes
// (RecordAppender): in a Chain, of the first source that covers name,
// whose Answer would be asked first of those that might answer. label is
// lookupRecords's; cut and cutDone are RecordAppender's.
func appendRecords(rs RecordSource, dst, name []byte, qtype uint16, limit int, staleTTL uint32, cut uint16) (
	out []byte, counts [3]uint16, stale, cutDone bool, label, why string, ok bool) {
	switch rs := rs.(type) {
	case Chain:
		for _, src := range rs {
			if src.Covers(name) {
				if ra, can := src.RecordSource.(RecordAppender); can {
					out, counts, stale, cutDone, why, ok = ra.AppendAnswer(dst, name, qtype, limit, staleTTL, cut)
					return out, counts, stale, cutDone, src.Label, why, ok
				}
				break
			}
		}
	case RecordAppender:
		out, counts, stale, cutDone, why, ok = rs.AppendAnswer(dst, name, qtype, limit, staleTTL, cut)
		return out, counts, stale, cutDone, SourceRecords, why, ok
	}
	return dst, counts, false, false, "", "", false
}
