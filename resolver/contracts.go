package resolver

import (
	"net/netip"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/upstream"
)

// The contracts the resolver relies on, each named and checked at compile
// time (issue 16): renaming a method on the other side breaks the build
// instead of silently sending queries down a slower or blinder path.
// consul.Watcher's check (RecordSource) sits in contracts_test.go, because
// resolver/consul must not import the resolver.

// RecordSource answers questions from records held in memory (local data,
// the Consul watch's pushed records). Answer returns ok=false for every
// question it does not answer, and the query then takes the normal path
// (cache, upstream). stale reports that the source has lost contact with its
// origin and serves its last known records; the answer is then counted and
// marked as stale. why is what decided, in the source's words: with ok, the
// rule or data that answered ("hosts /etc/hosts", "domain_needed",
// "watch"); without, why a source the name belongs to left it to the cache
// and the upstreams ("" when it is none of the source's business). It goes
// into the query's observation (Query.Rule, Query.Passed) as it is, so that
// `towerd lookup` names what answered, not a guess made beside it (issue
// 25).
//
// Covers tells, from a canonical name alone (lower case, fully qualified,
// only read during the call) and without allocating, whether Answer might
// answer for it: the fast path answers from the cache only the names a
// source does not cover, so that a pushed record is never shadowed by a
// cached one.
type RecordSource interface {
	Answer(q dns.Question) (m *dns.Msg, stale bool, why string, ok bool)
	Covers(name []byte) bool
}

// RecordAppender is a RecordSource that also writes its answers as
// bytes, for the fast path (issue 34: every answer of the Consul watch).
// AppendAnswer appends to dst, which ends with the header and the
// question of name (canonical, only read during the call; class IN), the
// records Answer would give, when they fit in limit bytes of dst and the
// source may answer so: NOERROR, every name compressed as the general
// path packs Answer's records for the question as the client spelled it.
// counts are the records of the answer, authority and additional
// sections; stale is Answer's stale, every TTL then at most staleTTL (the
// general path's answer.records). cut, when not 0, asks for the answer
// as Consul's cut leaves it for a UDP client without EDNS under that tag
// (consulcut.NarrowTag), if the source decided that cut when it encoded
// the answer: cutDone says it wrote so (else it wrote the whole answer,
// which the resolver cuts). It reports Answer's why; ok false, dst
// unchanged, leaves the question to Answer. It must not allocate.
type RecordAppender interface {
	AppendAnswer(dst, name []byte, qtype uint16, limit int, staleTTL uint32, cut uint16) (
		out []byte, counts [3]uint16, stale, cutDone bool, why string, ok bool)
}

// Upstream is what a zone forwards to: the one contract between the
// resolver and its upstreams (issue 22), implemented by *upstream.Group.
// Every capability the resolver uses is in it, so a wrapper must provide
// them all: nothing is discovered by a type assertion that a wrapper
// would silently lose.
type Upstream interface {
	// StartWire starts one resolution (upstream.Group.StartWire): the
	// query packed, its reply scrubbed for the zone less the zones below
	// it (WireQuery.Below), handed to the receiver as bytes.
	StartWire(c *upstream.WireCall, q upstream.WireQuery, recv upstream.WireReceiver)
	// AllDown reports whether every server is marked down now. A client
	// waiting with a stale answer gets it as soon as every server is
	// down (RFC 8767 §5), instead of after the client response timer.
	AllDown() bool
	// AllDownSignal returns a channel closed once every server is marked
	// down; a new one is handed out after a server comes back.
	AllDownSignal() <-chan struct{}
	// RecoveredSince reports whether a server of the zone was marked up
	// again after t: a failure recheck that began before it ends, since
	// the upstream it spared is back.
	RecoveredSince(t time.Time) bool
	// Address names the upstream in logs.
	Address() string
}

var (
	_ Upstream         = (*upstream.Group)(nil)
	_ upstream.Starter = Upstream(nil)
)

// packetAnswerer is a dns.Handler that also answers queries from their
// bytes (the fast path). Server gives a UDP socket bound to one address a
// reader, and each TCP connection a loop, that try it first; a handler that
// wraps *Handler keeps the fast path by embedding it.
type packetAnswerer interface {
	dns.Handler
	answerPacket(dst, pkt []byte, from netip.AddrPort, tcp bool, q *plainQuery) ([]byte, bool)
}

var _ packetAnswerer = (*Handler)(nil)
