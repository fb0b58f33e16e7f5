package resolver

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
	"github.com/towerd/towerd/resolver/udpio"
)

// A TCP connection's queries are pipelined (issue 22; RFC 7766 §6.2.1.1:
// a server may process the queries of one connection concurrently and
// send the answers in any order, each carrying its query's ID). The
// connection's goroutine reads one query after the other without waiting
// for their answers: a hit is written at once, a miss waits for its
// flight as a wire waiter whose answer is written by whoever ends the
// flight, straight to the socket (tcpPipe.write: one raw non-blocking
// sendmsg), so an answer costs no goroutine woken and no hand-off. Up to
// maxPipelined queries of a connection wait at once (unbound's limit on
// the requests in progress per TCP connection); past it the goroutine
// reads nothing more until one is answered.
//
// A write the socket cannot take whole (its send buffer full: a client
// slow to read) leaves the rest in the connection's pending bytes, which
// one goroutine writes with the write timeout while every later answer
// queues behind; the reader reads no new query until they are out, and a
// client that lets more than maxPendingBytes pile up, or does not take
// them within the timeout, loses the connection (write_timeout).

// maxPipelined is how many of one connection's queries may wait for
// their answers at once.
const maxPipelined = 32

// maxPendingBytes bounds the answers one connection may owe its client
// behind a full send buffer: all of maxPipelined answers of a usual size,
// and one of the largest.
const maxPendingBytes = 128 << 10

// errSlowReader is a connection whose client did not take its answers.
var errSlowReader = errors.New("client does not read its answers")

// tcpPipe is one connection's side of the pipelining: its writer and its
// queries in flight. It is the connection's wireReplier.
type tcpPipe struct {
	conn    net.Conn
	rc      syscall.RawConn // nil: every write goes through the flusher
	timeout time.Duration   // the write timeout
	report  func(v any, stack []byte)
	budget  *tcpBudget
	tc      *tcpConn

	mu   sync.Mutex
	cond sync.Cond // signalled when inflight drops or a flush ends
	// inflight counts the wire waiters that have not ended; parked says
	// the connection's goroutine waits for (or reads) a query: with none
	// in flight, the connection is waiting (tcpBudget).
	inflight int
	parked   bool
	// pending are framed answers the socket did not take yet, written by
	// one goroutine while flushing; spare is the buffer it gives back.
	pending, spare []byte
	flushing       bool
	err            error // a write failed: the connection is closing
	stopped        bool  // went idle while its listener stops: closed

	// The raw send's arguments and result (tcpio_raw.go), fields so the
	// function handed to rc.Write is made once per connection, and the
	// length prefix it sends.
	send   sendArgs
	prefix [2]byte
}

func newTCPPipe(c net.Conn, timeout time.Duration, report func(any, []byte), budget *tcpBudget, tc *tcpConn) *tcpPipe {
	p := &tcpPipe{conn: c, timeout: timeout, report: report, budget: budget, tc: tc}
	p.cond.L = &p.mu
	if sc, ok := c.(syscall.Conn); ok && udpio.RawSend {
		if rc, err := sc.SyscallConn(); err == nil {
			p.rc = rc
			p.send.fn = p.send.call
		}
	}
	return p
}

// write sends one message (its length prefix and msg) to the client,
// from any goroutine, without waiting: straight to the socket when
// nothing is pending, else behind what is. A message past the pending
// bound fails the connection.
func (p *tcpPipe) write(msg []byte) {
	if h, ok := dnswire.ReadHeader(msg); p.tc != nil && ok && h.Rcode() != dns.RcodeServerFailure {
		p.tc.useful.Add(1) // an answer the client can use (tcpstarve.go)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return
	}
	binary.BigEndian.PutUint16(p.prefix[:], uint16(len(msg)))
	head, body := p.prefix[:], msg
	if !p.flushing && p.rc != nil {
		n, err := p.send.now(p.rc, head, body)
		if err != nil {
			p.failLocked(err)
			return
		}
		if n >= len(head)+len(body) {
			return
		}
		if n >= len(head) {
			head, body = nil, body[n-len(head):]
		} else {
			head = head[n:]
		}
	}
	if len(p.pending)+len(head)+len(body) > maxPendingBytes {
		p.failLocked(errSlowReader)
		return
	}
	p.pending = append(append(p.pending, head...), body...)
	if !p.flushing {
		p.flushing = true
		go p.flush()
	}
}

// flush writes the pending bytes, within the write timeout each time it
// takes them, until none are left.
func (p *tcpPipe) flush() {
	for {
		p.mu.Lock()
		buf := p.pending
		if len(buf) == 0 || p.err != nil {
			p.flushing = false
			p.cond.Broadcast()
			p.mu.Unlock()
			return
		}
		p.pending = p.spare[:0]
		p.mu.Unlock()
		_ = p.conn.SetWriteDeadline(time.Now().Add(p.timeout))
		_, err := p.conn.Write(buf)
		p.mu.Lock()
		p.spare = buf[:0]
		if err != nil {
			p.failLocked(err)
		}
		p.mu.Unlock()
	}
}

// failLocked ends the connection's writing with err and closes it: its
// goroutine's read fails and it leaves.
func (p *tcpPipe) failLocked(err error) {
	if p.err == nil {
		p.err = err
		p.pending, p.spare = nil, nil
		_ = p.conn.Close()
	}
	p.cond.Broadcast()
}

// closeReason is why the connection closes when its writing failed (a
// failure of its own: reading may have failed for it).
func (p *tcpPipe) closeReason() (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.stopped:
		return tcpClosedShutdown, true
	case p.err == nil:
		return 0, false
	case isTimeout(p.err) || errors.Is(p.err, errSlowReader):
		return tcpClosedWriteTimeout, true
	}
	return tcpClosedError, true
}

// park is the connection's goroutine about to wait for a query: it waits
// until pending answers are written (a client that reads nothing must not
// have more queries read), and, when no answer is owed, marks the
// connection waiting: only then may the cap close it for a newer one
// (tcpBudget; reading a query it still waits, as a slow sender). False:
// the connection is to close (a write failed, or the listener stops).
func (p *tcpPipe) park() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.flushing && p.err == nil {
		p.cond.Wait()
	}
	if p.err != nil {
		return false
	}
	p.parked = true
	if p.inflight == 0 && !p.budget.setIdle(p.tc) {
		p.stopped = true
		return false
	}
	return true
}

// reading is the connection's goroutine with a query's first byte: still
// waiting until the query is whole; false when towerd closed it meanwhile.
func (p *tcpPipe) reading() bool { return p.budget.setReading(p.tc) }

// answering is the connection's goroutine with a whole query: no longer
// waiting, its slot its own; false when towerd closed it meanwhile (its
// query came too slowly).
func (p *tcpPipe) answering() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parked = false
	return p.budget.setAnswering(p.tc)
}

// owed reports whether answers are still owed to the client.
func (p *tcpPipe) owed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inflight > 0
}

// waitSlot waits until fewer than maxPipelined answers are owed.
func (p *tcpPipe) waitSlot() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.inflight >= maxPipelined && p.err == nil {
		p.cond.Wait()
	}
}

// drain waits until every answer owed is written or failed: a client
// that closed its side after its queries still gets their answers (RFC
// 7766 §6.2.4). Each ends within its query_timeout, each flush within
// the write timeout.
func (p *tcpPipe) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.inflight > 0 || p.flushing {
		p.cond.Wait()
	}
}

var _ wireReplier = (*tcpPipe)(nil)

// beginMiss counts a wire waiter in; the connection's goroutine made room
// for it (waitSlot).
func (p *tcpPipe) beginMiss() bool {
	p.mu.Lock()
	p.inflight++
	p.mu.Unlock()
	return true
}

// sendMiss writes a wire waiter's answer, on whichever goroutine ended
// its flight.
func (p *tcpPipe) sendMiss(b []byte, _ netip.AddrPort) { p.write(b) }

// endMiss counts a wire waiter out: the last owed answer of a parked
// connection makes it waiting.
func (p *tcpPipe) endMiss() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight--
	if p.inflight == 0 && p.parked && p.err == nil && !p.stopped && !p.budget.setIdle(p.tc) {
		// Its listener stops (or towerd closed it): an idle connection
		// closes at shutdown.
		p.stopped = true
		_ = p.conn.Close()
	}
	p.cond.Broadcast()
}

func (p *tcpPipe) missPanicked(v any, stack []byte) {
	if p.report != nil {
		p.report(v, stack)
	}
}
