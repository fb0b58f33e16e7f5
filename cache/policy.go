package cache

import (
	"fmt"
	"math"
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
	reasonTruncated = "truncated"
	reasonTooLarge  = "too large"
	reasonMalformed = "malformed"
	// reasonOverMaxBytes: the entry alone costs more than Config.MaxBytes.
	reasonOverMaxBytes = "larger than the cache's byte bound"
)

// maxRRTTL is the largest TTL a record may carry. RFC 2181 §8: a TTL with the
// most significant bit set is to be treated as zero, not as a huge value.
const maxRRTTL = math.MaxInt32

// ttlBounds are the configured rules of an entry's TTL: the clamps, zero on
// a side meaning no clamp there, and the TTL given to a NODATA without an
// SOA (replyTTL).
type ttlBounds struct {
	min, max time.Duration
	noData   time.Duration
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

// prepared is a reply the store policy accepted, in the form an item keeps
// (entry.go makes it).
type prepared struct {
	// data is the reply packed (ID 0, no OPT or TSIG, compressed), followed
	// by the offset in it of each record's TTL field, two bytes each,
	// big-endian, and then perhaps by the same two for its cut answer
	// (cut.go). One slice for both is one allocation and one slice header
	// per entry less (issue 6). Never modified once made.
	data     []byte
	wireLen  uint16 // length of the packed reply at the start of data
	answerAt uint16 // where the answer section starts in the reply
	kind     Kind
	// cutTag is the tag of the cut answer stored at the end of data (0:
	// none; cut.go). In the padding after kind: an item stays 64 bytes.
	cutTag uint16
	ttl    time.Duration // after clamps; may be 0 (stored already expired)
}

// wire returns the packed reply, without the TTL offsets behind it.
func (p *prepared) wire() []byte {
	return p.data[:p.wireLen:p.wireLen]
}

// rrTTL converts a wire TTL in seconds, treating values with the top bit
// set as 0 (RFC 2181 §8).
func rrTTL(seconds uint32) time.Duration {
	if seconds > maxRRTTL {
		return 0
	}
	return time.Duration(seconds) * time.Second
}

// storable says why a prepared answer is not stored, or "": only NOERROR
// is (NXDOMAIN is answered, never cached), and never a TC reply, which is
// a fragment of the real answer: cached, the fragment would be served as
// if it were the whole RRset.
func (a *WireAnswer) storable() string {
	switch {
	case a.truncated:
		return reasonTruncated
	case a.rcode != dns.RcodeSuccess:
		return "rcode " + dnswire.RcodeName(a.rcode)
	}
	return ""
}
