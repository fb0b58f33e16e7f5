package resolver

import (
	"net"
	"net/netip"
	"time"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/upstream"
)

// The dnstap hook (issue 38): every client question and answer, and every
// upstream exchange that ended a resolution, copied to Config.Tap (the
// daemon's dnstap writer, cmd/towerd/internal/dnstap). The copy is made
// where the answer is observed (observe, the one call of every route) or,
// on the general path, where it is written (answer.write), from the bytes
// the client sent and gets. With no Tap a query pays one nil check of the
// settings it already loaded; with one, the Tap's copy of the bytes into
// its bounded queue, never a wait.

// Tap receives copies of DNS messages for dnstap. Its methods are called on
// the goroutine that answers (the fast path's reader among them): they must
// not block, and every slice in the exchange is valid only during the call.
type Tap interface {
	// Client is one client's question and towerd's answer to it.
	Client(e ClientExchange)
	// Forwarder is the upstream query that got the reply ending a
	// resolution, and that reply.
	Forwarder(e ForwarderExchange)
}

// ClientExchange is one client's question and its answer.
type ClientExchange struct {
	Client       netip.AddrPort
	TCP          bool
	Query        []byte // as the client sent it (the general path: as unpacked and packed again)
	Response     []byte // as it is written to the client
	QueryTime    time.Time
	ResponseTime time.Time
	// Source is what answered (Query.Source: cache, stale, upstream,
	// local, consul, search) and Zone the zone the question routes to.
	Source, Zone string
}

// ForwarderExchange is the upstream query whose reply ended a resolution,
// and that reply.
type ForwarderExchange struct {
	Server       netip.AddrPort
	TCP          bool
	Query        []byte
	Response     []byte
	QueryTime    time.Time // when the attempt that was answered was sent
	ResponseTime time.Time
	Zone         string
	// Hedge: the reply answered the hedge (upstream/hedge.go), a second
	// server asked because the first attempt was late.
	Hedge bool
}

// tapObserved hands the tap the exchange observe sees: on the fast path
// (r.reply set, the reply complete) at once; on the general path the
// answer is not written yet, so what answered is kept in r for
// answer.write, which has the bytes.
func tapObserved(t Tap, r *request, zone, source string, start, now time.Time) {
	r.tapSource, r.tapZone, r.tapStart = source, zone, start
	if r.reply == nil {
		return
	}
	t.Client(ClientExchange{Client: netip.AddrPortFrom(r.client, r.port), TCP: r.tcp, Query: r.pkt,
		Response: r.reply, QueryTime: start, ResponseTime: now, Source: source, Zone: zone})
}

// tapWritten is the general path's half of tapObserved: req packed, and
// reply, the bytes written (answer.write packs its dns.Msg for it, only
// with a Tap).
func (a answer) tapWritten(t Tap, reply []byte) {
	r := a.r
	if r == nil || r.tapSource == "" {
		return // not observed: no answer a client counts (Trace's own)
	}
	query, err := a.req.Pack()
	if err != nil {
		return
	}
	client := netip.AddrPortFrom(r.client, r.port)
	if ap, ok := addrPort(a.w.RemoteAddr()); ok {
		client = ap
	}
	t.Client(ClientExchange{Client: client, TCP: r.tcp, Query: query, Response: reply,
		QueryTime: r.tapStart, ResponseTime: a.s.Now(), Source: r.tapSource, Zone: r.tapZone})
}

// addrPort is a connection's remote address as an AddrPort.
func addrPort(a net.Addr) (netip.AddrPort, bool) {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.AddrPort(), true
	case *net.TCPAddr:
		return a.AddrPort(), true
	}
	return netip.AddrPort{}, false
}

// tapForwarder hands the tap the upstream exchange that ended a resolution:
// the query as appendUpstreamQuery sent it, with the ID of the attempt the
// reply answered, and the reply as it came (as scrubbed: Raw's rule).
func tapForwarder(t Tap, res *resolution, key cache.Key, wr upstream.WireReply) {
	server, err := netip.ParseAddrPort(wr.Server)
	if err != nil || len(wr.Raw) < 2 {
		return
	}
	bp := queryBufs.Get().(*[]byte)
	// The question as it went: with DO (and CD) when validated.
	query := appendUpstreamQuery((*bp)[:0], res.s.upstreamKey(key, res.validate))
	query[0], query[1] = wr.Raw[0], wr.Raw[1]
	t.Forwarder(ForwarderExchange{Server: server, TCP: wr.TCP, Query: query, Response: wr.Raw,
		QueryTime: wr.Sent, ResponseTime: time.Now(), Zone: res.zone.Name, Hedge: wr.Hedge})
	*bp = query[:0]
	queryBufs.Put(bp)
}
