package cache

import (
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
func (c *Cache) AppendFresh(dst, name []byte, qtype, qclass uint16, do, cd bool, limit int) ([]byte, WireHit, bool) {
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
	dst, hit, ok := it.appendRecords(dst, a.shownTTL, limit)
	if !ok {
		return dst, WireHit{}, false
	}
	c.stats.hits.Add(1)
	hit.Remaining = a.remaining
	return dst, hit, true
}
