// Package dnswire reads the parts of a DNS message that towerd's wire paths
// judge without unpacking it (issue 17): names, A/AAAA lengths, a plain OPT
// record. Strict on purpose: whatever it lets through unpacks as
// miekg/dns reads it and compares as its strings do, so a caller that finds
// a reply clean on the wire finds what the dns.Msg path would. The cache's
// wire store and the upstream's wire check both read with it; it imports
// only miekg/dns. It sits under resolver/, beside the other leaves the
// resolver's neighbours share (dnslisten, consul, local): the top level is
// fixed, and a leaf that imports nothing of towerd keeps cache and upstream
// knowing nothing of each other or of the resolver's code.
package dnswire

import (
	"encoding/binary"

	"github.com/miekg/dns"
)

// AddressLen is the RDATA length of an A or AAAA record.
func AddressLen(rtype uint16) int {
	if rtype == dns.TypeA {
		return 4
	}
	return 16
}

// SkipPlainOPT returns the offset after the OPT record at off, if it is a
// plain one: root owner, extended rcode 0, options only cookie
// (RFC 7873) and padding (RFC 7830).
func SkipPlainOPT(raw []byte, off int) (int, bool) {
	if off+11 > len(raw) || raw[off] != 0 || binary.BigEndian.Uint16(raw[off+1:]) != dns.TypeOPT || raw[off+5] != 0 {
		return 0, false
	}
	rdlen := int(binary.BigEndian.Uint16(raw[off+9:]))
	off += 11
	if off+rdlen > len(raw) {
		return 0, false
	}
	for opts := raw[off : off+rdlen]; len(opts) > 0; {
		if len(opts) < 4 {
			return 0, false
		}
		code, l := binary.BigEndian.Uint16(opts), int(binary.BigEndian.Uint16(opts[2:]))
		if (code != dns.EDNS0COOKIE && code != dns.EDNS0PADDING) || 4+l > len(opts) {
			return 0, false
		}
		opts = opts[4+l:]
	}
	return off + rdlen, true
}

// ReadPlainName reads the name at off in msg, following backward compression
// pointers, appends it uncompressed to dst and returns it with the offset
// after the name where it sits. It accepts only names whose labels are made
// of letters, digits, '-' and '_', at most MaxNameLen bytes long.
func ReadPlainName(msg []byte, off int, dst []byte) ([]byte, int, bool) {
	end := -1 // where the name ends in place, once a pointer was followed
	lowest := off
	for {
		if off >= len(msg) {
			return nil, 0, false
		}
		l := int(msg[off])
		switch {
		case l == 0:
			dst = append(dst, 0)
			if end < 0 {
				end = off + 1
			}
			return dst, end, len(dst) <= MaxNameLen
		case l&0xC0 == 0xC0:
			if off+1 >= len(msg) {
				return nil, 0, false
			}
			ptr := int(binary.BigEndian.Uint16(msg[off:]) & 0x3FFF)
			if end < 0 {
				end = off + 2
			}
			// Only backwards, and each pointer further back than the last:
			// no loops, however the bytes are arranged.
			if ptr >= lowest {
				return nil, 0, false
			}
			lowest, off = ptr, ptr
			continue
		case l > 63:
			return nil, 0, false
		}
		if off+1+l > len(msg) || len(dst)+1+l+1 > MaxNameLen {
			return nil, 0, false
		}
		for _, c := range msg[off+1 : off+1+l] {
			if !plainNameByte(c) {
				return nil, 0, false
			}
		}
		dst = append(dst, msg[off:off+1+l]...)
		off += 1 + l
	}
}

func plainNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}
