package resolver

import "github.com/miekg/dns"

// Chain is a RecordSource made of several, consulted in order: the first
// whose Lookup answers wins (issue 15: local data, then the Consul watch).
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

// Lookup implements RecordSource.
func (c Chain) Lookup(q dns.Question) (m *dns.Msg, stale, ok bool) {
	m, stale, _, ok = c.lookup(q)
	return m, stale, ok
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

func (c Chain) lookup(q dns.Question) (m *dns.Msg, stale bool, label string, ok bool) {
	for _, src := range c {
		if m, stale, ok := src.Lookup(q); ok {
			return m, stale, src.Label, true
		}
	}
	return nil, false, "", false
}

// lookupRecords asks rs (Config.Records) and names where the answer came
// from: a Chain's source label, SourceRecords for a single source.
func lookupRecords(rs RecordSource, q dns.Question) (m *dns.Msg, stale bool, label string, ok bool) {
	switch rs := rs.(type) {
	case nil:
		return nil, false, "", false
	case Chain:
		return rs.lookup(q)
	}
	m, stale, ok = rs.Lookup(q)
	return m, stale, SourceRecords, ok
}
