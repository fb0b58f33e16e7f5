package dnswire

import (
	"encoding/binary"
	"errors"
)

// Builder is the one encoder of messages with records (issue 22): the
// cache's entries, whether the records come from an upstream's bytes or
// from a dns.Msg packed first, the scrubber's output and the chase's
// joined answer are written by it. It copies records out of a parsed
// Msg and compresses names the way miekg/dns's packer does (RFC 1035
// section 4.1.4): every name is looked up suffix by suffix, longest
// first, against the suffixes written so far, matched byte for byte
// (case-sensitive, so every name keeps its spelling); the first match ends
// a compressible name (owners, the question, the rdata names of RFC 1035's
// types) with a pointer, and every suffix not found is remembered while it
// starts below offset 0x4000, where a pointer can reach. An entry so made
// has the size miekg/dns would pack the same records to, which is what a
// general-path answer is packed with.
//
// Its buffer and tables are arrays, so a Builder kept on its caller's
// stack costs no allocation for a message of up to inlineBytes; a larger
// one grows on the heap. A message with more distinct suffixes than the
// table holds is written with less compression, never wrong.
type Builder struct {
	out     [inlineBytes]byte
	n       int    // bytes of out written
	ext     []byte // the message, once it outgrew out
	counts  [4]uint16
	section int // the section records are added to now
	suffix  [maxSuffixes]struct {
		at uint16 // from the message's start
		n  uint8  // the suffix's uncompressed length
	}
	nsuffix int
	err     error
}

// inlineBytes is the message a Builder writes without allocating: more
// than an answer over UDP (1232 bytes) takes.
const inlineBytes = 2048

// maxSuffixes bounds the compression table: a reply of a few dozen names
// of four labels fills a quarter of it.
const maxSuffixes = 256

// MaxMessageLen is the longest DNS message (a TCP length prefix's limit).
const MaxMessageLen = 65535

// ErrTooLong is a message the Builder could not write within
// MaxMessageLen bytes, or records added out of section order.
var ErrTooLong = errors.New("DNS message too long")

var errOrder = errors.New("records added out of section order")

// Start begins a message: a header with id and flags (rcode included) and
// no records yet.
func (b *Builder) Start(id, flags uint16) {
	b.n, b.ext, b.counts, b.section, b.nsuffix, b.err = 0, nil, [4]uint16{}, 0, 0, nil
	b.put([]byte{byte(id >> 8), byte(id), byte(flags >> 8), byte(flags), 0, 0, 0, 0, 0, 0, 0, 0})
}

// bytes is the message so far.
func (b *Builder) bytes() []byte {
	if b.ext != nil {
		return b.ext
	}
	return b.out[:b.n]
}

// size is the length of the message so far.
func (b *Builder) size() int {
	if b.ext != nil {
		return len(b.ext)
	}
	return b.n
}

// put appends p to the message.
func (b *Builder) put(p []byte) {
	if b.ext == nil {
		if b.n+len(p) <= len(b.out) {
			b.n += copy(b.out[b.n:], p)
			return
		}
		b.ext = append(make([]byte, 0, 2*(b.n+len(p))), b.out[:b.n]...)
	}
	b.ext = append(b.ext, p...)
}

// Question adds the question: name in uncompressed wire form.
func (b *Builder) Question(name []byte, qtype, qclass uint16) {
	b.name(name, true)
	b.put([]byte{byte(qtype >> 8), byte(qtype), byte(qclass >> 8), byte(qclass)})
	b.counts[0]++
}

// Len is the length of the message so far: after Question, where the
// first record will start.
func (b *Builder) Len() int { return b.size() }

// Record adds record i of m to section s (sections in order: answer,
// authority, additional) and returns where its TTL field is, counted from
// the message's start. The rdata's names are read out of m and written
// again: compressed against this message where miekg/dns compresses them,
// whole otherwise.
func (b *Builder) Record(s Section, m *Msg, i int) int {
	var name [MaxNameLen]byte
	return b.RecordAs(s, m, i, m.Owner(i, name[:0]))
}

// RecordAs is Record with owner (uncompressed wire form) as the record's
// owner name: the Consul watch's answers, packed once, are owned by each
// question's name (issue 34).
func (b *Builder) RecordAs(s Section, m *Msg, i int, owner []byte) int {
	if int(s) < b.section {
		b.err = errOrder
	}
	b.section = int(s)
	rr := m.RR(i)
	var name [MaxNameLen]byte
	b.name(owner, true)
	ttlAt := b.size() + 4
	b.put(m.Raw[rr.TTLAt-4 : rr.TTLAt+4]) // type, class, TTL
	rdlenAt := b.size()
	b.put([]byte{0, 0})
	var names rdataNames
	if names.find(m.Raw, rr) {
		msg := m.Raw[:rr.End]
		from := int(rr.Data)
		for _, at := range names.at[:names.n] {
			b.put(msg[from:at])
			n, next, _ := ReadName(msg, at, name[:0])
			b.name(n, names.compress)
			from = next
		}
		b.put(msg[from:])
	} else {
		b.put(m.RData(i))
	}
	binary.BigEndian.PutUint16(b.bytes()[rdlenAt:], uint16(b.size()-rdlenAt-2))
	b.counts[1+s]++
	return ttlAt
}

// Finish writes the counts into the header and reports the message's
// length, or why it cannot be written.
func (b *Builder) Finish() (int, error) {
	if b.err == nil && b.size() > MaxMessageLen {
		b.err = ErrTooLong
	}
	if b.err != nil {
		return 0, b.err
	}
	msg := b.bytes()
	for i, n := range b.counts {
		binary.BigEndian.PutUint16(msg[4+2*i:], n)
	}
	return len(msg), nil
}

// AppendTo appends the finished message to dst.
func (b *Builder) AppendTo(dst []byte) []byte { return append(dst, b.bytes()...) }

// name writes name (uncompressed wire form) as miekg/dns's packDomainName
// does; see Builder. The root is one zero byte, never looked up nor
// remembered.
func (b *Builder) name(name []byte, compress bool) {
	if len(name) <= 1 {
		b.put([]byte{0})
		return
	}
	for i := 0; name[i] != 0; i += 1 + int(name[i]) {
		if at, ok := b.find(name[i:]); ok {
			if compress {
				b.put([]byte{byte(at>>8) | 0xC0, byte(at)})
				return
			}
		} else if off := b.size(); off < 0x4000 && b.nsuffix < len(b.suffix) {
			b.suffix[b.nsuffix].at, b.suffix[b.nsuffix].n = uint16(off), uint8(len(name)-i)
			b.nsuffix++
		}
		b.put(name[i : i+1+int(name[i])])
	}
	b.put([]byte{0})
}

// find returns where suffix (uncompressed wire form) was written before.
func (b *Builder) find(suffix []byte) (int, bool) {
	for _, s := range b.suffix[:b.nsuffix] {
		if int(s.n) == len(suffix) && b.writtenIs(int(s.at), suffix) {
			return int(s.at), true
		}
	}
	return 0, false
}

// writtenIs reports whether the name written at at (from the message's
// start, perhaps ending in a pointer) is name, byte for byte.
func (b *Builder) writtenIs(at int, name []byte) bool {
	msg := b.bytes()
	for j := 0; ; {
		c := msg[at]
		if c&0xC0 == 0xC0 {
			at = int(c&0x3F)<<8 | int(msg[at+1])
			continue
		}
		if c != name[j] {
			return false
		}
		if c == 0 {
			return true
		}
		l := int(c)
		if string(msg[at+1:at+1+l]) != string(name[j+1:j+1+l]) {
			return false
		}
		at += 1 + l
		j += 1 + l
	}
}
