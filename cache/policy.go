package cache

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// Kind says what sort of answer an entry holds.
type Kind uint8

// The zero Kind is deliberately not Positive, so a zero Result (a miss) is
// never mistaken for a positive answer.
const (
	// Positive is a NOERROR reply with at least one answer record.
	Positive Kind = iota + 1
	// NoData is a NOERROR reply with an empty answer section: the name
	// exists but has no records of the asked type (RFC 2308 §2.2).
	NoData
)

// String returns "positive" or "nodata", the words the admin API and metrics use.
func (k Kind) String() string {
	switch k {
	case Positive:
		return "positive"
	case NoData:
		return "nodata"
	default:
		return fmt.Sprintf("Kind(%d)", uint8(k))
	}
}

// Refusal reasons that are not an rcode. They are short and stable because
// the resolver puts them in debug output and may count them.
const (
	reasonNilMessage = "nil message"
	reasonTruncated  = "truncated"
	reasonPackFailed = "pack failed"
	reasonTooLarge   = "too large"
)

// maxRRTTL is the largest TTL a record may carry. RFC 2181 §8: a TTL with the
// most significant bit set is to be treated as zero, not as a huge value.
const maxRRTTL = math.MaxInt32

// ttlBounds are the configured clamps on an entry's TTL; zero on a side means
// no clamp there.
type ttlBounds struct {
	min, max time.Duration
}

// clamp applies the bounds. It applies to TTL 0 too: an operator who sets a
// minimum wants even Consul's TTL-0 records held fresh that long.
func (b ttlBounds) clamp(ttl time.Duration) time.Duration {
	if b.min > 0 && ttl < b.min {
		ttl = b.min
	}
	if b.max > 0 && ttl > b.max {
		ttl = b.max
	}
	return ttl
}

// prepared is a reply the store policy accepted, in the form an item keeps.
type prepared struct {
	// data is the reply packed (ID 0, no OPT or TSIG, compressed), followed
	// by the offset in it of each record's TTL field, two bytes each,
	// big-endian. One slice for both is one allocation and one slice header
	// per entry less (issue 6). Never modified once made.
	data     []byte
	wireLen  uint16 // length of the packed reply at the start of data
	answerAt uint16 // where the answer section starts in the reply
	kind     Kind
	ttl      time.Duration // after clamps; may be 0 (stored already expired)
}

// wire returns the packed reply, without the TTL offsets behind it.
func (p *prepared) wire() []byte {
	return p.data[:p.wireLen:p.wireLen]
}

// prepare is the store policy: it decides whether a reply may be cached, and
// if so as what and for how long, and packs it into the form an item keeps.
// It is a pure function (no clock, no cache state) so that every rule can be
// checked by a table test. On refusal it returns a short reason and the zero
// prepared. m is not modified.
func prepare(m *dns.Msg, bounds ttlBounds) (prepared, string) {
	if m == nil {
		return prepared{}, reasonNilMessage
	}
	// A TC reply is a fragment of the real answer; cached, the fragment would
	// be served as if it were the whole RRset.
	if m.Truncated {
		return prepared{}, reasonTruncated
	}
	// Only NOERROR is stored. NXDOMAIN in particular is never cached, though
	// RFC 2308 §5 allows it: the product promises that a name that appears (a
	// new Consul service, say) is seen at once. SERVFAIL, REFUSED and the rest are
	// failures, and a failure must never replace a good entry.
	if m.Rcode != dns.RcodeSuccess {
		return prepared{}, "rcode " + dnswire.RcodeName(m.Rcode)
	}

	// A shallow copy is enough: only the header, the question and the list
	// of additional records change, and the records themselves are only read
	// (packed) here.
	stored := *m
	stored.Id = 0
	stored.Extra = withoutTransportRRs(m.Extra)

	kind := Positive
	if len(stored.Answer) == 0 {
		kind = NoData
	}
	ttl := bounds.clamp(replyTTL(&stored))

	// Packed with compression, as the resolver sends it, so the size check
	// is the real one and a reply that could never be written back is
	// refused here instead of failing on every hit.
	stored.Compress = true
	wire, err := stored.Pack()
	if err != nil {
		return prepared{}, reasonPackFailed
	}
	// Some records that unpack do not survive a pack (an SOA with empty
	// RDATA packs into one a reader rejects, found by FuzzCacheSet): such an
	// entry would reach every client, and the snapshot, as a message nobody
	// can read.
	if err := new(dns.Msg).Unpack(wire); err != nil {
		return prepared{}, reasonPackFailed
	}
	if len(wire) > dns.MaxMsgSize {
		return prepared{}, reasonTooLarge
	}
	answerAt, ttlOffsets, err := recordLayout(wire)
	if err != nil {
		return prepared{}, reasonPackFailed
	}
	return prepared{data: withTTLOffsets(wire, ttlOffsets), wireLen: uint16(len(wire)), answerAt: uint16(answerAt),
		kind: kind, ttl: ttl}, ""
}

// withoutTransportRRs returns s without the records that belong to one
// exchange rather than to the data: OPT (RFC 6891 §6.1.1, never cached) and
// TSIG (RFC 8945, signs one message and carries TTL 0). Left in, their TTL 0
// would also make every entry expire on arrival. s is not modified.
func withoutTransportRRs(s []dns.RR) []dns.RR {
	if !slices.ContainsFunc(s, isTransportRR) {
		return s
	}
	var kept []dns.RR
	for _, rr := range s {
		if isTransportRR(rr) {
			continue
		}
		kept = append(kept, rr)
	}
	return kept
}

func isTransportRR(rr dns.RR) bool {
	t := rr.Header().Rrtype
	return t == dns.TypeOPT || t == dns.TypeTSIG
}

// smallestTTL is the lowest TTL over all records of the given sections: an
// entry may not outlive any record in it (RFC 2181 §5.2 for one RRset; we
// apply it to the whole reply, as CoreDNS does). The caller has already
// removed OPT and TSIG. With no records at all it returns 0.
func smallestTTL(sections ...[]dns.RR) time.Duration {
	var smallest time.Duration
	found := false
	for _, section := range sections {
		for _, rr := range section {
			ttl := rrTTL(rr.Header().Ttl)
			if !found || ttl < smallest {
				smallest, found = ttl, true
			}
		}
	}
	return smallest
}

// replyTTL is how long a reply may be kept, before the clamps: the
// smallest TTL of its records, and for a negative answer (an SOA in the
// authority section, NODATA or NXDOMAIN, with or without a CNAME chain
// before it) at most the SOA's MINIMUM (RFC 2308 §5). A reply without
// answer records and without an SOA gets 0 (noDataTTL). OPT and TSIG must
// be gone already.
func replyTTL(m *dns.Msg) time.Duration {
	if len(m.Answer) == 0 {
		return noDataTTL(m.Ns)
	}
	ttl := smallestTTL(m.Answer, m.Ns, m.Extra)
	for _, rr := range m.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			ttl = min(ttl, rrTTL(soa.Minttl))
			break
		}
	}
	return ttl
}

// Shape returns a copy of m as a cache hit would show it had m just been
// stored: without OPT and TSIG, every TTL the entry's (replyTTL, clamped
// by MinTTL and MaxTTL, in whole seconds rounded up). The resolver sends
// an upstream's reply to the clients waiting for it through Shape, stored
// or not (NXDOMAIN, a TTL-0 answer), so the first answer and every later
// hit look alike (issue 11: one reply shape). m is not modified.
func (c *Cache) Shape(m *dns.Msg) *dns.Msg {
	return shape(m, c.policy.Load().bounds)
}

func shape(m *dns.Msg, bounds ttlBounds) *dns.Msg {
	out := m.Copy()
	out.Extra = withoutTransportRRs(out.Extra)
	ttl := bounds.clamp(replyTTL(out))
	setTTLs(shownTTL(ttl, 0), out.Answer, out.Ns, out.Extra)
	return out
}

// noDataTTL is how long a NODATA reply may be cached: RFC 2308 §5 says the
// lesser of the SOA record's own TTL and its MINIMUM field. Without an SOA
// there is nothing to bound it, and RFC 2308 §5 says such a reply SHOULD NOT
// be cached; we still keep it, at TTL 0, as stale material for serve-stale
// (RFC 8767), but it is never served fresh.
func noDataTTL(ns []dns.RR) time.Duration {
	for _, rr := range ns {
		soa, ok := rr.(*dns.SOA)
		if !ok {
			continue
		}
		return min(rrTTL(soa.Hdr.Ttl), rrTTL(soa.Minttl))
	}
	return 0
}

// rrTTL converts a wire TTL in seconds, treating values with the top bit
// set as 0 (RFC 2181 §8).
func rrTTL(seconds uint32) time.Duration {
	if seconds > maxRRTTL {
		return 0
	}
	return time.Duration(seconds) * time.Second
}
