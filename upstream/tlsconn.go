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
	"sync"
	"time"

	"github.com/towerd/towerd/resolver/dnswire"
)

// errBetweenFrames marks a read error before a frame's first byte.
var errBetweenFrames = errors.New("between frames")

// errConnClosed: a query came to a connection that closed meanwhile.
var errConnClosed = errors.New("tls connection closed")

// tlsOwner gets a TLS query's reply or failure, once, on the connection's
// goroutines (its reader, or whichever closed it): it must not block. raw
// is the owner's to keep.
type tlsOwner interface {
	tlsReply(q *tlsQuery, raw []byte, err error)
}

// tlsQuery is one query in flight on a connection.
type tlsQuery struct {
	conn  *tlsConn
	owner tlsOwner
	a     *attempt // the call's attempt; nil for a probe
	id    uint16
	match replyMatch // over frame
	frame []byte
	// cancelled: the owner gave up (cancel); the ID stays taken until its
	// reply comes or cancelledAt is a read timeout ago, so a late reply
	// is recognised, not counted as bogus.
	cancelled   bool
	cancelledAt time.Time
}

// tlsConn is one TLS connection to a server: a goroutine that connects,
// shakes hands and then writes the queued frames (run), and one that
// reads replies and hands each to its query's owner (read).
type tlsConn struct {
	t    *tlsTransport
	out  chan []byte   // frames to write; never more than the queries in flight
	done chan struct{} // closed by close

	mu      sync.Mutex
	pending map[uint16]*tlsQuery
	raw     net.Conn  // set once dialled, so close can interrupt a handshake
	tc      *tls.Conn // set once the handshake is done
	idle    time.Duration
	// busySince is when the connection last went from idle to waiting,
	// or last brought a reply: the read timeout runs from it.
	busySince time.Time
	bogus     int
	closed    bool
	lastErr   error
}

func newTLSConn(t *tlsTransport) *tlsConn {
	return &tlsConn{t: t, out: make(chan []byte, tlsMaxInFlight), done: make(chan struct{}),
		pending: map[uint16]*tlsQuery{}, idle: tlsIdleTimeout}
}

// enqueue gives frame (a framed query whose question ends at qend-2+2)
// a free ID and queues it.
func (c *tlsConn) enqueue(frame []byte, qend int, owner tlsOwner, a *attempt) (*tlsQuery, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errConnClosed
	}
	if len(c.pending) >= tlsMaxInFlight {
		c.sweepLocked()
		if len(c.pending) >= tlsMaxInFlight {
			return nil, fmt.Errorf("tls to %s: %w", c.t.display, errTLSBusy)
		}
	}
	id := randomID()
	for c.pending[id] != nil {
		id = randomID()
	}
	dnswire.SetID(frame[2:], id)
	q := &tlsQuery{conn: c, owner: owner, a: a, id: id, match: matchOf(frame[2:], qend), frame: frame}
	c.pending[id] = q
	if len(c.pending) == 1 {
		// From idle to waiting: the read timeout runs from now.
		c.busySince = time.Now()
		if c.tc != nil {
			_ = c.tc.SetReadDeadline(c.busySince.Add(tlsReadTimeout))
		}
	}
	c.out <- frame // room: out holds no more frames than pending has queries
	return q, nil
}

// sweepLocked frees the IDs of queries cancelled a read timeout ago: a
// server that answers some queries and drops others cannot fill the
// connection with the ones it dropped.
func (c *tlsConn) sweepLocked() {
	cutoff := c.t.clock.Now().Add(-tlsReadTimeout)
	for id, q := range c.pending {
		if q.cancelled && q.cancelledAt.Before(cutoff) {
			delete(c.pending, id)
		}
	}
}

// cancel gives up q: true when its owner will not be told, false when
// its reply or failure is being handed over already (the owner will be
// told).
func (q *tlsQuery) cancel() bool {
	c := q.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[q.id] != q || q.cancelled {
		return false
	}
	q.cancelled, q.cancelledAt = true, c.t.clock.Now()
	return true
}

// run connects, shakes hands within tlsHandshakeTimeout, starts the
// reader, and writes queued frames until the connection closes. No
// frame is written before the handshake verified the server.
func (c *tlsConn) run() {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), tlsHandshakeTimeout)
	raw, err := t.dialer.DialContext(ctx, "tcp", t.spec.Addr)
	var tc *tls.Conn
	if err == nil {
		c.mu.Lock()
		c.raw = raw
		closed := c.closed
		c.mu.Unlock()
		if closed {
			raw.Close()
			cancel()
			return
		}
		tc = tls.Client(raw, t.config)
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
	go c.read(tc)
	c.write(tc)
}

// write writes queued frames, as many as are queued in one TLS record.
func (c *tlsConn) write(tc *tls.Conn) {
	buf := make([]byte, 0, 4096)
	for {
		select {
		case <-c.done:
			return
		case frame := <-c.out:
			buf = append(buf[:0], frame...)
		more:
			for len(buf) < 16384 {
				select {
				case frame := <-c.out:
					buf = append(buf, frame...)
				default:
					break more
				}
			}
		}
		_ = tc.SetWriteDeadline(time.Now().Add(tlsReadTimeout))
		if _, err := tc.Write(buf); err != nil {
			c.close(fmt.Errorf("writing to %s: %w: %w", c.t.display, ErrNetwork, err))
			return
		}
	}
}

// read hands each reply to its query's owner, until the connection
// fails, idles out, or brings too many replies that match nothing.
func (c *tlsConn) read(tc *tls.Conn) {
	br := bufio.NewReaderSize(tc, 4096)
	keepaliveRead := false
	for {
		raw, err := readFrame(br)
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
		cancelled := q.cancelled
		c.busySince = time.Now()
		c.setDeadlineLocked()
		c.mu.Unlock()
		// A reply to a query: the server is talking (silence.go); frames
		// that match nothing are no sign of that.
		c.t.heard()
		if !cancelled {
			q.owner.tlsReply(q, raw, nil)
		}
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

// close ends the connection with err (nil: an idle close): every query
// still waiting fails with it, and the transport forgets the connection.
func (c *tlsConn) close(err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.lastErr = err
	close(c.done)
	var told []*tlsQuery
	for _, q := range c.pending {
		if !q.cancelled {
			told = append(told, q)
		}
	}
	clear(c.pending)
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
	for _, q := range told {
		q.owner.tlsReply(q, nil, err)
	}
}

// readFrame reads one length-prefixed message (RFC 1035 section 4.2.2);
// a frame is at most 65535 bytes, the whole of what a reply can hold.
func readFrame(br *bufio.Reader) ([]byte, error) {
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
	msg := make([]byte, n)
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
