package upstream

import (
	"encoding/binary"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// The bytes a query gets on its way onto a TLS connection: a length
// prefix (RFC 7766 section 8), the EDNS edns-tcp-keepalive option (RFC
// 7828: the server says how long it keeps an idle connection) and the
// padding option filling the message to a multiple of 128 octets (RFC
// 8467 section 4.1, the block length it recommends for queries), so the
// length of a query on the wire says little about the name in it.

const (
	ednsOptionKeepalive = 11 // RFC 7828
	ednsOptionPadding   = 12 // RFC 7830
	// queryPadBlock is RFC 8467's recommended query block length.
	queryPadBlock = 128
	// tlsAdvertisedUDPSize is the OPT's size on a query that had none;
	// over a stream it is only a formality (DESIGN.md: 1232).
	tlsAdvertisedUDPSize = 1232
)

// frameTLSQuery appends to dst query, a query of one question ending at
// qend, framed for a stream and carrying the keepalive and padding
// options: in the OPT record the resolver's queries end with (issue 22's
// appendUpstreamQuery), or in one added to a query with no other records
// (a probe). A query of any other shape, which towerd does not send, is
// framed as it is. The query is read with dnswire's view and written
// again by its encoder: header, question, and the OPT record with the
// options it had and the two added, written in place (dst is the query's
// own room, tlsQuery.room: no allocation of its own).
func frameTLSQuery(dst, query []byte, qend int) []byte {
	var m dnswire.Msg
	if m.Parse(query) != nil || m.QEnd != qend || m.Counts[dnswire.Answer] != 0 || m.Counts[dnswire.Authority] != 0 ||
		m.Counts[dnswire.Additional] > 1 || m.Counts[dnswire.Additional] == 1 && (m.OPT != 0 || int(m.RR(0).End) != len(query)) {
		out := binary.BigEndian.AppendUint16(dst, uint16(len(query)))
		return append(out, query...)
	}
	udpSize, do, options := uint16(tlsAdvertisedUDPSize), false, []byte(nil)
	if m.OPT == 0 {
		udpSize, do, options = m.UDPSize(), m.DO(), m.RData(0)
	}
	const optionHeader = 4 // code and length (RFC 6891 section 6.1.2)
	unpadded := qend + dnswire.OPTLen + len(options) + 2*optionHeader
	pad := (queryPadBlock - unpadded%queryPadBlock) % queryPadBlock
	out := binary.BigEndian.AppendUint16(dst, uint16(unpadded+pad))
	hdr, _ := dnswire.ReadHeader(query) // it parsed
	hdr.ARCount = 1
	out = hdr.Append(out)
	out = append(out, m.QuestionSection()...)
	out = dnswire.AppendOPTHeader(out, udpSize, do, len(options)+2*optionHeader+pad)
	out = append(out, options...)
	out = dnswire.AppendOption(out, ednsOptionKeepalive, nil)
	var zeros [queryPadBlock]byte
	return dnswire.AppendOption(out, ednsOptionPadding, zeros[:pad])
}

// tlsFrameRoom is what tlsQuery keeps for its frame: a query padded to
// one block, which holds names of up to about 90 octets (most); a longer
// one is appended to the heap. Each miss allocates its tlsQuery, and the
// bytes allocated per miss set how often the collector runs, whose cycles
// are much of towerd's own slowest misses (docs/benchmarks.md): three
// blocks of room would double the query's allocation for the few names
// that need them.
const tlsFrameRoom = 2 + queryPadBlock

// replyKeepalive is the idle timeout a reply's edns-tcp-keepalive option
// announces (RFC 7828 section 3.2.2: units of 100 ms), ok false when it
// carries none.
func replyKeepalive(raw []byte) (time.Duration, bool) {
	var m dns.Msg
	if m.Unpack(raw) != nil {
		return 0, false
	}
	opt := m.IsEdns0()
	if opt == nil {
		return 0, false
	}
	for _, o := range opt.Option {
		if ka, ok := o.(*dns.EDNS0_TCP_KEEPALIVE); ok && ka.Timeout > 0 {
			return time.Duration(ka.Timeout) * 100 * time.Millisecond, true
		}
	}
	return 0, false
}
