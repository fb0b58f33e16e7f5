package resolver

import (
	"net"
	"net/netip"
	"runtime/debug"
	"sync"
	"time"
	"unsafe"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/dnswire"
)

// The wire miss path (issue 17; TCP since issue 22): a plain query read
// by a UDP socket's reader or a TCP connection's loop whose question has no
// entry in the cache at all is not unpacked and handed to ServeDNS. The
// reader keeps the packet's bytes (a pooled copy) in a wire waiter and
// starts or joins the question's flight; the reader that starts it sends
// the first attempt itself (flight.start, resolution.go). When the flight
// ends (on the upstream's attempt reader for a first reply that is an
// answer of the zone's own), each wire waiter is answered from the
// prepared entry with the code and the bytes of a hit, written where the
// flight ends: to a UDP client by a raw non-blocking sendto
// (udpServer.sendMiss), to a TCP client by a raw non-blocking sendmsg on
// its connection (tcpPipe, which pipelines the connection's queries).
// Nothing is a dns.Msg on the way, unless the answer does not fit the
// client's size: it is then truncated by ServeDNS's code, on a goroutine
// of the flights' pool. General-path clients of the same question share
// the flight.
//
// The decisions are ServeDNS's, made in the same places: admission and
// the reply core (answerPacket, request.go), the miss decision (an entry
// the fast path cannot serve goes to ServeDNS; a full cap is the fast
// reject's), the client's query_timeout (SERVFAIL with EDE 22,
// the resolution going on to fill the cache), observe. TestWireMiss* and
// FuzzFastPath's miss half hold the answers to ServeDNS's.

// wireReplier is the socket side of the wire miss path: the UDP server
// whose reader took the query, a TCP connection (tcpPipe), and a test's
// recorder.
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

// wireWaiter is one client of the wire miss path waiting for a flight:
// its waiter (deadlines.go) has the query_timeout as its deadline.
type wireWaiter struct {
	waiter
	h       *Handler
	s       *settings // the configuration the query was admitted under
	zone    string
	replier wireReplier
	from    netip.AddrPort
	tcp     bool       // the query came over TCP: TCP's size limit
	start   time.Time  // by s.Now, for observe
	pkt     []byte     // the query's bytes, a copy
	q       plainQuery // the answer's scratch space (parsed again from pkt)
}

var waiterPool = sync.Pool{New: func() any { return &wireWaiter{pkt: make([]byte, 0, 512)} }}

func putWaiter(w *wireWaiter) {
	*w = wireWaiter{pkt: w.pkt[:0]}
	waiterPool.Put(w)
}

// missPacket is answerPacket's miss, for a question with no entry in the
// cache (notFresh looked): it starts or joins the flight for q's question
// with a wire waiter and reports true, or reports false, having changed
// nothing, when ServeDNS must take the query: the socket drains, or the
// flights turn it away (an entry was stored since, the cap is full). A
// search-list try may be answered at once with a held NXDOMAIN, as
// ServeDNS's miss decision would (searchahead.go).
func (h *Handler) missPacket(pkt []byte, from netip.AddrPort, q *plainQuery, name []byte, s *settings, zone Zone, start time.Time) bool {
	// A key aliasing name, for lookups only: joinWire copies it into a
	// flight it makes.
	k := cache.Key{Name: unsafe.String(&name[0], len(name)), Type: q.qtype, Class: q.qclass, DO: q.do, CD: q.cd()}
	if !q.replier.beginMiss() {
		return false
	}
	w := waiterPool.Get().(*wireWaiter)
	w.h, w.s, w.zone, w.replier, w.from, w.tcp, w.start = h, s, zone.Name, q.replier, from, q.tcp, start
	w.wire, w.deadline = w, h.flights.clock.Now().Add(s.QueryTimeout)
	w.pkt = append(w.pkt[:0], pkt...)
	search := s.searchRoleOf(k)
	if search != searchNone {
		if fl, ok := h.searchAnswer(s, k); ok {
			h.cache.CountMiss()
			h.answerWire(fl, w, false)
			return true
		}
	}
	fl, started, ok := h.flights.joinWire(k, s.MaxInflight, w, resolution{h: h, s: s, zone: zone, search: search})
	if !ok {
		q.replier.endMiss()
		putWaiter(w)
		return false
	}
	h.cache.CountMiss() // ServeDNS's lookup would have counted it
	if started {
		fl.start()
	}
	return true
}

// answerWire answers one wire waiter of fl: SERVFAIL when its query_timeout
// ran out (timedOut) or the resolution failed, else the reply, written from
// the prepared entry as a hit is, or by ServeDNS's code when it is no wire
// answer or does not fit the client's size.
func (h *Handler) answerWire(fl *flight, w *wireWaiter, timedOut bool) {
	general := false
	defer func() {
		if v := recover(); v != nil {
			w.replier.missPanicked(v, debug.Stack())
		}
		if !general {
			w.replier.endMiss()
			putWaiter(w)
		}
	}()
	q := &w.q
	if !q.parse(w.pkt) {
		return // it parsed when it came
	}
	q.client, q.port, q.pkt, q.tcp = w.from.Addr(), w.from.Port(), w.pkt, w.tcp
	q.qname = unsafe.String(&q.name[0], q.nameLen)
	s := w.s
	if !q.tcp && s.TrimUDP != nil {
		q.udpAnswers, q.trims = s.TrimUDP(q.name[:q.nameLen])
	}
	sh := s.replyShape(&q.request)
	bp := replyBufs.Get().(*[]byte)
	defer replyBufs.Put(bp)
	dst, _ := dnswire.StartReply((*bp)[:0], q.question)
	switch {
	case timedOut || fl.err != nil || (fl.msg == nil && !fl.wireOK):
		if !timedOut {
			q.upstream = fl.server // the server whose SERVFAIL or REFUSED ended it, if any
			sh.failEDE = bogusEDE(fl.err)
		}
		dst = h.servfailPacket(dst, 0, q, s, sh, w.zone, w.start)
	case fl.wireOK:
		reserve := 0
		if sh.opt {
			reserve = dnswire.OPTLen
		}
		var hit cache.WireHit
		var ok bool
		if dst, hit, ok = fl.wire.AppendRecords(dst, q.writeLimit(0, sh, reserve), q.cutTag(sh)); ok {
			var counts [3]uint16
			dst, counts, ok = q.cutAsConsul(dst, 0, sh, hit.Rcode, false, hit.Cut, [3]uint16{hit.Answer, hit.Ns, hit.Extra})
			hit.Answer, hit.Ns, hit.Extra = counts[0], counts[1], counts[2]
		}
		if !ok {
			general = true
			h.answerWireGeneral(fl, w)
			return
		}
		dst = sh.closeReply(dst, 0, q.id, hit, false)
		q.upstream = fl.server
		q.reply = dst
		h.observe(s, &q.request, w.zone, fl.answerSource(), hit.Rcode, w.start, false)
	default:
		general = true
		h.answerWireGeneral(fl, w)
		return
	}
	w.replier.sendMiss(dst, w.from)
	*bp = dst[:0]
}

// answerWireGeneral answers a wire waiter with ServeDNS's own code for a
// resolution's reply (unpacked request, answer.msg: the size limit's
// truncation), on a goroutine of the flights' pool: whoever ends a flight
// may be the upstream's attempt reader, which does nothing that allocates
// a dns.Msg. It ends the waiter.
func (h *Handler) answerWireGeneral(fl *flight, w *wireWaiter) {
	h.flights.workers.do(func() {
		defer func() {
			if v := recover(); v != nil {
				w.replier.missPanicked(v, debug.Stack())
			}
			w.replier.endMiss()
			putWaiter(w)
		}()
		req := new(dns.Msg)
		if req.Unpack(w.pkt) != nil {
			return
		}
		mw := &missWriter{replier: w.replier, to: w.from, tcp: w.tcp}
		var r request
		r.fromMsg(req, mw)
		r.upstream = fl.server
		a := w.s.answer(mw, req, &r)
		msg := fl.message()
		h.observe(w.s, &r, w.zone, fl.answerSource(), msg.Rcode, w.start, false)
		a.msg(msg, false)
	})
}

// missWriter is the dns.ResponseWriter of a wire waiter answered by
// ServeDNS's code.
type missWriter struct {
	replier wireReplier
	to      netip.AddrPort
	tcp     bool
}

var _ dns.ResponseWriter = (*missWriter)(nil)

func (w *missWriter) LocalAddr() net.Addr { return &net.UDPAddr{} }
func (w *missWriter) RemoteAddr() net.Addr {
	if w.tcp {
		return net.TCPAddrFromAddrPort(w.to)
	}
	return net.UDPAddrFromAddrPort(w.to)
}
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
