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

// frameTLSQuery returns query, a query of one question ending at qend,
// framed for a stream and carrying the keepalive and padding options: in
// the OPT record the resolver's queries end with (issue 22's
// appendUpstreamQuery), or in one added to a query with no other records
// (a probe). A query of any other shape, which towerd does not send, is
// framed as it is.
func frameTLSQuery(query []byte, qend int) []byte {
	counts := query[6:12]
	an, ns, ar := binary.BigEndian.Uint16(counts), binary.BigEndian.Uint16(counts[2:]), binary.BigEndian.Uint16(counts[4:])
	out := make([]byte, 2, 2+len(query)+dnswire.OPTLen+8+queryPadBlock)
	out = append(out, query...)
	msg := func() []byte { return out[2:] }
	switch {
	case an == 0 && ns == 0 && ar == 1 && len(query) >= qend+dnswire.OPTLen &&
		query[qend] == 0 && binary.BigEndian.Uint16(query[qend+1:]) == dnswire.TypeOPT &&
		qend+dnswire.OPTLen+int(binary.BigEndian.Uint16(query[qend+9:])) == len(query):
	case an == 0 && ns == 0 && ar == 0 && len(query) == qend:
		out = dnswire.AppendOPT(out, tlsAdvertisedUDPSize, false, 0)
		binary.BigEndian.PutUint16(msg()[10:], 1)
	default:
		binary.BigEndian.PutUint16(out, uint16(len(query)))
		return out
	}
	out = append(out, 0, ednsOptionKeepalive, 0, 0)
	unpadded := len(msg()) + 4 // with the padding option's own header
	pad := (queryPadBlock - unpadded%queryPadBlock) % queryPadBlock
	out = append(out, 0, ednsOptionPadding, byte(pad>>8), byte(pad))
	out = append(out, make([]byte, pad)...)
	rdlen := len(msg()) - (qend + dnswire.OPTLen)
	binary.BigEndian.PutUint16(msg()[qend+9:], uint16(rdlen))
	binary.BigEndian.PutUint16(out, uint16(len(msg())))
	return out
}

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
