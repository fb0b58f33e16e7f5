package resolver

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// tcpServer serves one TCP listener with towerd's own loop (issue 13), as
// udpServer does for UDP, instead of dns.Server, which allocates the length
// a client announces (up to 64 KiB) before reading it, sets no write
// deadline, has no connection cap and spins on EMFILE. Here:
//
//   - the connections of all of a Server's listeners share one cap
//     (tcpBudget); to admit a new one the connection that has waited
//     longest without bringing a whole query (idle, or slow to send one)
//     is closed, and with none waiting the new one is closed at once; a
//     connection that owes answers is not waiting;
//   - a connection waits idleTimeout for a query's first byte, then the rest
//     of the query must arrive within readTimeout (a stalled read closes it);
//   - a query announced longer than MaxTCPQuerySize closes the connection
//     before anything is allocated for it; the buffer is MaxTCPQuerySize;
//   - at most maxPipelined queries of a connection wait for answers at
//     once, and answers the socket cannot take are written within
//     writeTimeout, at most maxPendingBytes of them, so a client that
//     never reads holds a connection for that long at most;
//   - accept errors back off (EMFILE and ENFILE above all) instead of
//     spinning.
//
// Queries on one connection are pipelined (tcppipe.go): each is answered
// by the fast path (from the packet's bytes, as over UDP: a hit at once, a
// miss by its flight, written as it comes) or else by the general path
// (servePacket, ServeDNS) on the connection's own goroutine.
type tcpServer struct {
	ln       net.Listener
	budget   *tcpBudget
	fast     packetAnswerer // nil: no fast path (a handler other than ours)
	handler  dns.Handler    // the general path, panics already recovered
	onPanic  func(v any, stack []byte)
	onBadPkt func(err error)
	limits   tcpLimits

	stop     chan struct{} // closed by shutdown: the accept loop returns
	stopOnce sync.Once
	conns    sync.WaitGroup // this listener's connection goroutines
}

// tcpLimits are a TCP listener's timeouts, defaults filled in.
type tcpLimits struct {
	idle, read, write time.Duration
}

// TCP defaults (issue 13; unbound's incoming-num-tcp and dnsmasq's cap on
// TCP children are the anchors for the cap, RFC 7766 §6.2.3 for the idle
// timeout).
const (
	// DefaultTCPMaxConnections caps concurrent TCP connections when
	// Server.TCPMaxConnections is 0. A node's own clients rarely hold more
	// than a handful; TCP is the fallback after TC.
	DefaultTCPMaxConnections = 256
	// DefaultTCPReadTimeout bounds how long the rest of a query may take once
	// its first byte arrived.
	DefaultTCPReadTimeout = 2 * time.Second
	// DefaultTCPWriteTimeout bounds writing one reply.
	DefaultTCPWriteTimeout = 2 * time.Second
	// tcpReadBuffer is a connection's read buffer.
	tcpReadBuffer = 4096
	// MaxTCPQuerySize is the longest query towerd reads over TCP: one
	// question with an OPT record and its options fits many times over. A
	// longer length prefix closes the connection without reading on.
	MaxTCPQuerySize = 4096
)

// Why a TCP connection was closed: the reason label of
// towerd_tcp_connections_closed_total.
const (
	tcpClosedIdle         = iota // idle past the idle timeout
	tcpClosedCap                 // closed to admit a newer one while idle, or refused: the cap was full
	tcpClosedSlow                // closed to admit a newer one while its query was still arriving
	tcpClosedOversize            // announced a query over MaxTCPQuerySize
	tcpClosedStalled             // a query's bytes stopped coming
	tcpClosedWriteTimeout        // the client did not take a reply in time
	tcpClosedError               // a read or write failed, or the client left mid-query
	tcpClosedClient              // the client closed it between queries
	tcpClosedShutdown            // towerd stopped
	tcpClosedUnanswered          // closed to admit a newer one after no useful answer for query_timeout (tcpstarve.go)
	tcpClosedReasons
)

var tcpClosedLabels = [tcpClosedReasons]string{
	"idle", "cap", "slow", "oversize", "stalled", "write_timeout", "error", "client", "shutdown", "unanswered",
}

// Kinds of accept errors: the kind label of towerd_tcp_accept_errors_total.
const (
	acceptEMFILE = iota // the process is out of file descriptors
	acceptENFILE        // the system is
	acceptOther
	acceptErrorKinds
)

var acceptErrorLabels = [acceptErrorKinds]string{"emfile", "enfile", "other"}

// Accept back-off after an error: doubled each time, reset by a success
// (net/http's Server does the same).
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

func newTCPServer(ln net.Listener, budget *tcpBudget, handler dns.Handler, fast packetAnswerer,
	limits tcpLimits, onPanic func(any, []byte), onBadPkt func(error)) *tcpServer {
	return &tcpServer{ln: ln, budget: budget, fast: fast, handler: handler, limits: limits,
		onPanic: onPanic, onBadPkt: onBadPkt, stop: make(chan struct{})}
}

// serve accepts until shutdown; started is called once the loop runs.
func (t *tcpServer) serve(started func()) error {
	if started != nil {
		started()
	}
	var backoff time.Duration
	for {
		c, err := t.ln.Accept()
		if err != nil {
			select {
			case <-t.stop:
				return nil
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of descriptors (or any other failure): wait before trying
			// again; the connection waits in the backlog meanwhile. The fds
			// kept in reserve for upstreams and the admin server are not
			// this loop's to take.
			t.budget.acceptErrs[acceptErrorKind(err)].Add(1)
			backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
			timer := time.NewTimer(backoff)
			select {
			case <-timer.C:
			case <-t.stop:
				timer.Stop()
				return nil
			}
			continue
		}
		backoff = 0
		tc := t.budget.admit(t, c)
		if tc == nil {
			continue
		}
		go t.serveConn(tc)
	}
}

func acceptErrorKind(err error) int {
	switch {
	case errors.Is(err, syscall.EMFILE):
		return acceptEMFILE
	case errors.Is(err, syscall.ENFILE):
		return acceptENFILE
	}
	return acceptOther
}

// serveConn answers the queries of one connection until it is closed.
// Queries are pipelined (tcppipe.go): each is read and answered, or left
// to its flight, before the next is read, and the answers go out as they
// come.
func (t *tcpServer) serveConn(tc *tcpConn) {
	reason := tcpClosedError
	c := tc.conn
	p := newTCPPipe(c, t.limits.write, t.onPanic, t.budget, tc)
	defer func() {
		p.drain() // the answers owed go out first (or fail)
		if r, ok := p.closeReason(); ok {
			reason = r
		}
		t.budget.release(tc, reason)
	}()
	var from netip.AddrPort
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		from = a.AddrPort()
	}
	var prefix [2]byte
	var query []byte // MaxTCPQuerySize, allocated with the first query
	var out []byte
	var q plainQuery
	q.replier = p
	// Queries are read through a buffer: a client that sends several
	// without waiting (as stub resolvers and dnsperf do) costs one read
	// for all that arrived, not three per query. The deadlines are the
	// connection's, for whatever the buffer must wait for.
	rd := bufio.NewReaderSize(c, tcpReadBuffer)
	for {
		// Waiting (idle, then reading) with no answer owed: only then may
		// the cap close this connection for a newer one (park).
		if !p.park() {
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(t.limits.idle))
		if _, err := io.ReadFull(rd, prefix[:1]); err != nil {
			switch {
			case isTimeout(err) && p.owed():
				continue // not idle: answers are still owed
			case isTimeout(err):
				reason = tcpClosedIdle
			case errors.Is(err, io.EOF):
				reason = tcpClosedClient
			}
			return
		}
		if !p.reading() {
			return // closed for a newer connection or by shutdown meanwhile
		}
		_ = c.SetReadDeadline(time.Now().Add(t.limits.read))
		if _, err := io.ReadFull(rd, prefix[1:]); err != nil {
			reason = readFailure(err)
			return
		}
		n := int(binary.BigEndian.Uint16(prefix[:]))
		if n > MaxTCPQuerySize {
			reason = tcpClosedOversize
			return
		}
		if query == nil {
			query = make([]byte, MaxTCPQuerySize)
		}
		if _, err := io.ReadFull(rd, query[:n]); err != nil {
			reason = readFailure(err)
			return
		}
		if !p.answering() {
			return // its query came too slowly: closed for a newer connection
		}
		p.waitSlot()
		out = t.answer(p, out, query[:n], from, &q)
		if cap(out) > MaxTCPQuerySize {
			out = nil // a large answer's buffer is not kept for every connection
		}
	}
}

// readFailure is why a read inside a query failed.
func readFailure(err error) int {
	if isTimeout(err) {
		return tcpClosedStalled
	}
	return tcpClosedError
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// answer answers one query: by the fast path when it can (a hit written
// at once, a miss left to its flight, which writes its answer), else by
// the general path on this goroutine. The answer goes through the pipe's
// writer, which never waits. It returns the reply buffer for reuse.
func (t *tcpServer) answer(p *tcpPipe, out, pkt []byte, from netip.AddrPort, q *plainQuery) []byte {
	if t.fast != nil {
		if reply, ok := t.answerFast(append(out[:0], 0, 0), pkt, from, q); ok {
			if len(reply) > 2 { // else a wire miss: its flight writes the answer
				p.write(reply[2:])
			}
			return reply[:0]
		}
	}
	w := &tcpWriter{pipe: p, conn: p.conn, buf: out[:0], joined: q.joined}
	servePacket(t.handler, pkt, w, t.badPacket)
	return w.buf[:0]
}

// answerFast runs the fast path; a panic in it is reported and the query
// goes the general way, which answers SERVFAIL if it panics too.
func (t *tcpServer) answerFast(out, pkt []byte, from netip.AddrPort, q *plainQuery) (reply []byte, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if t.onPanic != nil {
				t.onPanic(v, debug.Stack())
			}
			reply, ok = nil, false
		}
	}()
	return t.fast.answerPacket(out, pkt, from, true, q)
}

func (t *tcpServer) badPacket(err error) {
	if t.onBadPkt != nil {
		t.onBadPkt(err)
	}
}

// shutdown stops accepting, closes the connections that wait for a query,
// lets the ones answering one finish it, and waits for them up to ctx;
// then it closes the rest.
func (t *tcpServer) shutdown(ctx context.Context) error {
	t.stopOnce.Do(func() { close(t.stop) })
	t.ln.Close()
	t.budget.closeOwned(t, false)
	done := make(chan struct{})
	go func() { t.conns.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		t.budget.closeOwned(t, true)
		<-done
		return ctx.Err()
	}
}

// tcpWriter is the dns.ResponseWriter of a general-path TCP query: its
// message goes out through the connection's pipe.
type tcpWriter struct {
	pipe   *tcpPipe
	conn   net.Conn
	buf    []byte
	joined *flight // the fast path's (plainQuery.joined)
}

var (
	_ dns.ResponseWriter = (*tcpWriter)(nil)
	_ flightJoiner       = (*tcpWriter)(nil)
)

func (w *tcpWriter) joinedFlight() *flight { return w.joined }

func (w *tcpWriter) LocalAddr() net.Addr  { return w.conn.LocalAddr() }
func (w *tcpWriter) RemoteAddr() net.Addr { return w.conn.RemoteAddr() }

func (w *tcpWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.PackBuffer(w.buf[:cap(w.buf)])
	if err != nil {
		return err
	}
	w.buf = b
	_, err = w.Write(b)
	return err
}

func (w *tcpWriter) Write(b []byte) (int, error) {
	if len(b) > dns.MaxMsgSize {
		return 0, dns.ErrBuf
	}
	w.pipe.write(b)
	return len(b), nil
}

func (w *tcpWriter) Close() error        { return w.conn.Close() }
func (w *tcpWriter) TsigStatus() error   { return nil }
func (w *tcpWriter) TsigTimersOnly(bool) {}
func (w *tcpWriter) Hijack()             {}
