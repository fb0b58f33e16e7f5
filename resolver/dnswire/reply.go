package dnswire

// Replies and queries are written here (issue 34): every reply towerd
// writes as bytes, an answer of records or an error with none (FORMERR,
// NOTIMP, REFUSED, BADVERS, SERVFAIL, the answer to a query whose handler
// panicked), is closed by Reply.Close: its OPT record, when the client
// spoke EDNS, with the extended rcode and an Extended DNS Error (RFC 6891
// section 6.1.3, RFC 8914), and its header with the counts. Unbound's
// msgencode.c is the model: one encoder, whatever the answer came from.

// Reply is how a reply is closed: its header and its OPT record.
type Reply struct {
	ID uint16
	// Flags is the header's flags word; its rcode bits are Rcode's.
	Flags uint16
	// Rcode is the reply's rcode, extended: the bits above the header's
	// four travel in the OPT record (BADVERS is 16), so a reply with such
	// an rcode must have one (EDNS).
	Rcode int
	// Questions, Answer, Authority and Additional are the records written
	// before Close, the OPT record not counted.
	Questions, Answer, Authority, Additional uint16
	// EDNS: the reply carries an OPT record advertising UDPSize, with the
	// DO bit, and an Extended DNS Error option of code EDE unless it is 0.
	EDNS    bool
	UDPSize uint16
	DO      bool
	EDE     uint16
}

// StartReply appends the room for a reply's header to dst, and the
// question section after it (question: name, type and class as they are
// on the wire, nil for none), and reports where the header is, for Close.
func StartReply(dst, question []byte) ([]byte, int) {
	at := len(dst)
	dst = append(dst, make([]byte, HeaderLen)...)
	return append(dst, question...), at
}

// Close ends the reply whose header room StartReply left at msg[at:]:
// it appends the OPT record (EDNS) and writes the header.
func (r Reply) Close(msg []byte, at int) []byte {
	extra := r.Additional
	if r.EDNS {
		msg = appendOPT(msg, r.UDPSize, r.DO, r.EDE, uint8(r.Rcode>>4))
		extra++
	}
	Header{ID: r.ID, Flags: r.Flags&^0xF | uint16(r.Rcode&0xF), QDCount: r.Questions,
		ANCount: r.Answer, NSCount: r.Authority, ARCount: extra}.Put(msg[at:])
	return msg
}

// AppendEmptyReply appends a reply of no records to dst: the question
// section (question, as for StartReply) and r's header and OPT record.
// Every error reply is one.
func AppendEmptyReply(dst, question []byte, r Reply) []byte {
	dst, at := StartReply(dst, question)
	return r.Close(dst, at)
}

// AppendQuestion appends a question section's entry (RFC 1035 section
// 4.1.2) to dst: name in uncompressed wire form, qtype, qclass.
func AppendQuestion(dst, name []byte, qtype, qclass uint16) []byte {
	dst = append(dst, name...)
	return append(dst, byte(qtype>>8), byte(qtype), byte(qclass>>8), byte(qclass))
}

// AppendQuery appends a query of one question to dst: id, flags, the
// question (name uncompressed), and an OPT record advertising udpSize with
// the DO bit when edns is set.
func AppendQuery(dst []byte, id, flags uint16, name []byte, qtype, qclass uint16, edns bool, udpSize uint16, do bool) []byte {
	h := Header{ID: id, Flags: flags, QDCount: 1}
	if edns {
		h.ARCount = 1
	}
	dst = AppendQuestion(h.Append(dst), name, qtype, qclass)
	if edns {
		dst = AppendOPT(dst, udpSize, do, 0)
	}
	return dst
}

// AppendOPT appends an OPT record (RFC 6891): the root owner, udpSize, the
// DO bit, and an Extended DNS Error option (RFC 8914) when ede is not 0.
func AppendOPT(dst []byte, udpSize uint16, do bool, ede uint16) []byte {
	return appendOPT(dst, udpSize, do, ede, 0)
}

// appendOPT is AppendOPT with the extended rcode's upper eight bits.
func appendOPT(dst []byte, udpSize uint16, do bool, ede uint16, extRcode uint8) []byte {
	if ede == 0 {
		return appendOPTHeader(dst, udpSize, do, extRcode, 0)
	}
	dst = appendOPTHeader(dst, udpSize, do, extRcode, EDELen)
	return AppendOption(dst, optionEDE, []byte{byte(ede >> 8), byte(ede)})
}

// AppendOPTOptions appends an OPT record as AppendOPT does, whose rdata is
// options: EDNS options as AppendOption writes them.
func AppendOPTOptions(dst []byte, udpSize uint16, do bool, options []byte) []byte {
	return append(appendOPTHeader(dst, udpSize, do, 0, len(options)), options...)
}

// AppendOPTHeader appends an OPT record (no extended rcode) up to its
// rdata of rdlen bytes, which the caller appends: options written in
// place, with no slice of them made first.
func AppendOPTHeader(dst []byte, udpSize uint16, do bool, rdlen int) []byte {
	return appendOPTHeader(dst, udpSize, do, 0, rdlen)
}

// appendOPTHeader writes the OPT record up to its rdata (RFC 6891 section
// 6.1.2 and 6.1.3): root owner, type, the UDP size as its class, the TTL's
// extended rcode, version 0 and the DO bit, and rdlen, the length of the
// options its caller appends.
func appendOPTHeader(dst []byte, udpSize uint16, do bool, extRcode uint8, rdlen int) []byte {
	var flags byte
	if do {
		flags = 0x80
	}
	return append(dst, 0, TypeOPT>>8, TypeOPT&0xFF, byte(udpSize>>8), byte(udpSize), extRcode, 0, flags, 0,
		byte(rdlen>>8), byte(rdlen))
}

// AppendOption appends an EDNS option (RFC 6891 section 6.1.2) to dst:
// its code, the length of data, and data.
func AppendOption(dst []byte, code uint16, data []byte) []byte {
	dst = append(dst, byte(code>>8), byte(code), byte(len(data)>>8), byte(len(data)))
	return append(dst, data...)
}

// OPTLen is the length of an OPT record AppendOPT writes without an EDE;
// EDELen what an EDE option adds (code, length, info-code, no text).
const (
	OPTLen = 11
	EDELen = 6
)

// optionEDE is the Extended DNS Error option's code (RFC 8914 section 2).
const optionEDE = 15
