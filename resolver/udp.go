package resolver

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
	"github.com/towerd/towerd/resolver/udpio"
)

// udpServer serves one bound UDP socket itself rather than through
// dns.Server, so that a cache hit is answered by the goroutine that reads the
// socket, from the packet's bytes into a reused buffer
// (Handler.answerPacket): no goroutine, no dns.Msg and no allocation per
// hit. Every other packet is copied and goes the general way on its own
// goroutine, as dns.Server would run it: header check (AcceptRequest),
// unpack, handler.
//
// It is used for sockets bound to one address. A socket bound to a wildcard
// address must answer from the address each query was sent to, which
// dns.Server does with control messages; such sockets stay with dns.Server.
type udpServer struct {
	conn     *net.UDPConn   // the socket as handed over; closed at shutdown
	fast     packetAnswerer // nil: no fast path (a handler other than ours)
	handler  dns.Handler    // the general path, panics already recovered
	onPanic  func(v any, stack []byte)
	onBadPkt func(err error)

	// closing: shutdown began, the reader stops at its next read (the
	// datagrams still queued in the socket stay there, for the next
	// process when systemd holds the socket). The reader answers the batch
	// it already read, misses too (issue 32: dropping them lost queries at
	// every restart), and shutdown waits for it (readerDone) before
	// drained is set: then no general-path query starts. mu orders
	// slow.Add against shutdown's slow.Wait for any caller besides the
	// reader.
	mu         sync.Mutex
	closing    atomic.Bool
	drained    atomic.Bool
	serving    atomic.Bool    // serve was called
	readerDone chan struct{}  // closed when serve returns
	slow       sync.WaitGroup // general-path queries being answered
	workers    *workers       // their goroutines

	// fd is the socket's descriptor for sendMiss's raw sendto, -1 once
	// shutdown closes the socket (fdMu orders the two: a descriptor
	// number is reused at once).
	fdMu sync.RWMutex
	fd   int
}

// One goroutine reads each socket and answers the hits itself. More readers
// (each on a dup of the socket, so their reads would not queue on one
// runtime lock) were measured and cost more: every datagram woke each of
// them, one read it and the others went back to sleep (make bench, issue 6;
// figures in docs/benchmarks.md).

func newUDPServer(conn *net.UDPConn, handler dns.Handler, fast packetAnswerer, onPanic func(any, []byte), onBadPkt func(error)) *udpServer {
	u := &udpServer{conn: conn, fast: fast, handler: handler, onPanic: onPanic, onBadPkt: onBadPkt, workers: newWorkers(), fd: -1,
		readerDone: make(chan struct{})}
	if rc, err := conn.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { u.fd = int(fd) })
	}
	return u
}

// serve reads until shutdown. started is called once the reader runs.
func (u *udpServer) serve(started func()) error {
	u.serving.Store(true)
	defer close(u.readerDone)
	if started != nil {
		started()
	}
	return u.read()
}

// read is the reader's loop; it returns nil once shutdown began.
func (u *udpServer) read() error {
	io, err := udpio.New(u.conn)
	if err != nil {
		return err
	}
	// One reply buffer per batch slot: a queued reply stays put until the
	// batch is flushed. They start small and keep what they grow to.
	var out [udpio.Batch][]byte
	for i := range out {
		out[i] = make([]byte, 0, 4096)
	}
	var q plainQuery
	q.replier = u
	answer := func(n int) (stop bool) {
		u.answerBatch(io, &out, &q, n)
		// Checked per batch: under load the loop may never wait in the
		// poller, where shutdown's read deadline would stop it.
		return u.closing.Load()
	}
	for {
		err := io.ReadLoop(answer)
		if u.closing.Load() {
			return nil
		}
		if errors.Is(err, net.ErrClosed) {
			return err
		}
		// Anything else (a deadline not shutdown's, an error such as
		// ECONNREFUSED left behind by an ICMP message, which concerns one
		// earlier peer, not the socket): go on reading.
	}
}

// answerBatch answers the n datagrams the reader just read: a hit into its
// slot of out, queued and sent with the others in one flush; anything else
// copied to the general path.
func (u *udpServer) answerBatch(io *udpio.PacketIO, out *[udpio.Batch][]byte, q *plainQuery, n int) {
	for i := range n {
		pkt, from := io.Packet(i)
		if u.fast != nil {
			if reply, ok := u.answerFast(out[i][:0], pkt, from, q); ok {
				if len(reply) > 0 { // else a wire miss: its flight answers
					out[i] = reply[:0]
					io.Queue(reply, from)
				}
				continue
			}
		}
		u.mu.Lock()
		if u.drained.Load() {
			u.mu.Unlock()
			continue // cannot happen: shutdown waits for this reader
		}
		u.slow.Add(1)
		u.mu.Unlock()
		general, joined := append([]byte(nil), pkt...), q.joined
		u.workers.do(func() { u.serveGeneral(general, from, joined) })
	}
	_ = io.Flush() // a client gone is not our error
}

// answerFast runs the fast path; a panic in it is reported and the packet
// goes the general way, which answers SERVFAIL if it panics too.
func (u *udpServer) answerFast(out, pkt []byte, from netip.AddrPort, q *plainQuery) (reply []byte, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if u.onPanic != nil {
				u.onPanic(v, debug.Stack())
			}
			reply, ok = nil, false
		}
	}()
	return u.fast.answerPacket(out, pkt, from, false, q)
}

// serveGeneral answers one packet that the fast path declined, joined to
// the flight it joined, if any (plainQuery.joined).
func (u *udpServer) serveGeneral(pkt []byte, from netip.AddrPort, joined *flight) {
	defer u.slow.Done()
	servePacket(u.handler, pkt, &udpWriter{conn: u.conn, to: from, joined: joined}, u.badPacket)
}

// servePacket does with one packet what miekg/dns's Server.serveDNS
// (v1.1.73) does before the handler: a header that cannot be read is dropped
// (and counted); the header goes to AcceptRequest; a rejected request gets
// FORMERR (NOTIMP for other opcodes) built from its header alone; one that
// does not unpack is counted and gets FORMERR too; an accepted one goes to
// the handler. FuzzServeDNS runs it too.
func servePacket(h dns.Handler, pkt []byte, w dns.ResponseWriter, onBad func(error)) {
	dh, ok := dnswire.ReadHeader(pkt)
	if !ok {
		onBad(dns.ErrShortRead)
		return
	}
	action := acceptHeader(dh.Flags, int(dh.QDCount))
	switch action {
	case dns.MsgIgnore:
		return
	case dns.MsgAccept:
		req := new(dns.Msg)
		err := req.Unpack(pkt)
		if err == nil {
			h.ServeDNS(w, req)
			return
		}
		onBad(err)
		action = dns.MsgReject
	}
	// The reply miekg/dns's server makes of the header alone: the
	// request's flags with QR set and Z cleared, no question; with an OPT
	// when the request had one (RFC 6891 §7: a responder that sees an OPT
	// in the request puts one in its reply, FORMERR and NOTIMP included;
	// issue 34: a FORMERR to an EDNS query with no question carried none).
	rcode := dns.RcodeFormatError
	if action == dns.MsgRejectNotImplemented {
		rcode = dns.RcodeNotImplemented
	}
	do, edns := queryOPT(pkt)
	var buf [dnswire.HeaderLen + dnswire.OPTLen]byte
	_, _ = w.Write(dnswire.AppendEmptyReply(buf[:0], nil, dnswire.Reply{ID: dh.ID, Flags: (dh.Flags | dnswire.FlagQR) &^ dnswire.FlagZ,
		Rcode: rcode, EDNS: edns, UDPSize: advertisedUDPSize, DO: do}))
}

// queryOPT reports whether the query in pkt carries an OPT record the
// view can find, and its DO bit: a header-only query, one with no
// question, one with a question; not one with several (the view reads
// one question at most).
func queryOPT(pkt []byte) (do, ok bool) {
	var m dnswire.Msg
	if m.Parse(pkt) != nil || m.OPT < 0 {
		return false, false
	}
	return m.DO(), true
}

// beginMiss, sendMiss, endMiss and missPanicked make the socket a
// wireReplier: a wire miss counts as a general-path query being answered,
// so shutdown waits for it as for them.
func (u *udpServer) beginMiss() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.drained.Load() {
		return false
	}
	u.slow.Add(1)
	return true
}

// sendMiss may be called on the upstream's attempt reader, which must not
// wait (upstream.WireReceiver): the reply goes out with one raw,
// non-blocking sendto, and only when the send buffer is full does a
// goroutine of the socket's pool wait to write it (one per answer, and
// answers are bounded by the in-flight cap and its waiters).
func (u *udpServer) sendMiss(b []byte, to netip.AddrPort) {
	if !udpio.RawSend {
		_, _ = u.conn.WriteToUDPAddrPort(b, to) // the client is gone; nothing to do about it
		return
	}
	u.fdMu.RLock()
	sent := u.fd >= 0 && udpio.SendNow(u.fd, b, to)
	u.fdMu.RUnlock()
	if sent {
		return
	}
	b = append([]byte(nil), b...) // the caller's buffer is reused
	u.slow.Add(1)                 // shutdown waits for it as for the answer
	u.workers.do(func() {
		defer u.slow.Done()
		_, _ = u.conn.WriteToUDPAddrPort(b, to) // the client is gone; nothing to do about it
	})
}

func (u *udpServer) endMiss() { u.slow.Done() }

func (u *udpServer) missPanicked(v any, stack []byte) {
	if u.onPanic != nil {
		u.onPanic(v, stack)
	}
}

var _ wireReplier = (*udpServer)(nil)

func (u *udpServer) badPacket(err error) {
	if u.onBadPkt != nil {
		u.onBadPkt(err)
	}
}

// shutdown stops the readers and waits, up to ctx, for general-path queries
// being answered; then the socket is closed.
func (u *udpServer) shutdown(ctx context.Context) error {
	u.closing.Store(true)
	u.conn.SetReadDeadline(time.Unix(1, 0)) // wakes the blocked read
	var err error
	// The reader answers what it read (and flushes its replies) before
	// the socket closes under it. One that starts only now reads nothing:
	// the deadline has passed.
	if u.serving.Load() {
		select {
		case <-u.readerDone:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	u.mu.Lock()
	u.drained.Store(true)
	u.mu.Unlock()
	done := make(chan struct{})
	go func() { u.slow.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	u.workers.stop()
	u.fdMu.Lock()
	u.fd = -1
	u.fdMu.Unlock()
	u.conn.Close()
	return err
}

// udpWriter is the dns.ResponseWriter of a general-path UDP query.
type udpWriter struct {
	conn   *net.UDPConn
	to     netip.AddrPort
	joined *flight // the fast path's (plainQuery.joined)
}

var (
	_ dns.ResponseWriter = (*udpWriter)(nil)
	_ flightJoiner       = (*udpWriter)(nil)
)

func (w *udpWriter) joinedFlight() *flight { return w.joined }

func (w *udpWriter) LocalAddr() net.Addr  { return w.conn.LocalAddr() }
func (w *udpWriter) RemoteAddr() net.Addr { return net.UDPAddrFromAddrPort(w.to) }

// replyBufs recycles the buffers general-path replies are packed into: the
// socket copies the bytes, so none outlives its WriteMsg (one allocation
// less per answer, issue 17).
var replyBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, maxUDPReplyBuf)
	return &b
}}

// maxUDPReplyBuf is the size of a pooled reply buffer; a larger reply gets
// a buffer of its own, which is not kept.
const maxUDPReplyBuf = 4096

func (w *udpWriter) WriteMsg(m *dns.Msg) error {
	bp := replyBufs.Get().(*[]byte)
	defer replyBufs.Put(bp)
	b, err := m.PackBuffer((*bp)[:cap(*bp)])
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func (w *udpWriter) Write(b []byte) (int, error) { return w.conn.WriteToUDPAddrPort(b, w.to) }

func (w *udpWriter) Close() error        { return nil }
func (w *udpWriter) TsigStatus() error   { return nil }
func (w *udpWriter) TsigTimersOnly(bool) {}
func (w *udpWriter) Hijack()             {}
