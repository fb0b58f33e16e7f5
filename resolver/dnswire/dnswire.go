// Package dnswire is towerd's one reading and one writing of DNS messages
// in wire form (issue 22): Msg, a strict view that parses a message once,
// without allocating, into where its question and each record's owner,
// type, class, TTL and rdata are; Builder, the one encoder of records,
// which writes messages of records copied out of views and compresses
// their names as miekg/dns does; Reply, the one close of every reply
// written as bytes (its OPT record and header: answers and errors alike),
// and AppendQuery; and the names' rules (ReadName, EqualName, InZone and
// InZoneText, AppendText). The fast path reads client queries with it, the upstream
// its replies and the scrubber its judgement, the cache its entries and
// snapshots: no other code reads a name or walks records by hand.
//
// It reads what miekg/dns reads (FuzzParse holds the two together), so
// that what a route judges on the wire is what the dns.Msg path would
// have judged. It imports only miekg/dns. It sits under resolver/, beside
// the other leaves the resolver's neighbours share (dnslisten, consul,
// local): the top level is fixed, and a leaf that imports nothing of
// towerd keeps cache and upstream knowing nothing of each other or of the
// resolver's code.
package dnswire

// HeaderLen is the length of a message's header (RFC 1035 section 4.1.1).
const HeaderLen = 12

// Header flag bits (RFC 1035 section 4.1.1; RFC 4035 section 3.2 for AD
// and CD).
const (
	FlagQR uint16 = 1 << 15
	FlagAA uint16 = 1 << 10
	FlagTC uint16 = 1 << 9
	FlagRD uint16 = 1 << 8
	FlagRA uint16 = 1 << 7
	FlagZ  uint16 = 1 << 6
	FlagAD uint16 = 1 << 5
	FlagCD uint16 = 1 << 4
)

// Opcode is the opcode field of a header's flags word.
func Opcode(flags uint16) int { return int(flags>>11) & 0xF }

// Record types and classes the view reads the rdata of.
const (
	typeA      = 1
	typeNS     = 2
	typeMD     = 3
	typeMF     = 4
	typeCNAME  = 5
	typeSOA    = 6
	typeMB     = 7
	typeMG     = 8
	typeMR     = 9
	typePTR    = 12
	typeMINFO  = 14
	typeMX     = 15
	typeTXT    = 16
	typeRP     = 17
	typeAFSDB  = 18
	typeRT     = 21
	typeNSAPTR = 23
	typeSIG    = 24
	typePX     = 26
	typeAAAA   = 28
	typeNXT    = 30
	typeSRV    = 33
	typeNAPTR  = 35
	typeKX     = 36
	typeDNAME  = 39
	// TypeOPT is the EDNS pseudo-record (RFC 6891).
	TypeOPT      = 41
	typeIPSECKEY = 45
	typeRRSIG    = 46
	typeNSEC     = 47
	typeHIP      = 55
	typeTALINK   = 58
	typeSVCB     = 64
	typeHTTPS    = 65
	typeLP       = 107
	typeTKEY     = 249
	// TypeTSIG is the transaction signature (RFC 8945).
	TypeTSIG     = 250
	typeAMTRELAY = 260
	classINET    = 1
)

// Section is one of a message's record sections.
type Section uint8

// The record sections, in message order.
const (
	Answer Section = iota
	Authority
	Additional
)
