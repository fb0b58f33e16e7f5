package dnswire

import (
	"encoding/binary"
	"errors"
)

// The view (Msg): a message parsed once, in place.

// RR is one record of a parsed message, as offsets into Msg.Raw: where its
// owner name starts, its type and class, where its TTL field and its rdata
// are. Offsets fit 16 bits: a message is at most 65,535 bytes.
type RR struct {
	Name  uint16 // the owner name (possibly a compression pointer)
	Type  uint16
	Class uint16
	TTLAt uint16 // the 4-byte TTL field
	Data  uint16 // the rdata: Raw[Data:End]
	End   uint16
	// Checked: Parse read every byte of the rdata as miekg/dns reads it
	// (a name-bearing type's names and lengths, A and AAAA lengths, TXT's
	// strings, empty rdata), or miekg/dns reads any rdata of the type (one
	// it does not know, RFC 3597). A record that is not Checked may still
	// be one miekg/dns refuses (a DS too short, an SVCB parameter out of
	// order): whoever must be sure unpacks it once.
	Checked bool
}

// Msg is a strict view of one DNS message: its header, its question, and
// per record the owner, type, class, TTL offset and rdata bounds, read in
// one pass without allocating for messages of up to inlineRRs records.
// Every name in it, owners and the names inside the rdata of every type
// miekg/dns decompresses, was read with ReadName's rules, so reading one
// again cannot fail. The zero value is ready for Parse; a Msg may be
// reused for the next message.
type Msg struct {
	// Raw is the message the view reads; the view holds no copy.
	Raw   []byte
	ID    uint16
	Flags uint16
	// QDCount is 0 or 1: a message of more questions is refused (no DNS
	// implementation answers one).
	QDCount int
	// QName is where the question's name starts (HeaderLen), QEnd where
	// the question section ends; QType and QClass are the question's.
	QName, QEnd   int
	QType, QClass uint16
	// Counts are the records of each Section.
	Counts [3]int
	// OPT is the index (RR) of the additional section's first OPT record,
	// -1 without one; OPTs counts them (RFC 6891 section 6.1.1 allows one).
	OPT  int
	OPTs int

	// The records, answer, authority and additional in order: n of them in
	// inline, or all in more for a message of more than inlineRRs. (Not a
	// slice of inline: a Msg pointing into itself would live on the heap.)
	n      int
	inline [inlineRRs]RR
	more   []RR
}

// Len is the number of records.
func (m *Msg) Len() int { return m.n }

// RR is record i (answer, authority and additional in order).
func (m *Msg) RR(i int) *RR {
	if m.more != nil {
		return &m.more[i]
	}
	return &m.inline[i]
}

// inlineRRs is how many records a Msg holds without allocating: replies of
// a few addresses, a CNAME chain, an SOA and an OPT record fit many times.
const inlineRRs = 24

// ErrMalformed is a message the view cannot read: shorter than its header
// or its counts promise, a name ReadName refuses, rdata past the end of the
// message, or rdata of a type whose layout it knows that does not follow
// it (where miekg/dns would refuse the message as well).
var ErrMalformed = errors.New("malformed DNS message")

// errQuestions is a message of more than one question.
var errQuestions = errors.New("more than one question")

// Parse reads raw into m. Bytes after the last record are ignored, as
// miekg/dns ignores them; counts that promise more records than raw holds
// make it malformed (miekg/dns reads such a message as the records there
// are when it ends on a record's boundary: a reply that lies about its
// length is not one to trust).
func (m *Msg) Parse(raw []byte) error {
	off, err := m.parseQuestion(raw)
	if err != nil {
		return err
	}
	total := m.Counts[0] + m.Counts[1] + m.Counts[2]
	// Each record takes 11 bytes at least: a count the message cannot hold
	// is refused before anything is allocated for it.
	if total > (len(raw)-off)/11 {
		return ErrMalformed
	}
	if total > inlineRRs {
		m.more = make([]RR, total)
	}
	for i := range total {
		name := off
		var err error
		if off, err = skipName(raw, off); err != nil || off+10 > len(raw) {
			return ErrMalformed
		}
		rr := RR{Name: uint16(name), Type: binary.BigEndian.Uint16(raw[off:]), Class: binary.BigEndian.Uint16(raw[off+2:]),
			TTLAt: uint16(off + 4), Data: uint16(off + 10)}
		end := off + 10 + int(binary.BigEndian.Uint16(raw[off+8:]))
		if end > len(raw) {
			return ErrMalformed
		}
		rr.End = uint16(end)
		if rr.Checked, err = checkRData(raw, &rr); err != nil {
			return ErrMalformed
		}
		if rr.Type == TypeOPT && i >= m.Counts[0]+m.Counts[1] {
			if m.OPTs == 0 {
				m.OPT = i
			}
			m.OPTs++
		}
		*m.RR(i) = rr
		m.n++
		off = end
	}
	return nil
}

// ParseQuestion reads raw's header and question into m, and nothing
// after them (Len is 0): what a socket checks of a reply before anything
// else, so that a reply cut short, as a truncated one may be, is still
// known for whose it is.
func (m *Msg) ParseQuestion(raw []byte) error {
	_, err := m.parseQuestion(raw)
	return err
}

// QuestionIs reports whether the question's name is name (uncompressed
// wire form), letters compared without case.
func (m *Msg) QuestionIs(name []byte) bool { return m.QDCount == 1 && m.nameIs(m.QName, name) }

// parseQuestion reads the header and the question and returns the offset
// after them.
func (m *Msg) parseQuestion(raw []byte) (int, error) {
	m.Raw, m.n, m.more, m.OPT, m.OPTs = raw, 0, nil, -1, 0
	if len(raw) < HeaderLen {
		return 0, ErrMalformed
	}
	m.ID = binary.BigEndian.Uint16(raw)
	m.Flags = binary.BigEndian.Uint16(raw[2:])
	m.QDCount = int(binary.BigEndian.Uint16(raw[4:]))
	for s := range m.Counts {
		m.Counts[s] = int(binary.BigEndian.Uint16(raw[6+2*s:]))
	}
	off := HeaderLen
	m.QName, m.QEnd, m.QType, m.QClass = off, off, 0, 0
	switch m.QDCount {
	case 0:
	case 1:
		var err error
		if off, err = skipName(raw, off); err != nil || off+4 > len(raw) {
			return 0, ErrMalformed
		}
		m.QType, m.QClass = binary.BigEndian.Uint16(raw[off:]), binary.BigEndian.Uint16(raw[off+2:])
		off += 4
		m.QEnd = off
	default:
		return 0, errQuestions
	}
	return off, nil
}

// Rcode is the message's rcode: the header's four bits and, with an OPT
// record, its extended rcode above them (RFC 6891 section 6.1.3).
func (m *Msg) Rcode() int {
	rcode := int(m.Flags & 0xF)
	if m.OPT >= 0 {
		rcode |= int(m.Raw[m.RR(m.OPT).TTLAt]) << 4
	}
	return rcode
}

// Range is the indexes (RR) of section s's records: from to to-1.
func (m *Msg) Range(s Section) (from, to int) {
	for i := range s {
		from += m.Counts[i]
	}
	return from, from + m.Counts[s]
}

// SectionOf is the section record i is in.
func (m *Msg) SectionOf(i int) Section {
	if i < m.Counts[0] {
		return Answer
	}
	if i < m.Counts[0]+m.Counts[1] {
		return Authority
	}
	return Additional
}

// TTL is record i's TTL field as sent.
func (m *Msg) TTL(i int) uint32 { return binary.BigEndian.Uint32(m.Raw[m.RR(i).TTLAt:]) }

// Owner appends record i's owner name, uncompressed, to dst.
func (m *Msg) Owner(i int, dst []byte) []byte {
	name, _, _ := ReadName(m.Raw, int(m.RR(i).Name), dst)
	return name
}

// OwnerIs reports whether record i's owner is name (uncompressed wire
// form), letters compared without case, without copying it.
func (m *Msg) OwnerIs(i int, name []byte) bool { return m.nameIs(int(m.RR(i).Name), name) }

// SameOwner reports whether records i and j have the same owner, letters
// compared without case.
func (m *Msg) SameOwner(i, j int) bool {
	var name [MaxNameLen]byte
	return m.OwnerIs(i, m.Owner(j, name[:0]))
}

// nameIs compares the name at off, which Parse checked, with name.
func (m *Msg) nameIs(off int, name []byte) bool {
	for j := 0; ; {
		c := m.Raw[off]
		if c&0xC0 == 0xC0 {
			off = int(c&0x3F)<<8 | int(m.Raw[off+1])
			continue
		}
		if j >= len(name) || c != name[j] {
			return false
		}
		if c == 0 {
			return j == len(name)-1
		}
		if !EqualName(m.Raw[off+1:off+1+int(c)], name[j+1:j+1+int(c)]) {
			return false
		}
		off += 1 + int(c)
		j += 1 + int(c)
	}
}

// Question appends the question's name, uncompressed, to dst (the root
// for a message without a question).
func (m *Msg) Question(dst []byte) []byte {
	if m.QDCount == 0 {
		return append(dst, 0)
	}
	name, _, _ := ReadName(m.Raw, m.QName, dst)
	return name
}

// Respell writes name (uncompressed wire form) over raw's question
// name, which must be the same name in other letter case, uncompressed in
// place: every name compressed to point into the question then reads in
// name's spelling (issue 23). It reports false, raw unchanged, for a raw
// whose question is not name so written.
func Respell(raw, name []byte) bool {
	var m Msg
	if m.ParseQuestion(raw) != nil || !m.QuestionIs(name) || m.QuestionCompressed() {
		return false
	}
	copy(raw[m.QName:], name) // uncompressed and equal without case: the same length
	return true
}

// QuestionSection is the question section as it is in Raw (name, type
// and class; empty without a question): what a reply to it repeats.
func (m *Msg) QuestionSection() []byte { return m.Raw[HeaderLen:m.QEnd] }

// QuestionInPlace is the question's name as it is in Raw, when it is
// there whole (no compression pointer, QuestionCompressed): a name to
// compare or copy without decompressing it.
func (m *Msg) QuestionInPlace() ([]byte, bool) {
	if m.QDCount != 1 || m.QuestionCompressed() {
		return nil, false
	}
	return m.Raw[m.QName : m.QEnd-4], true
}

// QuestionCompressed reports whether the question's name holds a
// compression pointer: its bytes in place are not the whole name.
func (m *Msg) QuestionCompressed() bool {
	for off := m.QName; off < len(m.Raw); off += 1 + int(m.Raw[off]) {
		switch c := m.Raw[off]; {
		case c == 0:
			return false
		case c&0xC0 != 0:
			return true
		}
	}
	return true
}

// Target appends the k-th name in record i's rdata (0: the first; a
// CNAME's or DNAME's target, NS's host, MX's exchange, SRV's target),
// uncompressed, to dst, and reports false when the rdata has no such name.
func (m *Msg) Target(i, k int, dst []byte) ([]byte, bool) {
	var names rdataNames
	if !names.find(m.Raw, m.RR(i)) || k >= names.n {
		return dst, false
	}
	name, _, _ := ReadName(m.Raw[:m.RR(i).End], names.at[k], dst)
	return name, true
}

// SOAMinimum is SOA record i's MINIMUM field (RFC 1035 section 3.3.13;
// RFC 2308's negative TTL), 0 when the rdata ends before it, as miekg/dns
// reads such an SOA.
func (m *Msg) SOAMinimum(i int) uint32 {
	var names rdataNames
	rr := m.RR(i)
	if !names.find(m.Raw, rr) || names.n < 2 {
		return 0
	}
	after, _ := skipName(m.Raw[:rr.End], names.at[1])
	if int(rr.End)-after != 20 {
		return 0
	}
	return binary.BigEndian.Uint32(m.Raw[rr.End-4:])
}

// TypeCovered is the type covered by record i, an RRSIG (RFC 4034
// section 3.1: the rdata's first two bytes); false when its rdata is too
// short to hold one.
func (m *Msg) TypeCovered(i int) (uint16, bool) {
	rdata := m.RData(i)
	if len(rdata) < 2 {
		return 0, false
	}
	return binary.BigEndian.Uint16(rdata), true
}

// RData is record i's rdata as it is in Raw (names in it may be
// compression pointers into the rest of the message).
func (m *Msg) RData(i int) []byte { rr := m.RR(i); return m.Raw[rr.Data:rr.End] }

// The OPT record's fields (RFC 6891 section 6.1.2). Call them only when
// m.OPT >= 0.

// UDPSize is the OPT record's requestor's payload size (its class field).
func (m *Msg) UDPSize() uint16 { return m.RR(m.OPT).Class }

// EDNSVersion is the OPT record's version.
func (m *Msg) EDNSVersion() uint8 { return m.Raw[m.RR(m.OPT).TTLAt+1] }

// DO is the OPT record's DNSSEC OK bit (RFC 3225).
func (m *Msg) DO() bool { return m.Raw[m.RR(m.OPT).TTLAt+2]&0x80 != 0 }

// OPTOwnerRoot reports whether the OPT record's owner is the root, as RFC
// 6891 section 6.1.2 requires.
func (m *Msg) OPTOwnerRoot() bool { return m.Raw[m.RR(m.OPT).Name] == 0 }

// EachOption calls fn with the code and data of each option of the OPT
// record, until fn returns false, and reports false when fn did or the
// options are malformed (an option running past the rdata).
func (m *Msg) EachOption(fn func(code uint16, data []byte) bool) bool {
	for opts := m.RData(m.OPT); len(opts) > 0; {
		if len(opts) < 4 {
			return false
		}
		code, l := binary.BigEndian.Uint16(opts), int(binary.BigEndian.Uint16(opts[2:]))
		if 4+l > len(opts) || !fn(code, opts[4:4+l]) {
			return false
		}
		opts = opts[4+l:]
	}
	return true
}
