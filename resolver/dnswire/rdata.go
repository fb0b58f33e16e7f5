package dnswire

import "github.com/miekg/dns"

// Where the names are inside a record's rdata, for every type whose rdata
// miekg/dns reads names from (and so decompresses: a server may compress
// them, RFC 2782 or not). The view checks them as it parses, the scrubber
// follows them (CNAME, DNAME, NS, MX and SRV targets), and the encoder
// writes them again: uncompressed where they came compressed, compressed
// where RFC 1035 section 4.1.4 lets them be (the types of RFC 1035, as
// miekg/dns compresses them; RFC 3597 section 4 forbids the rest).
//
// A layout is a string of steps over the rdata: a byte 1 to 63 is a field
// of that many bytes, 'N' a name, 'C' a character string (a length byte and that
// many bytes), 'G' an IPSECKEY or AMTRELAY gateway (none, 4 or 16 address
// bytes, or a name, by the type in the rdata's second byte, RFC 4025 and
// RFC 8777), 'H' HIP's hit and key before its names (RFC 8005), and '*'
// the rest, whatever it holds. A layout without '*' must end at the
// rdata's end; as miekg/dns reads them, rdata may end before any field
// (what follows is then empty), never inside one.
var layouts = map[uint16]struct {
	steps    string
	compress bool
}{
	typeCNAME: {"N", true}, typeNS: {"N", true}, typePTR: {"N", true}, typeMB: {"N", true},
	typeMD: {"N", true}, typeMF: {"N", true}, typeMG: {"N", true}, typeMR: {"N", true},
	typeMINFO: {"NN", true}, typeMX: {"\x02N", true}, typeSOA: {"NN\x04\x04\x04\x04\x04", true},
	typeDNAME: {"N", false}, typeNSAPTR: {"N", false}, typeRP: {"NN", false}, typeTALINK: {"NN", false},
	typeAFSDB: {"\x02N", false}, typeRT: {"\x02N", false}, typeKX: {"\x02N", false}, typeLP: {"\x02N", false},
	typeSRV: {"\x02\x02\x02N", false}, typePX: {"\x02NN", false},
	typeRRSIG: {"\x02\x01\x01\x04\x04\x04\x02N*", false}, typeSIG: {"\x02\x01\x01\x04\x04\x04\x02N*", false},
	typeNSEC: {"N*", false}, typeNXT: {"N*", false}, typeTKEY: {"N*", false}, TypeTSIG: {"N*", false},
	typeSVCB: {"\x02N*", false}, typeHTTPS: {"\x02N*", false},
	typeNAPTR: {"\x02\x02CCCN", false}, typeIPSECKEY: {"\x01\x01\x01G*", false}, typeAMTRELAY: {"\x01\x01G", false},
	typeHIP: {"H", false},
}

// maxRDataNames bounds the names read in one rdata: two for most types, a
// list only in HIP.
const maxRDataNames = 8

// rdataNames are where the names of one record's rdata start, and whether
// they may be compressed.
type rdataNames struct {
	at       [maxRDataNames]int
	n        int
	compress bool
}

// read walks rr's rdata in msg by its type's layout, recording its names.
// It reports whether the type has a layout, and whether the layout read
// every byte (exact: no '*'); the error is rdata that does not follow it.
// Empty rdata holds nothing, as miekg/dns reads it (noRdata).
func (r *rdataNames) read(msg []byte, rr *RR) (known, exact bool, err error) {
	r.n, r.compress = 0, false
	l, ok := layouts[rr.Type]
	if !ok {
		return false, false, nil
	}
	data, end := int(rr.Data), int(rr.End)
	if data == end {
		return true, true, nil
	}
	r.compress = l.compress
	// miekg/dns reads rdata in the message cut at the rdata's end: a name
	// in it may point back anywhere, never past it.
	msg = msg[:end]
	off := data
	for i := 0; i < len(l.steps) && off < end; i++ {
		switch step := l.steps[i]; step {
		case 'N':
			if off, err = r.name(msg, off); err != nil {
				return true, false, err
			}
		case 'C':
			if off >= end {
				return true, false, ErrMalformed
			}
			off += 1 + int(msg[off])
		case 'G':
			switch msg[data+1] & 0x7F {
			case 1:
				off += 4
			case 2:
				off += 16
			case 3:
				if off, err = r.name(msg, off); err != nil {
					return true, false, err
				}
			}
		case 'H':
			// Hit length, key algorithm and key length, where miekg/dns
			// stops if the rdata does; then the hit and the key, which
			// must fit, and the names to the end.
			switch {
			case end-off < 4:
				if end-off == 3 {
					return true, false, ErrMalformed
				}
				off = end
			case end-off == 4:
				off = end
			default:
				off += 4 + int(msg[data]) + (int(msg[data+2])<<8 | int(msg[data+3]))
				for off < end {
					if off, err = r.name(msg, off); err != nil {
						return true, false, err
					}
				}
			}
		case '*':
			return true, false, nil
		default:
			off += int(step)
		}
		if off > end {
			return true, false, ErrMalformed
		}
	}
	if off != end {
		return true, false, ErrMalformed
	}
	return true, true, nil
}

func (r *rdataNames) name(msg []byte, off int) (int, error) {
	if r.n == len(r.at) {
		return 0, ErrMalformed
	}
	next, err := skipName(msg, off)
	if err != nil {
		return 0, err
	}
	r.at[r.n] = off
	r.n++
	return next, nil
}

// find is read for a record Parse has checked already.
func (r *rdataNames) find(msg []byte, rr *RR) bool {
	known, _, err := r.read(msg, rr)
	return known && err == nil && r.n > 0
}

// checkRData checks rr's rdata as Parse reads it: by its layout, A and
// AAAA by their length, TXT as a run of character strings; and reports
// whether it read it as miekg/dns would (RR.Checked).
func checkRData(msg []byte, rr *RR) (bool, error) {
	rdlen := int(rr.End) - int(rr.Data)
	switch rr.Type { // the common ones first, without a map lookup
	case typeA:
		return true, lengthIs(rdlen, 4)
	case typeAAAA:
		return true, lengthIs(rdlen, 16)
	case TypeOPT:
		return false, nil // never stored; its options are its reader's
	}
	var names rdataNames
	known, exact, err := names.read(msg, rr)
	if known {
		return exact, err
	}
	switch rr.Type {
	case typeTXT:
		for off := int(rr.Data); off < int(rr.End); off += 1 + int(msg[off]) {
			if off+1+int(msg[off]) > int(rr.End) {
				return false, ErrMalformed
			}
		}
		return true, nil
	}
	if rdlen == 0 {
		return true, nil
	}
	_, miekgKnows := dns.TypeToRR[rr.Type]
	return !miekgKnows, nil // an unknown type is opaque bytes to miekg/dns too (RFC 3597)
}

// lengthIs is nil for rdata of want bytes or none (miekg/dns reads empty
// rdata as a record without data), ErrMalformed otherwise.
func lengthIs(rdlen, want int) error {
	if rdlen == 0 || rdlen == want {
		return nil
	}
	return ErrMalformed
}

// SameRecord reports whether record i of a and record j of b are the same
// record as miekg/dns's IsDuplicate judges it: the same owner, type and
// class (letters of names compared without case), and the same rdata,
// its names compared uncompressed and without case, its other bytes
// exactly; the TTL is not compared.
func SameRecord(a *Msg, i int, b *Msg, j int) bool {
	ra, rb := a.RR(i), b.RR(j)
	if ra.Type != rb.Type || ra.Class != rb.Class || !a.sameOwnerAs(i, b, j) {
		return false
	}
	var bufA, bufB [512]byte
	return string(a.canonicalRData(i, bufA[:0])) == string(b.canonicalRData(j, bufB[:0]))
}

// sameOwnerAs reports whether record i of m and record j of o have the
// same owner, letters compared without case.
func (m *Msg) sameOwnerAs(i int, o *Msg, j int) bool {
	var name [MaxNameLen]byte
	return m.OwnerIs(i, o.Owner(j, name[:0]))
}

// canonicalRData appends record i's rdata to dst with every name in it
// uncompressed and in lower case, for SameRecord.
func (m *Msg) canonicalRData(i int, dst []byte) []byte {
	rr := m.RR(i)
	var names rdataNames
	if !names.find(m.Raw, rr) {
		return append(dst, m.RData(i)...)
	}
	msg := m.Raw[:rr.End]
	from := int(rr.Data)
	var name [MaxNameLen]byte
	for _, at := range names.at[:names.n] {
		dst = append(dst, msg[from:at]...)
		n, next, _ := ReadName(msg, at, name[:0])
		for _, c := range n {
			dst = append(dst, lower(c))
		}
		from = next
	}
	return append(dst, msg[from:]...)
}

// WholeLen is record i's length with no name compressed, as miekg/dns's
// Len counts a record of a message packed without compression: the
// resolver's Consul cut measures answers so (issue 34).
func (m *Msg) WholeLen(i int) int {
	rr := m.RR(i)
	var name [MaxNameLen]byte
	n := len(m.Owner(i, name[:0])) + 10 + int(rr.End-rr.Data)
	var names rdataNames
	if names.find(m.Raw, rr) {
		msg := m.Raw[:rr.End]
		for _, at := range names.at[:names.n] {
			whole, next, _ := ReadName(msg, at, name[:0])
			n += len(whole) - (next - at)
		}
	}
	return n
}
