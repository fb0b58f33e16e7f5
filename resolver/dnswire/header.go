package dnswire

import "encoding/binary"

// The header (RFC 1035 section 4.1.1), read and written here only: the
// fast path's replies, the upstream query, the rejection of a query whose
// header fails, a reply's TC bit and ID, the cache's entries (issue 34:
// each had its own byte arithmetic).

// Header is a message's header: its ID, its flags word (rcode's four bits
// included) and its section counts.
type Header struct {
	ID, Flags                 uint16
	QDCount, ANCount, NSCount uint16
	ARCount                   uint16
}

// ReadHeader reads the header at the start of msg; false when msg is
// shorter than one.
func ReadHeader(msg []byte) (Header, bool) {
	if len(msg) < HeaderLen {
		return Header{}, false
	}
	return Header{
		ID:      binary.BigEndian.Uint16(msg),
		Flags:   binary.BigEndian.Uint16(msg[2:]),
		QDCount: binary.BigEndian.Uint16(msg[4:]),
		ANCount: binary.BigEndian.Uint16(msg[6:]),
		NSCount: binary.BigEndian.Uint16(msg[8:]),
		ARCount: binary.BigEndian.Uint16(msg[10:]),
	}, true
}

// Put writes h into dst[:HeaderLen].
func (h Header) Put(dst []byte) {
	_ = dst[HeaderLen-1]
	binary.BigEndian.PutUint16(dst, h.ID)
	binary.BigEndian.PutUint16(dst[2:], h.Flags)
	binary.BigEndian.PutUint16(dst[4:], h.QDCount)
	binary.BigEndian.PutUint16(dst[6:], h.ANCount)
	binary.BigEndian.PutUint16(dst[8:], h.NSCount)
	binary.BigEndian.PutUint16(dst[10:], h.ARCount)
}

// Append appends h to dst.
func (h Header) Append(dst []byte) []byte {
	dst = append(dst, make([]byte, HeaderLen)...)
	h.Put(dst[len(dst)-HeaderLen:])
	return dst
}

// Rcode is the header's four rcode bits (without an OPT's extension).
func (h Header) Rcode() int { return int(h.Flags & 0xF) }

// SetID writes id as msg's ID (msg holds a header).
func SetID(msg []byte, id uint16) { binary.BigEndian.PutUint16(msg, id) }

// Truncated reports whether msg's header has TC set; false for a message
// too short to have a header.
func Truncated(msg []byte) bool {
	h, ok := ReadHeader(msg)
	return ok && h.Flags&FlagTC != 0
}

// SetTTL writes ttl into the TTL field at at in msg (RR.TTLAt, or where
// Builder.Record reported it): the cache's hits and stale answers show
// their counted-down TTLs so.
func SetTTL(msg []byte, at int, ttl uint32) { binary.BigEndian.PutUint32(msg[at:], ttl) }

// CapTTL lowers the TTL field at at in msg to ttl when it is higher (a
// watched answer's records under the agent's TTL or a stale answer's).
func CapTTL(msg []byte, at int, ttl uint32) {
	if binary.BigEndian.Uint32(msg[at:]) > ttl {
		SetTTL(msg, at, ttl)
	}
}

// SetSOASerial writes serial into the SOA record whose TTL field is at at
// in msg: the serial is the first of the five 32-bit fields that end its
// RDATA (RFC 1035 3.3.13), found from the RDLENGTH after the TTL.
func SetSOASerial(msg []byte, at int, serial uint32) {
	end := at + 6 + int(binary.BigEndian.Uint16(msg[at+4:]))
	binary.BigEndian.PutUint32(msg[end-20:], serial)
}
