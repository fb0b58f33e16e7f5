package resolver

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/dnswire"
	"github.com/towerd/towerd/upstream"
)

// The one resolution (issue 22): every flight, whoever waits for it (a
// ServeDNS client, a wire waiter of a UDP or TCP reader, nobody for a
// prefetch or a stale answer's refresh), starts the same way and ends in
// the same settle. The goroutine that made the flight packs the upstream
// query into a pooled buffer and sends the first attempt
// (Upstream.StartWire, upstream.Group's), and the reply comes back as
// bytes, already scrubbed for the zone less the zones configured below it.
// An answer of the zone's own is settled where it comes, on the
// upstream's attempt reader when the first attempt's reply is the first:
// the entry is made from its bytes (cache.PrepareAnswer, the one entry
// builder), stored or removed by rcode, and the wire waiters answered from
// it; no dns.Msg is made and no goroutine woken. A chain that leaves the
// zone is chased on a goroutine that may wait (chase.go: unpack, ask the
// target's zone, join), and its joined answer settled the same way.

// resolution is what a flight's resolution needs, kept in the flight.
type resolution struct {
	h        *Handler
	s        *settings // the configuration the flight was made under
	zone     Zone
	deadline time.Time // upstream.timeout from the start
	// asked is when the resolution began, by the handler's clock: a
	// failure is marked as of then (cache.MarkRefreshFailed).
	asked time.Time
	// search is what the resolution is to the search-list rules
	// (searchahead.go); round, the round a try started or a candidate
	// was asked by.
	search searchRole
	round  *searchRound
	// validate: the reply is validated before settle (validate.go).
	validate bool
}

// start starts the flight's resolution from the goroutine that made it
// (the caller of join or joinWire that got started): the query is packed
// and its first attempt sent before this returns, and the flight ends in
// ReceiveWire.
func (fl *flight) start() {
	// The flight is in the running set already: a panic here must end it,
	// or every later client of the question would join a resolution that
	// never answers. The upstream may still deliver a reply for an attempt
	// it sent before panicking; finish ignores a second ending.
	defer func() {
		if v := recover(); v != nil {
			fl.finish(fl.panicOutcome(v, debug.Stack()))
		}
	}()
	res := &fl.res
	// upstream.timeout as a deadline, not a context: see WireQuery.
	res.deadline = fl.f.clock.Now().Add(res.s.UpstreamTimeout)
	res.asked = res.s.Now()
	if res.search == searchTry {
		// The round goes before the try's own first attempt: a reply to
		// that may settle the flight before StartWire returns, and the
		// client's later try must find the round running, never not yet
		// begun (searchahead.go, rule 2).
		res.round = &searchRound{}
		res.h.searchAhead(res.s, fl.key, res.round)
	}
	res.validate = res.s.validates(fl.key)
	bp := queryBufs.Get().(*[]byte)
	query := appendUpstreamQuery((*bp)[:0], res.s.upstreamKey(fl.key, res.validate))
	res.zone.Upstream.StartWire(fl.call, upstream.WireQuery{Ctx: fl.f.ctx, Packed: query, Deadline: res.deadline,
		Below: res.zone.below}, fl)
	*bp = query[:0]
	queryBufs.Put(bp)
	f := fl.f
	f.mu.Lock()
	f.callStartedLocked(fl)
	closing := f.ctx.Err() != nil // close may have looked before it started
	f.mu.Unlock()
	if closing {
		fl.call.Kick()
	}
}

var _ upstream.WireReceiver = (*flight)(nil)

// ReceiveWire ends the flight with its resolution's reply. An answer of
// the zone's own, or a failure, is settled here, on whatever goroutine
// delivers it (the attempt reader's for a first reply: nothing here
// blocks); a chain to chase into another zone goes to a goroutine that may
// wait.
func (fl *flight) ReceiveWire(wr upstream.WireReply, err error) {
	if err != nil && fl.finishedPanic(err) {
		return
	}
	res := &fl.res
	if t := res.s.Tap; t != nil && wr.Raw != nil {
		tapForwarder(t, res, fl.key, wr)
	}
	if err != nil || (wr.Scrub.ChaseName == "" && !res.validate) {
		fl.finish(fl.settleRecovered(wr.Raw, wr.Server, err))
		return
	}
	raw := append([]byte(nil), wr.Raw...) // valid only during the call
	fl.f.workers.do(func() {
		var o outcome
		func() {
			defer fl.recoverInto(&o)
			ctx, cancel := context.WithDeadline(fl.f.ctx, res.deadline)
			defer cancel()
			reply, err := raw, error(nil)
			if wr.Scrub.ChaseName != "" {
				reply, err = res.h.chase(ctx, res.s, res.zone, fl.key, raw, wr.Server, wr.Scrub.ChaseName)
			}
			if err == nil && res.validate {
				reply, err = res.h.validated(ctx, res.s, fl.key, reply)
			}
			o = res.h.settle(res, fl.key, reply, wr.Server, err)
		}()
		fl.finish(o)
	})
}

// settleRecovered is settle with a panic turned into the flight's failure.
func (fl *flight) settleRecovered(raw []byte, server string, err error) (o outcome) {
	defer fl.recoverInto(&o)
	res := &fl.res
	return res.h.settle(res, fl.key, raw, server, err)
}

// recoverInto, deferred, turns a panic in a resolution into its failure.
func (fl *flight) recoverInto(o *outcome) {
	if v := recover(); v != nil {
		*o = fl.panicOutcome(v, debug.Stack())
	}
}

// finishedPanic ends the flight as a panic would when err says the
// upstream's side panicked. Apart from ReceiveWire, whose happy path
// would otherwise pay for pe's escape.
func (fl *flight) finishedPanic(err error) bool {
	var pe *upstream.PanicError
	if !errors.As(err, &pe) {
		return false
	}
	fl.finish(fl.panicOutcome(pe.Value, pe.Stack))
	return true
}

// settle is the one end of every resolution: raw, the reply's bytes (an
// answer scrubbed for the zone, or the joined answer of a chase), or err.
// The answer is prepared by the cache's entry builder and stored (NOERROR:
// every waiter then gets the reply as a hit right after storing shows
// it, TTLs clamped, RFC 2308's negative TTL: one reply shape, issue 11),
// or the entry removed (NXDOMAIN: an answer, not a failure, never cached,
// and an old entry for the name must not come back later as stale: the
// name is gone). A failure, or a reply the builder refuses (another rcode,
// a truncated one), marks the entry's refresh failed (RFC 8767 §4). A
// resolution the search-list rules made keeps its NXDOMAIN out of the
// cache, in their own table (searchSettled).
func (h *Handler) settle(res *resolution, key cache.Key, raw []byte, server string, err error) outcome {
	if err == nil {
		a, reason := h.cache.PrepareAnswer(key, raw)
		if reason == "" {
			switch a.Rcode() {
			case dns.RcodeSuccess:
				cutForNarrow(res.s, key, &a)
				if stored, reason := h.cache.SetWire(key, &a); !stored {
					h.log.Debug("not cached", "name", key.Name, "type", dns.TypeToString[key.Type], "reason", reason)
				}
			case dns.RcodeNameError:
				h.cache.Remove(key)
			}
			if res.search != searchNone {
				h.searchSettled(res, key, &a, server)
			}
			h.failures.forget(key)
			return outcome{wire: a, wireOK: true, server: server}
		}
		err = errUpstreamReply{reason}
	}
	h.cache.MarkRefreshFailed(key, res.asked)
	h.failures.remember(key, res.s.Now(), err)
	if res.search != searchNone {
		h.searchSettled(res, key, nil, server)
	}
	if !errors.Is(err, context.Canceled) {
		h.log.Debug("upstream failed", "zone", res.zone.Name, "name", key.Name,
			"type", dns.TypeToString[key.Type], "err", err)
	}
	return outcome{server: server, err: err}
}

// errUpstreamReply is a reply that is no answer: an rcode other than
// NOERROR, NXDOMAIN, SERVFAIL and REFUSED (upstream.RcodeError's), or one
// the entry builder refuses.
type errUpstreamReply struct{ reason string }

func (e errUpstreamReply) Error() string { return "upstream reply not used: " + e.reason }

// queryBufs recycles the buffers upstream queries are packed into.
var queryBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, 300)
	return &b
}}

// appendUpstreamQuery appends the question towerd sends for key, ID 0
// (each attempt writes its own): recursion desired, AD, the key's CD bit,
// and an OPT record with an EDNS buffer of 1232 bytes (the DNS flag day
// 2020 value, which avoids IP fragmentation) and the key's DO bit.
//
// AD is always set (RFC 6840 §5.7: AD in a query asks for AD in the reply
// without the DNSSEC records of DO), so a validating upstream's AD reaches
// the clients that ask for it, glibc's `options trust-ad` among them. The
// cache key has no AD bit: which client filled an entry must not decide
// what the next one sees; whether a client gets AD is the reply core's
// rule (replyShape.adOK).
func appendUpstreamQuery(dst []byte, key cache.Key) []byte {
	flags := dnswire.FlagRD | dnswire.FlagAD
	if key.CD {
		flags |= dnswire.FlagCD
	}
	var name [dnswire.MaxNameLen]byte
	n, _ := dnswire.AppendWireName(name[:0], key.Name) // a key's name is one (cache.NewKey)
	return dnswire.AppendQuery(dst, 0, flags, n, key.Type, key.Class, true, advertisedUDPSize, key.DO)
}

// ask resolves key through zone and waits for the reply: a chase's later
// steps (chase.go), on a goroutine that may wait.
func (h *Handler) ask(ctx context.Context, zone Zone, key cache.Key) (upstream.WireReply, error) {
	deadline, _ := ctx.Deadline()
	return upstream.Wait(zone.Upstream, upstream.WireQuery{Ctx: ctx, Packed: appendUpstreamQuery(nil, key),
		Deadline: deadline, Below: zone.below})
}
