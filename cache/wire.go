package cache

import (
	"encoding/binary"
	"errors"
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

const headerLen = 12

var errMalformed = errors.New("malformed stored message")

// recordLayout walks a packed message and returns where its answer section
// starts and the offset of each record's TTL field. It accepts only what
// dns.Msg.Pack writes: uncompressed or pointer-compressed names, no extended
// label types.
func recordLayout(wire []byte) (answerAt int, ttlOffsets []uint16, err error) {
	if len(wire) < headerLen {
		return 0, nil, errMalformed
	}
	qd := int(binary.BigEndian.Uint16(wire[4:]))
	rrs := int(binary.BigEndian.Uint16(wire[6:])) + int(binary.BigEndian.Uint16(wire[8:])) +
		int(binary.BigEndian.Uint16(wire[10:]))
	off := headerLen
	for range qd {
		if off, err = skipName(wire, off); err != nil {
			return 0, nil, err
		}
		off += 4 // type, class
	}
	if off > len(wire) {
		return 0, nil, errMalformed
	}
	answerAt = off
	ttlOffsets = make([]uint16, 0, rrs)
	for range rrs {
		if off, err = skipName(wire, off); err != nil {
			return 0, nil, err
		}
		if off+10 > len(wire) {
			return 0, nil, errMalformed
		}
		ttlOffsets = append(ttlOffsets, uint16(off+4))
		off += 10 + int(binary.BigEndian.Uint16(wire[off+8:]))
	}
	if off != len(wire) {
		return 0, nil, errMalformed
	}
	return answerAt, ttlOffsets, nil
}

// withTTLOffsets returns a copy of wire with the TTL offsets appended, two
// bytes each, big-endian: the data of a prepared reply. The copy is sized
// exactly, which also drops the spare capacity Pack leaves (it allocates for
// the message uncompressed).
func withTTLOffsets(wire []byte, ttlOffsets []uint16) []byte {
	data := make([]byte, len(wire), len(wire)+2*len(ttlOffsets))
	copy(data, wire)
	for _, off := range ttlOffsets {
		data = binary.BigEndian.AppendUint16(data, off)
	}
	return data
}

// skipName returns the offset just past the name starting at off.
func skipName(wire []byte, off int) (int, error) {
	for {
		if off >= len(wire) {
			return 0, errMalformed
		}
		b := int(wire[off])
		switch {
		case b == 0:
			return off + 1, nil
		case b&0xC0 == 0xC0: // compression pointer: the name ends here
			return off + 2, nil
		case b&0xC0 != 0:
			return 0, errMalformed // extended label types (RFC 6891 §5)
		}
		off += 1 + b
	}
}

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
