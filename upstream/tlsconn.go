package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/towerd/towerd/resolver/dnswire"
)

// errBetweenFrames marks a read error before a frame's first byte.
var errBetweenFrames = errors.New("between frames")

// errConnClosed: a query came to a connection that closed meanwhile.
var errConnClosed = errors.New("tls connection closed")

// tlsOwner gets a TLS query's reply or failure, once, on the connection's
// goroutines (its reader, or whichever closed it): it must not block. raw
// is in the reader's buffer, valid only until tlsReply returns: an owner
// copies what it keeps (as the attempt reader's datagrams, udpsock.go).
type tlsOwner interface {
	tlsReply(q *tlsQuery, raw []byte, err error)
}

// A query's state: waiting until its owner gave up (cancelled) or is
// told its reply or failure (told), whichever comes first; it moves
// once, so the owner is told at most once, whichever connection the
// query is on by then.
const (
	tlsWaiting uint32 = iota
	tlsCancelled
	tlsTold
)

// tlsQuery is one query in flight, on one connection at a time: a
// connection that closes with it waiting hands it to the next one
// (tlsConn.close).
type tlsQuery struct {
	t     *tlsTransport
	owner tlsOwner
	a     *attempt // the call's attempt; nil for a probe
	frame []byte   // the framed query; its ID is the connection's
	match replyMatch
	state atomic.Uint32
	// cancelledAt (the transport clock's UnixNano) is when the owner
	// gave up: the ID stays taken until its reply comes or this is a
	// read timeout ago, so a late reply is recognised, not counted as
	// bogus.
	cancelledAt atomic.Int64
	// resends counts the connections it was sent on after the first;
	// written only by the connection it is on, as that one closes.
	resends int
	id      uint16 // under the connection's lock
	// room holds frame: one allocation per query, not one per piece.
	room [tlsFrameRoom]byte
}

// newTLSQuery makes the query of query (one question ending at qend; not
// kept) for owner, framed.
func newTLSQuery(t *tlsTransport, query []byte, qend int, owner tlsOwner, a *attempt) *tlsQuery {
	q := &tlsQuery{t: t, owner: owner, a: a}
	q.frame = frameTLSQuery(q.room[:0], query, qend)
	q.match = matchOf(q.frame[2:], qend)
	return q
}

// tell hands q's reply or failure to its owner, unless it gave up or
// was told already.
func (q *tlsQuery) tell(raw []byte, err error) {
	if q.state.CompareAndSwap(tlsWaiting, tlsTold) {
		q.owner.tlsReply(q, raw, err)
	}
}

// cancel gives up q: true when its owner will not be told, false when
// its reply or failure is being handed over (the owner will be told).
func (q *tlsQuery) cancel() bool {
	q.cancelledAt.Store(q.t.clock.Now().UnixNano())
	return q.state.CompareAndSwap(tlsWaiting, tlsCancelled)
}

// tlsConn is one TLS connection to a server: a goroutine that connects,
// shakes hands, writes what was queued meanwhile and then reads replies,
// handing each to its query's owner (run, read). After the handshake a
// query is written by the goroutine that sends it (enqueue), with no
// hand-off to a writer goroutine: at a few hundred misses a second each
// hand-off woke a sleeping thread, and cost more CPU than the TLS record.
type tlsConn struct {
	t *tlsTransport

	mu      sync.Mutex
	pending map[uint16]*tlsQuery
	raw     net.Conn  // set once dialled, so close can interrupt a handshake
	tc      *tls.Conn // set once the handshake is done
	idle    time.Duration
	// busySince is when the connection last went from idle to waiting,
	// or last brought a reply: the read timeout runs from it.
	busySince time.Time
	bogus     int
	replies   int // replies to a query
	closed    bool
	lastErr   error

	// Writing, under wmu (taken after mu, never before): frames queued
	// are appended to wbuf, and whoever finds no write under way writes
	// them, and then what was queued during that write, in one TLS record
	// each time: queries that come during a write go out together.
	// writing is true from the start, when run holds the writer's turn
	// until the handshake is done.
	wmu     sync.Mutex
	wbuf    []byte
	spare   []byte
	writing bool
	// writeBy is the write deadline set last: moved on only once it is
	// less than half a read timeout away, not per write (each move is a
	// runtime timer's).
	writeBy time.Time
}

func newTLSConn(t *tlsTransport) *tlsConn {
	return &tlsConn{t: t, pending: map[uint16]*tlsQuery{}, idle: tlsIdleTimeout, writing: true}
}

// enqueue gives q a free ID and queues it, writing it at once when the
// connection is up and no write is under way. A write that fails closes
// the connection on a goroutine of its own: enqueue's caller may hold
// the lock q's owner takes when told (WireCall.mu).
func (c *tlsConn) enqueue(q *tlsQuery) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errConnClosed
	}
	if len(c.pending) >= tlsMaxInFlight {
		c.sweepLocked()
		if len(c.pending) >= tlsMaxInFlight {
			c.mu.Unlock()
			return fmt.Errorf("tls to %s: %w", c.t.display, errTLSBusy)
		}
	}
	id := randomID()
	for c.pending[id] != nil {
		id = randomID()
	}
	dnswire.SetID(q.frame[2:], id)
	q.id, q.match.id = id, id
	c.pending[id] = q
	if len(c.pending) == 1 {
		// From idle to waiting: the read timeout runs from now.
		c.busySince = time.Now()
		if c.tc != nil {
			_ = c.tc.SetReadDeadline(c.busySince.Add(tlsReadTimeout))
		}
	}
	tc := c.tc
	// The frame is copied under mu: once q is pending, a close may hand
	// it to the next connection, which writes its own ID into it.
	c.wmu.Lock()
	c.wbuf = append(c.wbuf, q.frame...)
	c.mu.Unlock()
	if c.writing {
		c.wmu.Unlock()
		return nil
	}
	c.writing = true
	err := c.flushLocked(tc)
	c.wmu.Unlock()
	if err != nil {
		go c.close(err)
	}
	return nil
}

// flushLocked writes wbuf until nothing more is queued, then gives up the
// writer's turn; c.wmu is held, and let go during each write. Writes
// do not block in practice: what is queued is at most tlsMaxInFlight
// queries, and the socket's send buffer holds them (run); the write
// deadline bounds one that does.
func (c *tlsConn) flushLocked(tc *tls.Conn) error {
	for len(c.wbuf) > 0 {
		buf := c.wbuf
		c.wbuf = c.spare[:0]
		if now := time.Now(); c.writeBy.Sub(now) < tlsReadTimeout/2 {
			c.writeBy = now.Add(tlsReadTimeout)
			_ = tc.SetWriteDeadline(c.writeBy)
		}
		c.wmu.Unlock()
		_, err := tc.Write(buf)
		c.wmu.Lock()
		c.spare = buf[:0]
		if err != nil {
			c.writing = false
			return fmt.Errorf("writing to %s: %w: %w", c.t.display, ErrNetwork, err)
		}
	}
	c.writing = false
	return nil
}

// sweepLocked frees the IDs of queries cancelled a read timeout ago: a
// server that answers some queries and drops others cannot fill the
// connection with the ones it dropped.
func (c *tlsConn) sweepLocked() {
	cutoff := c.t.clock.Now().Add(-tlsReadTimeout).UnixNano()
	for id, q := range c.pending {
		if q.state.Load() == tlsCancelled && q.cancelledAt.Load() < cutoff {
			delete(c.pending, id)
		}
	}
}

// tlsSendBuffer is the socket send buffer asked for: room for
// tlsMaxInFlight queries of the longest name, padded, each in a TLS
// record of its own, so a write of queued queries does not wait for the
// server to read.
const tlsSendBuffer = tlsMaxInFlight * 512

// run connects, shakes hands within tlsHandshakeTimeout, writes what was
// queued meanwhile and reads replies until the connection closes. No
// frame is written before the handshake verified the server.
func (c *tlsConn) run() {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), tlsHandshakeTimeout)
	raw, err := t.dialer.DialContext(ctx, "tcp", t.spec.Addr)
	var tc *tls.Conn
	if err == nil {
		if tcp, ok := raw.(*net.TCPConn); ok {
			_ = tcp.SetWriteBuffer(tlsSendBuffer)
		}
		c.mu.Lock()
		c.raw = raw
		closed := c.closed
		c.mu.Unlock()
		if closed {
			raw.Close()
			cancel()
			return
		}
		tc = tls.Client(streamOf(raw), t.config)
		err = tc.HandshakeContext(ctx)
	}
	cancel()
	if err != nil {
		t.failed(err)
		c.close(fmt.Errorf("connecting to %s: %w: %w", t.display, ErrNetwork, err))
		return
	}
	t.connected(tc.ConnectionState())
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		tc.Close()
		return
	}
	c.tc = tc
	c.setDeadlineLocked()
	c.mu.Unlock()
	c.wmu.Lock()
	err = c.flushLocked(tc)
	c.wmu.Unlock()
	if err != nil {
		c.close(err)
		return
	}
	c.read(tc)
}

// read hands each reply to its query's owner, until the connection
// fails, idles out, or brings too many replies that match nothing.
func (c *tlsConn) read(tc *tls.Conn) {
	br := bufio.NewReaderSize(tc, 4096)
	keepaliveRead := false
	var buf []byte // the frames', reused: an owner copies what it keeps
	for {
		raw, err := readFrame(br, buf)
		if err != nil {
			c.mu.Lock()
			idle := len(c.pending) == 0
			if errors.Is(err, errBetweenFrames) && isTimeout(err) && !idle {
				// The idle deadline passed as a query came: its read
				// timeout runs from when it came, and nothing of a frame
				// was read (a read that timed out is resumed).
				if due := c.busySince.Add(tlsReadTimeout); time.Now().Before(due) {
					_ = tc.SetReadDeadline(due)
					c.mu.Unlock()
					continue
				}
			}
			c.mu.Unlock()
			if idle && (errors.Is(err, io.EOF) || isTimeout(err)) {
				err = nil // idle timeout, or the server's: closed, nothing lost
			}
			c.close(readErr(c.t.display, err))
			return
		}
		buf = raw[:0]
		if !keepaliveRead {
			// The server's edns-tcp-keepalive (RFC 7828 section 3.2.2):
			// its first reply says how long it keeps an idle connection.
			keepaliveRead = true
			if d, ok := replyKeepalive(raw); ok {
				c.mu.Lock()
				c.idle = min(c.idle, d)
				c.mu.Unlock()
			}
		}
		c.mu.Lock()
		h, _ := dnswire.ReadHeader(raw) // readFrame's frames hold a header
		q := c.pending[h.ID]
		if q == nil || !q.match.accepts(raw) {
			if q != nil {
				c.t.mismatches.Add(1)
			}
			c.bogus++
			over := c.bogus > tlsMaxBogusFrames
			c.mu.Unlock()
			if over {
				c.close(fmt.Errorf("reading from %s: %w: more than %d replies to no query", c.t.display, ErrNetwork, tlsMaxBogusFrames))
				return
			}
			continue
		}
		delete(c.pending, q.id)
		c.replies++
		c.busySince = time.Now()
		c.setDeadlineLocked()
		c.mu.Unlock()
		// A reply to a query: the server is talking (silence.go); frames
		// that match nothing are no sign of that.
		c.t.heard()
		q.tell(raw, nil)
	}
}

// setDeadlineLocked sets the read deadline: the read timeout while
// queries wait, the idle timeout when none does.
func (c *tlsConn) setDeadlineLocked() {
	d := tlsReadTimeout
	if len(c.pending) == 0 {
		d = c.idle
	}
	_ = c.tc.SetReadDeadline(time.Now().Add(d))
}

// close ends the connection with err (nil: an idle close), and the
// transport forgets it. The queries still waiting are sent again on the
// next connection when this one was up (RFC 7766 section 6.2.1: a server
// may close a connection whenever it likes, and a query it did not answer
// is not lost to its read timeout): again and again while each connection
// answers something, as from a server that closes after each answer, but
// once only after one that answered nothing, so a server that resets
// every connection costs one more connection, not a loop. Every further
// connection is paid for by an answer or by a query's one free resend.
// The others fail with err, and the resolution's next attempt decides.
func (c *tlsConn) close(err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.lastErr = err
	var waiting []*tlsQuery
	for _, q := range c.pending {
		if q.state.Load() == tlsWaiting {
			waiting = append(waiting, q)
		}
	}
	clear(c.pending)
	up, answered := c.tc != nil, c.replies > 0
	if c.tc != nil {
		_ = c.tc.Close()
	} else if c.raw != nil {
		_ = c.raw.Close() // interrupts the handshake
	}
	c.mu.Unlock()
	c.t.dropped(c)
	if err == nil {
		err = fmt.Errorf("tls to %s: %w: connection closed", c.t.display, ErrNetwork)
	}
	for _, q := range waiting {
		if up && (answered || q.resends == 0) {
			q.resends++
			if c.t.sendQuery(q) == nil {
				continue
			}
		}
		q.tell(nil, err)
	}
}

// readFrame reads one length-prefixed message (RFC 1035 section 4.2.2)
// into buf, grown when it is too small; a frame is at most 65535 bytes,
// the whole of what a reply can hold.
func readFrame(br *bufio.Reader, buf []byte) ([]byte, error) {
	// Peek first: an error before a frame began consumed nothing, and
	// the stream is still whole.
	if _, err := br.Peek(2); err != nil {
		return nil, fmt.Errorf("%w: %w", errBetweenFrames, err)
	}
	var prefix [2]byte
	if _, err := io.ReadFull(br, prefix[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint16(prefix[:])
	if n < dnswire.HeaderLen {
		return nil, fmt.Errorf("frame of %d bytes, shorter than a header", n)
	}
	msg := slices.Grow(buf[:0], int(n))[:n]
	if _, err := io.ReadFull(br, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

func readErr(display string, err error) error {
	if err == nil {
		return nil
	}
	if isTimeout(err) {
		return fmt.Errorf("reading from %s: %w: no reply for %s: %w", display, ErrNetwork, tlsReadTimeout, err)
	}
	return fmt.Errorf("reading from %s: %w: %w", display, ErrNetwork, err)
}

func isTimeout(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}
