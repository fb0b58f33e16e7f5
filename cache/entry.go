package cache

import (
	"encoding/binary"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// The entry builder (issue 22): every entry, whether its reply came as an
// upstream's bytes (PrepareAnswer, the resolver's settle) or from a
// snapshot (Load), is made here, from a
// dnswire view of the bytes, by dnswire's one encoder. So an entry is the
// same bytes whichever way its reply came, by construction.
//
// The entry is the reply with ID 0, the key's question (spelt as the reply
// spells it when that is the key's name in another letter case: its
// records' pointers then reach the question, as they did on the wire),
// every record but the additional section's OPT and TSIG, names compressed
// as miekg/dns compresses them. Stored behind the key's name, pointers into
// the question stay valid behind any spelling of it a client sends: every
// spelling of a name has its wire length.

// WireAnswer is an upstream reply prepared from its bytes (PrepareAnswer):
// what an entry keeps, and what the first answer to the clients waiting
// for it is written from, whether it is stored or not (NXDOMAIN, TTL 0).
type WireAnswer struct {
	prepared
	rcode     int
	truncated bool // TC: answered, never stored
}

// Rcode is the reply's rcode: NOERROR or NXDOMAIN.
func (a *WireAnswer) Rcode() int { return a.rcode }

// TTL is the entry's lifetime: the reply's, clamped.
func (a *WireAnswer) TTL() time.Duration { return a.ttl }

// prepareAnswer is the store policy and the entry builder: it reads raw, a
// reply to k's question, and makes the answer of NOERROR and NXDOMAIN
// replies, TTLs clamped by bounds; anything else it refuses with a short
// reason (rcode ..., malformed, too large). Which of the answers it makes
// may be stored is storable's call (NOERROR, not truncated). It is a pure
// function (no clock, no cache state), so every rule can be checked by a
// table test. raw is only read.
func prepareAnswer(k Key, raw []byte, bounds ttlBounds) (WireAnswer, string) {
	if len(raw) > dnswire.MaxMessageLen {
		return WireAnswer{}, reasonTooLarge // no DNS message is; a dns.Msg packed may be
	}
	var m dnswire.Msg
	if m.Parse(raw) != nil {
		return WireAnswer{}, reasonMalformed
	}
	// Only NOERROR is stored. NXDOMAIN in particular is never cached,
	// though RFC 2308 §5 allows it: the product promises that a name that
	// appears (a new Consul service, say) is seen at once; it is prepared,
	// to be answered (storable says no). SERVFAIL, REFUSED and the rest
	// are failures, and a failure must never replace a good entry.
	rcode := m.Rcode()
	if rcode != dns.RcodeSuccess && rcode != dns.RcodeNameError {
		return WireAnswer{}, "rcode " + dnswire.RcodeName(rcode)
	}

	var qbuf [dnswire.MaxNameLen]byte
	qname, ok := questionOf(&m, k, qbuf[:0])
	if !ok {
		return WireAnswer{}, reasonMalformed
	}
	var b dnswire.Builder
	b.Start(0, m.Flags)
	b.Question(qname, k.Type, k.Class)
	answerAt := b.Len()
	var ttlsInline [64]uint16
	ttls := ttlsInline[:0]
	checked := true
	smallest, found := time.Duration(0), false
	soa := -1 // the first SOA of the authority section
	for i := range m.Len() {
		rr := m.RR(i)
		section := m.SectionOf(i)
		if section == dnswire.Additional && (rr.Type == dnswire.TypeOPT || rr.Type == dnswire.TypeTSIG) {
			// Records of one exchange, not of the data: OPT (RFC 6891
			// §6.1.1, never cached) and TSIG (RFC 8945, signs one message,
			// TTL 0). Left in, their TTL 0 would also make every entry
			// expire on arrival.
			continue
		}
		ttls = append(ttls, uint16(b.Record(section, &m, i)))
		checked = checked && rr.Checked
		if section == dnswire.Authority && rr.Type == dns.TypeSOA && soa < 0 {
			soa = i
		}
		if ttl := rrTTL(m.TTL(i)); !found || ttl < smallest {
			smallest, found = ttl, true
		}
	}
	n, err := b.Finish()
	if err != nil || n > dns.MaxMsgSize {
		return WireAnswer{}, reasonTooLarge
	}
	data := b.AppendTo(make([]byte, 0, n+2*len(ttls)))
	wire := data[:n:n]
	if !checked {
		// A record whose rdata the view did not read through (a DS, an
		// SVCB) may be one miekg/dns refuses: such an entry would reach
		// every general-path client, and the snapshot, as a message
		// nobody can read.
		if new(dns.Msg).Unpack(wire) != nil {
			return WireAnswer{}, reasonMalformed
		}
	}
	kind := Positive
	if m.Counts[dnswire.Answer] == 0 {
		kind = NoData
	}
	ttl := replyTTL(&m, kind, smallest, found, soa, bounds.noData)
	for _, at := range ttls {
		data = binary.BigEndian.AppendUint16(data, at)
	}
	return WireAnswer{prepared: prepared{data: data, wireLen: uint16(len(wire)), answerAt: uint16(answerAt),
		kind: kind, ttl: bounds.clamp(ttl)}, rcode: rcode, truncated: m.Flags&dnswire.FlagTC != 0}, ""
}

// questionOf is the entry's question name for k: the reply's own, when it
// asks k's question in any letter case, else k's.
func questionOf(m *dnswire.Msg, k Key, dst []byte) ([]byte, bool) {
	var kbuf [dnswire.MaxNameLen]byte
	n, err := dns.PackDomainName(k.Name, kbuf[:], 0, nil, false)
	if err != nil {
		return nil, false
	}
	key := kbuf[:n]
	if m.QDCount == 1 && m.QType == k.Type && m.QClass == k.Class {
		if q := m.Question(dst); dnswire.EqualName(q, key) {
			return q, true
		}
	}
	return append(dst, key...), true
}

// replyTTL is how long a reply may be kept, before the clamps: the
// smallest TTL of its records (an entry may not outlive any record in
// it: RFC 2181 §5.2 for one RRset, applied to the whole reply as CoreDNS
// does), and for a negative answer (an SOA in the authority section,
// NODATA or NXDOMAIN, with or without a CNAME chain before it) at most the
// SOA's MINIMUM (RFC 2308 §5). A reply without answer records is bounded
// by its SOA alone: min(SOA TTL, MINIMUM).
//
// Without an SOA a NODATA has no TTL of its own, and RFC 2308 §5 says it
// SHOULD NOT be cached. It gets noData (cache.nodata_without_soa_ttl, 5 s
// by default as unbound's NORR_TTL), bounded by any record it carries.
// §5's reason is a loop between servers that ask each other, each
// caching the other's negative answer; a leaf cache is asked by stubs
// only, never by another resolver, so the loop cannot form, and what the
// rule would cost here is every getaddrinfo's AAAA half of an IPv4-only
// dnsmasq name (local=, host-record=) waiting on the site's DNS (issue
// 23: 451 of 460 queries to the shared DNS in four minutes, p50 88-110 ms
// against unbound's 0.5 ms). NXDOMAIN is never stored anyway.
func replyTTL(m *dnswire.Msg, kind Kind, smallest time.Duration, found bool, soa int, noData time.Duration) time.Duration {
	if soa < 0 {
		if kind == NoData {
			if found {
				return min(smallest, noData)
			}
			return noData
		}
		return smallest
	}
	minimum := rrTTL(m.SOAMinimum(soa))
	if kind == NoData {
		return min(rrTTL(m.TTL(soa)), minimum)
	}
	return min(smallest, minimum)
}
