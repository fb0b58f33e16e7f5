package cache

import (
	"encoding/binary"

	"github.com/miekg/dns"
)

// The wire store's readers of an upstream reply (wirestore.go): strict on
// purpose, since whatever they let through must unpack as miekg/dns reads
// it and compare as its strings do. upstream/wirecheck.go reads the same
// way; the two packages know nothing of each other, so each has its own.

// addressLen is the RDATA length of an A or AAAA record.
func addressLen(rtype uint16) int {
	if rtype == dns.TypeA {
		return 4
	}
	return 16
}

// skipPlainOPT returns the offset after the OPT record at off: root owner,
// extended rcode 0 (the rcode is the header's), options only cookie (RFC
// 7873) and padding (RFC 7830), which cannot make unpacking fail.
func skipPlainOPT(raw []byte, off int) (int, bool) {
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

// readPlainName reads the name at off in msg, following backward compression
// pointers only, appends it uncompressed to dst and returns it with the
// offset after the name where it sits. It accepts only labels of letters,
// digits, '-' and '_': names whose presentation form needs no escapes, so
// that comparing their bytes is comparing miekg's strings.
func readPlainName(msg []byte, off int, dst []byte) ([]byte, int, bool) {
	end, lowest := -1, off
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
			return dst, end, len(dst) <= maxWireNameLen
		case l&0xC0 == 0xC0:
			if off+1 >= len(msg) {
				return nil, 0, false
			}
			ptr := int(binary.BigEndian.Uint16(msg[off:]) & 0x3FFF)
			if end < 0 {
				end = off + 2
			}
			if ptr >= lowest { // backwards only, each further back: no loops
				return nil, 0, false
			}
			lowest, off = ptr, ptr
			continue
		case l > 63:
			return nil, 0, false
		}
		if off+1+l > len(msg) || len(dst)+1+l+1 > maxWireNameLen {
			return nil, 0, false
		}
		for _, c := range msg[off+1 : off+1+l] {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return nil, 0, false
			}
		}
		dst = append(dst, msg[off:off+1+l]...)
		off += 1 + l
	}
}

// sameNameFold reports whether wire (uncompressed wire form) spells name
// (presentation form, fully qualified, no escapes), letters compared
// without case.
func sameNameFold(wire []byte, name string) bool {
	j := 0
	for i := 0; i < len(wire); {
		l := int(wire[i])
		if l == 0 {
			return j == len(name) || (name == "." && j == 0)
		}
		if j+l >= len(name) || name[j+l] != '.' {
			return false
		}
		for k := range l {
			if lowerASCII(wire[i+1+k]) != lowerASCII(name[j+k]) {
				return false
			}
		}
		i += 1 + l
		j += l + 1
	}
	return false
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
