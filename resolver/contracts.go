package resolver

import (
	"context"
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

// RecordSource answers questions from records pushed into memory (the Consul
// watch). Lookup returns ok=false for every question it does not cover, and
// the query then takes the normal path (cache, upstream). stale reports that
// the source has lost contact with its origin and serves its last known
// records; the answer is then counted and marked as stale.
//
// Covers tells, from a canonical name alone (lower case, fully qualified,
// only read during the call) and without allocating, whether Lookup might
// answer for it: the fast path answers from the cache only the names a
// source does not cover, so that a pushed record is never shadowed by a
// cached one.
type RecordSource interface {
	Lookup(q dns.Question) (m *dns.Msg, stale, ok bool)
	Covers(name []byte) bool
}

// HealthReporter is an upstream that tracks its servers' health
// (upstream.Group). A zone whose upstream reports it lets a client waiting
// with a stale answer have it as soon as every server is marked down
// (RFC 8767 §5), instead of after the client response timer. An upstream
// without it is treated as always up.
type HealthReporter interface {
	// AllDown reports whether every server is marked down now.
	AllDown() bool
	// AllDownSignal returns a channel closed once every server is marked
	// down; a new one is handed out after a server comes back.
	AllDownSignal() <-chan struct{}
}

// scrubbingExchanger is an upstream that scrubs its replies, says where a
// question's CNAME chain left its zone (upstream.Group, issue 11), and
// which of its servers replied: the resolver then chases the target
// through the zone that owns it (chase.go), and the query log and `towerd
// lookup` name the server (issue 15). An upstream without it is taken at
// its word and logged by its Address alone.
type scrubbingExchanger interface {
	ExchangeScrubbedFrom(ctx context.Context, m *dns.Msg) (reply *dns.Msg, server string, result upstream.ScrubResult, err error)
}

// wireExchanger is an upstream that hands back a reply needing no
// scrubbing as its bytes (upstream.Group, issue 17): the wire miss path
// (wiremiss.go) stores and answers it without a dns.Msg. Zones whose
// upstream lacks it keep the general path for their misses.
type wireExchanger interface {
	StartWire(c *upstream.WireCall, ctx context.Context, query []byte, deadline time.Time, recv upstream.WireReceiver)
}

var (
	_ upstream.Upstream  = (*upstream.Group)(nil)
	_ HealthReporter     = (*upstream.Group)(nil)
	_ scrubbingExchanger = (*upstream.Group)(nil)
	_ wireExchanger      = (*upstream.Group)(nil)
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
