package cache

import (
	"math"
	"time"
	"unsafe"
)

// Entries are kept as DNS wire bytes (the reply packed once, when stored)
// with the offset of every record's TTL field remembered. A fresh hit then
// costs a copy of the record sections and a few 4-byte TTL writes, instead of
// a deep copy of a dns.Msg and a pack per query: the hit path is what a node
// pays on most of its lookups (issue 6).
//
// The stored message's question is the key's name, which has the same wire
// length as any spelling of it a client sends, so compression pointers into
// the question stay valid when a reply is built behind the client's own
// question.

// WireHit describes a fresh entry whose records AppendFresh wrote.
type WireHit struct {
	// Rcode is the stored reply's rcode (always NOERROR today).
	Rcode int
	// AuthenticatedData is the upstream's AD bit.
	AuthenticatedData bool
	// Answer, Ns and Extra count the records written to each section.
	Answer, Ns, Extra uint16
	// TTL is the entry's lifetime as stored; Remaining the time left.
	TTL, Remaining time.Duration
	// Cut: the records written are the entry's cut answer, asked for
	// with its tag (cut.go), not the whole one.
	Cut bool
}

// AppendFresh is the hit path for a query read from a packet. If the entry
// for (name, qtype, qclass, do, cd) is fresh and its records fit in limit
// bytes of dst, it appends the answer, authority and additional sections to
// dst, every TTL set to the whole seconds left, counts a hit, bumps recency
// and reports true. Otherwise it returns dst unchanged and false, and counts
// nothing: the caller then takes the general path (Get), which counts.
//
// name must be canonical (ASCII lower case, fully qualified), as NewKey
// makes it; it is only read during the call. The records are meant to follow
// a 12-byte header and one question whose name has the wire length of name.
// cut, when not 0, asks for the entry's cut answer stored under that tag
// (WireAnswer.SetCut): written if the entry has one, else the whole answer
// (WireHit.Cut says which).
func (c *Cache) AppendFresh(dst, name []byte, qtype, qclass uint16, do, cd bool, limit int, cut uint16) ([]byte, WireHit, bool) {
	if len(name) == 0 {
		return dst, WireHit{}, false
	}
	// A Key whose Name aliases the caller's bytes, so the lookup allocates
	// nothing. The LRU only reads a key given to Get (a map lookup and a
	// list move); nothing keeps it, so the alias dies with this call.
	k := Key{Name: unsafe.String(&name[0], len(name)), Type: qtype, Class: qclass, DO: do, CD: cd}
	now := c.now().Sub(c.epoch)
	c.mu.Lock()
	it, ok := c.lru.Get(k)
	c.mu.Unlock()
	if !ok {
		return dst, WireHit{}, false
	}
	a := it.ageAt(now)
	if !a.fresh {
		return dst, WireHit{}, false
	}
	dst, hit, ok := it.appendRecords(dst, a.shownTTL, limit, cut)
	if !ok {
		return dst, WireHit{}, false
	}
	c.stats.hits.Add(1)
	hit.Remaining = a.remaining
	return dst, hit, true
}

// Stale is what AppendStale found for a key whose fresh answer
// AppendFresh did not write.
type Stale uint8

const (
	// StaleNone: no entry that may be served (one expired past
	// MaxStaleAge was removed, as Get removes it).
	StaleNone Stale = iota
	// StaleFresh: the entry is fresh; AppendFresh declined it for its size.
	StaleFresh
	// StaleTooBig: a stale entry whose records do not fit.
	StaleTooBig
	// StaleWritten: a stale entry, its records written.
	StaleWritten
)

// StaleHit describes a stale entry AppendStale wrote.
type StaleHit struct {
	WireHit
	// Expired is how long ago the entry expired.
	Expired time.Duration
	// RefreshFailedAt is the last MarkRefreshFailed time for the entry;
	// zero if there was none since it was stored.
	RefreshFailedAt time.Time
}

// AppendStale is AppendFresh for an entry that expired but may still be
// served (RFC 8767: for no longer than MaxStaleAge): it appends the
// entry's records to dst, every TTL set to ttl (the resolver's stale
// answer TTL) or, if less, the TTL the entry was stored with (the one stale
// TTL: a name stored with TTL 0 is served stale with 0), when they fit in limit bytes, bumps recency and reports
// StaleWritten with what the resolver's serve-stale rules need. It counts
// nothing (CountStaleHit does, for a stale answer given): the resolver may
// still leave the query to Get. Otherwise dst comes back unchanged with
// what was found. name and cut are AppendFresh's.
func (c *Cache) AppendStale(dst, name []byte, qtype, qclass uint16, do, cd bool, limit int, ttl uint32, cut uint16) ([]byte, StaleHit, Stale) {
	if len(name) == 0 {
		return dst, StaleHit{}, StaleNone
	}
	k := Key{Name: unsafe.String(&name[0], len(name)), Type: qtype, Class: qclass, DO: do, CD: cd} // as AppendFresh's
	now := c.now().Sub(c.epoch)
	c.mu.Lock()
	it, ok := c.lru.Get(k)
	if !ok {
		c.mu.Unlock()
		return dst, StaleHit{}, StaleNone
	}
	a := it.ageAt(now)
	if !a.servable(c.policy.Load().maxStaleAge) {
		c.lru.Remove(k) // too old even for serve-stale, as Get drops it
		c.mu.Unlock()
		return dst, StaleHit{}, StaleNone
	}
	c.mu.Unlock()
	if a.fresh {
		return dst, StaleHit{}, StaleFresh
	}
	ttl = StaleTTL(ttl, it.ttl)
	dst, hit, ok := it.appendRecords(dst, ttl, limit, cut)
	if !ok {
		return dst, StaleHit{}, StaleTooBig
	}
	st := StaleHit{WireHit: hit, Expired: a.expired}
	if ns := it.refreshFailedAt.Load(); ns != 0 {
		st.RefreshFailedAt = time.Unix(0, ns)
	}
	return dst, st, StaleWritten
}

// StaleTTL is the TTL of every record of a stale answer (issue 23's one
// stale TTL): the resolver's stale answer TTL, never above stored, the TTL
// the entry was stored with (a name stored with TTL 0 is served stale with
// 0). AppendStale writes it on bytes; the resolver's general path on a
// dns.Msg of Get's entry (Entry.TTL).
func StaleTTL(answerTTL uint32, stored time.Duration) uint32 {
	return min(answerTTL, uint32(min(stored/time.Second, math.MaxUint32)))
}

// CountStaleHit counts a stale answer given from AppendStale's bytes, as
// a Get that served the entry stale would have.
func (c *Cache) CountStaleHit() { c.stats.staleHits.Add(1) }
