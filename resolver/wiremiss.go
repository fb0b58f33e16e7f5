package resolver

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/upstream"
)

// The wire miss path (issue 17): a plain query read by a UDP socket's reader
// whose question has no entry in the cache at all is not unpacked and
// handed to a goroutine of its own. The reader keeps the packet's bytes
// (a pooled copy) in a wire waiter and starts or joins the question's
// flight. The reader that starts it builds the upstream query into a
// pooled buffer and sends the first attempt itself (startWire,
// upstream.Group.StartWire); the flight ends in ReceiveWire, called with
// the reply's bytes (checked on the wire, found to need no scrubbing) by
// the upstream's attempt reader when the first attempt's reply is the
// first to come: it makes the entry from them (cache.PrepareWire, SetWire)
// and answers every wire waiter from that entry, with the code and the
// bytes of a hit. No goroutine is woken on the way, and nothing is a
// dns.Msg. A retransmission, TCP, a failure or the deadline run the
// resolution on a goroutine of the upstream's; what the wire checks
// decline (a CNAME chain, glue, a failure rcode, a truncated reply) takes
// the dns.Msg path on a goroutine that may wait, and the wire waiters get
// ServeDNS's answer from it; general-path clients of the same question
// share the flight and get its reply as a dns.Msg.
//
// The decisions are ServeDNS's, made in the same places: admission and
// the reply core (answerPacket, request.go), the miss decision (a stale
// entry, or any entry, goes to ServeDNS, which may serve it; a full cap is
// the fast reject's), the client's query_timeout (SERVFAIL with EDE 22,
// the resolution going on to fill the cache), observe. TestWireMiss* and
// FuzzFastPath's miss half hold the answers to ServeDNS's.

// wireReplier is the socket side of the wire miss path: the UDP server
// whose reader took the query, and a test's recorder.
type wireReplier interface {
	// beginMiss registers an answer to be sent later; false while the
	// socket drains (shutdown waits for what was registered).
	beginMiss() bool
	// sendMiss sends an answer to a client.
	sendMiss(b []byte, to netip.AddrPort)
	// endMiss ends what beginMiss began.
	endMiss()
	// missPanicked reports a panic while answering.
	missPanicked(v any, stack []byte)
}

// wireWaiter is one client of the wire miss path waiting for a flight.
type wireWaiter struct {
	h        *Handler
	s        *settings // the configuration the query was admitted under
	zone     string
	replier  wireReplier
	from     netip.AddrPort
	start    time.Time  // by s.Now, for observe
	deadline time.Time  // query_timeout, by the real clock as ServeDNS's timer
	pkt      []byte     // the query's bytes, a copy
	q        plainQuery // the answer's scratch space (parsed again from pkt)
	// fl is the flight waited for, heapIndex the waiter's place in
	// flights.deadlines; both guarded by flights.mu.
	fl        *flight
	heapIndex int
}

var waiterPool = sync.Pool{New: func() any { return &wireWaiter{pkt: make([]byte, 0, 512)} }}

func putWaiter(w *wireWaiter) {
	*w = wireWaiter{pkt: w.pkt[:0]}
	waiterPool.Put(w)
}

// missPacket is answerPacket's miss: it starts or joins the flight for q's
// question with a wire waiter and reports true, or reports false, having
// changed nothing, when ServeDNS must take the query: the zone's upstream
// cannot exchange bytes, the cache holds an entry for the question (fresh
// but too big, or stale: ServeDNS's lookup decides), the socket drains, or
// the flights turn it away.
func (h *Handler) missPacket(pkt []byte, from netip.AddrPort, q *plainQuery, name []byte, s *settings, zone Zone, start time.Time) bool {
	up, ok := zone.Upstream.(wireExchanger)
	if !ok {
		return false
	}
	// A key aliasing name, for lookups only (see rejectPacket).
	k := cache.Key{Name: unsafe.String(&name[0], len(name)), Type: q.qtype, Class: q.qclass, DO: q.do, CD: q.cd()}
	if h.cache.Has(k) || !q.replier.beginMiss() {
		return false
	}
	w := waiterPool.Get().(*wireWaiter)
	w.h, w.s, w.zone, w.replier, w.from, w.start = h, s, zone.Name, q.replier, from, start
	w.deadline = time.Now().Add(s.QueryTimeout)
	w.pkt = append(w.pkt[:0], pkt...)
	fl, started, ok := h.flights.joinWire(k, s.MaxInflight, w, wireResolution{h: h, s: s, zone: zone, up: up})
	if !ok {
		q.replier.endMiss()
		putWaiter(w)
		return false
	}
	h.cache.CountMiss() // ServeDNS's lookup would have counted it
	if started {
		fl.startWire()
	}
	return true
}

// joinWire adds w to the flight for key (which may alias a packet: it is
// only looked up), making one that will run res when none runs (started:
// the caller then calls its startWire). It reports false, having changed
// nothing, when a new flight is needed but the cache has an entry for key
// since the caller looked (a flight that just ended stored it: ServeDNS
// answers from it), the flights are closing, or limit flights run
// (ServeDNS's miss decision then answers).
func (f *flights) joinWire(key cache.Key, limit int, w *wireWaiter, res wireResolution) (fl *flight, started, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl, found := f.running[key]
	if !found {
		if f.cache.Has(key) || f.ctx.Err() != nil || f.inflight.Load() >= int64(limit) {
			return nil, false, false
		}
		// The flight's key is kept: a string of its own.
		key.Name = strings.Clone(key.Name)
		wf := &wireFlight{flight: flight{done: make(chan struct{}), started: time.Now(), f: f, key: key, wireRes: res}}
		fl = &wf.flight
		fl.wireCall = &wf.call
		f.addLocked(fl)
		started = true
	}
	if fl.waiters == nil {
		fl.waiters = fl.inline[:0]
	}
	fl.waiters = append(fl.waiters, w)
	w.fl = fl
	if f.deadlines.push(w) {
		f.expiry.Reset(time.Until(w.deadline))
	}
	return fl, started, true
}

// wireFlight is a flight of the wire miss path with its upstream call:
// one allocation for both, and none for the general path's flights.
type wireFlight struct {
	flight
	call upstream.WireCall
}

// wireResolution is the resolution of a flight the wire miss path starts:
// Handler.resolver's, with the query packed into a pooled buffer and a
// clean reply stored and answered as bytes.
type wireResolution struct {
	h        *Handler
	s        *settings
	zone     Zone
	up       wireExchanger
	deadline time.Time // upstream.timeout from the start
}

// startWire starts the flight's resolution from the reader that made the
// flight (joinWire): the query is packed and its first attempt sent before
// this returns, and the flight ends in ReceiveWire, on the upstream's
// attempt reader when the first reply is clean: no goroutine is woken for
// a plain miss (issue 17's hand-offs).
func (fl *flight) startWire() {
	// The flight is in the running set already: a panic here must end it,
	// or every later client of the question would join a resolution that
	// never answers. The upstream may still deliver a reply for an attempt
	// it sent before panicking; finish ignores a second ending.
	defer func() {
		if v := recover(); v != nil {
			fl.finish(fl.panicOutcome(v, debug.Stack()))
		}
	}()
	res := &fl.wireRes
	// upstream.timeout as a deadline, not a context: see ExchangeWire.
	res.deadline = time.Now().Add(res.s.UpstreamTimeout)
	bp := queryBufs.Get().(*[]byte)
	query := appendUpstreamQuery((*bp)[:0], fl.key)
	res.up.StartWire(fl.wireCall, fl.f.ctx, query, res.deadline, fl)
	*bp = query[:0]
	queryBufs.Put(bp)
	f := fl.f
	f.mu.Lock()
	fl.callStarted = true
	closing := f.ctx.Err() != nil // close may have looked before it started
	f.mu.Unlock()
	if closing {
		fl.wireCall.Kick()
	}
}

var _ upstream.WireReceiver = (*flight)(nil)

// ReceiveWire ends a wire flight with its resolution's reply: a clean one
// is prepared, stored and answered where it came (the attempt reader's
// goroutine, which must not block); what the wire store declines takes the
// dns.Msg path (unpack, scrub, chase) on a goroutine that may wait.
func (fl *flight) ReceiveWire(wr upstream.WireReply, err error) {
	if err != nil && fl.finishedPanic(err) {
		return
	}
	if o, ok := fl.wireOutcome(wr, err); ok {
		fl.finish(o)
		return
	}
	if wr.Raw == nil {
		// Called on the resolution's own goroutine.
		fl.finish(fl.msgOutcome(wr, err))
		return
	}
	wr.Raw = append([]byte(nil), wr.Raw...) // valid only during the call
	fl.f.workers.do(func() { fl.finish(fl.msgOutcome(wr, err)) })
}

// finishedPanic ends the flight as resolveRecovered would when err says
// the upstream's side panicked. Apart from ReceiveWire, whose happy path
// would otherwise pay for pe's escape.
func (fl *flight) finishedPanic(err error) bool {
	var pe *upstream.PanicError
	if !errors.As(err, &pe) {
		return false
	}
	fl.finish(fl.panicOutcome(pe.Value, pe.Stack))
	return true
}

// wireOutcome is the outcome of a clean reply, stored (NOERROR) or the
// entry removed (NXDOMAIN, as settle does); ok is false when the reply
// needs the dns.Msg path.
func (fl *flight) wireOutcome(wr upstream.WireReply, err error) (o outcome, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			o, ok = fl.panicOutcome(v, debug.Stack()), true
		}
	}()
	if err != nil || wr.Raw == nil || wr.Scrub.ChaseName != "" {
		return o, false // a failure, or a chain to chase into another zone
	}
	res, key := &fl.wireRes, fl.key
	h, s, zone := res.h, res.s, res.zone
	o.wire, o.wireOK = h.cache.PrepareWire(key, wr.Raw)
	if o.wireOK && o.wire.CNAMEs() > 0 {
		// The upstream kept the chain inside its zone; a target in a
		// zone configured below it is the router's to see, and the
		// chain is then cut and chased there (cutAtSubzone, on the
		// dns.Msg path).
		o.wireOK = o.wire.CNAMETargets(func(name []byte) bool {
			return s.router.routeCanonical(name).Name == zone.Name
		})
	}
	if !o.wireOK {
		// The store declines a shape the upstream's check passed: the
		// dns.Msg path, with the same outcome.
		return outcome{}, false
	}
	o.server = wr.Server
	switch o.wire.Rcode() {
	case dns.RcodeSuccess:
		if stored, reason := h.cache.SetWire(key, &o.wire); !stored {
			h.log.Debug("not cached", "name", key.Name, "type", dns.TypeToString[key.Type], "reason", reason)
		}
	case dns.RcodeNameError:
		h.cache.Remove(key) // as settle: NXDOMAIN is never cached
	}
	return o, true
}

// msgOutcome is the rare rest: the reply unpacked (when it came as bytes),
// scrubbed and chased across zones under a context with the deadline, and
// settled as ServeDNS's resolutions are.
func (fl *flight) msgOutcome(wr upstream.WireReply, err error) (o outcome) {
	defer fl.recoverInto(&o)
	res, key := &fl.wireRes, fl.key
	h, s, zone := res.h, res.s, res.zone
	var msg *dns.Msg
	if err == nil && wr.Raw != nil {
		msg = new(dns.Msg)
		if err = msg.Unpack(wr.Raw); err != nil {
			msg = nil
		}
	}
	ctx, cancel := context.WithDeadline(fl.f.ctx, res.deadline)
	defer cancel()
	reply, server, err := h.chase(ctx, s, zone, key, msg, wr.Server, wr.Scrub.ChaseName, err)
	return h.settle(zone, key, reply, server, err)
}

// queryBufs recycles the buffers upstream queries are packed into.
var queryBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, 300)
	return &b
}}

// appendUpstreamQuery appends the query upstreamQuery(key) packs, ID 0 (each
// attempt writes its own): RD, AD, the key's CD, one question, an OPT with
// towerd's buffer size and the key's DO. key.Name is a canonical name
// without escapes (the fast path's parser made it).
func appendUpstreamQuery(dst []byte, key cache.Key) []byte {
	flags := uint16(flagRD | flagAD)
	if key.CD {
		flags |= flagCD
	}
	dst = append(dst, 0, 0, byte(flags>>8), byte(flags), 0, 1, 0, 0, 0, 0, 0, 1)
	name := key.Name
	for name != "." && name != "" {
		i := 0
		for i < len(name) && name[i] != '.' {
			i++
		}
		dst = append(dst, byte(i))
		dst = append(dst, name[:i]...)
		name = name[min(i+1, len(name)):]
	}
	dst = append(dst, 0, byte(key.Type>>8), byte(key.Type), byte(key.Class>>8), byte(key.Class))
	var do byte
	if key.DO {
		do = 0x80
	}
	return append(dst, 0, byte(dns.TypeOPT>>8), byte(dns.TypeOPT), advertisedUDPSize>>8, advertisedUDPSize&0xFF,
		0, 0, do, 0, 0, 0)
}

// answerWire answers one wire waiter of fl: SERVFAIL when its query_timeout
// ran out (timedOut) or the resolution failed, else the reply, written from
// the prepared entry as a hit is, or by ServeDNS's code when it is no wire
// answer or does not fit the client's size.
func (h *Handler) answerWire(fl *flight, w *wireWaiter, timedOut bool) {
	defer func() {
		if v := recover(); v != nil {
			w.replier.missPanicked(v, debug.Stack())
		}
		w.replier.endMiss()
		putWaiter(w)
	}()
	q := &w.q
	if !q.parse(w.pkt) {
		return // it parsed when it came
	}
	q.client = w.from.Addr()
	q.qname = unsafe.String(&q.name[0], q.nameLen)
	s := w.s
	sh := s.replyShape(&q.request)
	bp := replyBufs.Get().(*[]byte)
	defer replyBufs.Put(bp)
	dst := append((*bp)[:0], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	dst = append(dst, q.question...)
	switch {
	case timedOut || fl.err != nil || (fl.msg == nil && !fl.wireOK):
		if !timedOut {
			q.upstream = fl.server // the server whose SERVFAIL or REFUSED ended it, if any
		}
		dst = h.servfailPacket(dst, 0, q, s, sh, w.zone, w.start)
	case fl.wireOK:
		reserve := 0
		if sh.opt {
			reserve = optLen
		}
		var hit cache.WireHit
		var ok bool
		if dst, hit, ok = fl.wire.AppendRecords(dst, sh.limit-reserve); !ok {
			h.answerWireGeneral(fl, w)
			return
		}
		extra := hit.Extra
		if sh.opt {
			extra++
			dst = appendOPT(dst, sh.do, 0)
		}
		putHeader(dst, q.id, sh.header(hit.Rcode, hit.AuthenticatedData), hit.Answer, hit.Ns, extra)
		q.upstream = fl.server
		h.observe(s, &q.request, w.zone, SourceUpstream, hit.Rcode, w.start, false)
	default:
		h.answerWireGeneral(fl, w)
		return
	}
	w.replier.sendMiss(dst, w.from)
	*bp = dst[:0]
}

// answerWireGeneral answers a wire waiter with ServeDNS's own code for a
// resolution's reply: unpacked request, answer.msg.
func (h *Handler) answerWireGeneral(fl *flight, w *wireWaiter) {
	req := new(dns.Msg)
	if req.Unpack(w.pkt) != nil {
		return
	}
	mw := &missWriter{replier: w.replier, to: w.from}
	var r request
	r.fromMsg(req, mw)
	r.upstream = fl.server
	a := answer{w: mw, req: req, sh: w.s.replyShape(&r), s: w.s}
	msg := fl.message()
	h.observe(w.s, &r, w.zone, SourceUpstream, msg.Rcode, w.start, false)
	a.msg(msg, false)
}

// missWriter is the dns.ResponseWriter of a wire waiter answered by
// ServeDNS's code.
type missWriter struct {
	replier wireReplier
	to      netip.AddrPort
}

var _ dns.ResponseWriter = (*missWriter)(nil)

func (w *missWriter) LocalAddr() net.Addr  { return &net.UDPAddr{} }
func (w *missWriter) RemoteAddr() net.Addr { return net.UDPAddrFromAddrPort(w.to) }
func (w *missWriter) WriteMsg(m *dns.Msg) error {
	bp := replyBufs.Get().(*[]byte)
	defer replyBufs.Put(bp)
	b, err := m.PackBuffer((*bp)[:cap(*bp)])
	if err != nil {
		return err
	}
	w.replier.sendMiss(b, w.to)
	return nil
}
func (w *missWriter) Write(b []byte) (int, error) {
	w.replier.sendMiss(b, w.to)
	return len(b), nil
}
func (w *missWriter) Close() error        { return nil }
func (w *missWriter) TsigStatus() error   { return nil }
func (w *missWriter) TsigTimersOnly(bool) {}
func (w *missWriter) Hijack()             {}
