package admin

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Any local user can open connections to the admin port, and each one holds
// a file descriptor for as long as the server keeps it. Unbounded, 1,100 idle
// keep-alive connections under a 1,024 descriptor limit turned every cache
// miss into SERVFAIL (issue 21: no descriptor was left for an upstream
// socket). So each HTTP server here serves at most a fixed number of
// connections, counted in the daemon's descriptor budget (daemon/fds.go), and
// gives its slots to the clients that ask: at the cap, the connection that
// has been waiting longest without a request in progress (idle between
// keep-alive requests, or connected and silent) is closed to make room; when
// every slot is busy with a request, the new connection is refused with 503.

// connLimiter keeps an http.Server at max connections; install it with
// track. Its counts are read by tests and logs.
type connLimiter struct {
	max int
	now func() time.Time

	mu    sync.Mutex
	conns map[net.Conn]*connSlot

	evicted atomic.Uint64 // closed to make room for a newer connection
	refused atomic.Uint64 // turned away because every slot was busy
}

// connSlot is one connection the server holds.
type connSlot struct {
	active  bool      // a request is being read or served
	waiting time.Time // since when it has been without a request
	closing bool      // closed by the limiter, not yet gone from the server
	fresh   bool      // accepted and no request yet
}

func newConnLimiter(max int) *connLimiter {
	return &connLimiter{max: max, now: time.Now, conns: map[net.Conn]*connSlot{}}
}

// refusal is written to a connection turned away: an HTTP answer the
// client can read, then the close.
var refusal = func() []byte {
	body := "towerd: every connection slot of this server is busy; retry\n"
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"Connection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}()

// refusalWriteTimeout bounds writing the refusal: it fits any socket
// buffer, so only a peer that never reads could hold it up.
const refusalWriteTimeout = 100 * time.Millisecond

// track makes srv report its connections' states to l.
func (l *connLimiter) track(srv *http.Server) {
	srv.ConnState = l.connState
}

// connState is http.Server.ConnState. StateNew is reported by the accept
// loop before the connection's goroutine starts, so at the cap the newcomer
// is placed, or refused, before it reads a byte.
func (l *connLimiter) connState(c net.Conn, state http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateNew:
		if l.live() >= l.max && !l.evictOldest(hasPendingBytes(c)) {
			l.refused.Add(1)
			_ = c.SetWriteDeadline(l.now().Add(refusalWriteTimeout))
			_, _ = c.Write(refusal)
			c.Close()
			return // its StateClosed, if the server reports one, finds no slot
		}
		l.conns[c] = &connSlot{waiting: l.now(), fresh: true}
	case http.StateActive:
		if s := l.conns[c]; s != nil {
			s.active, s.fresh = true, false
		}
	case http.StateIdle:
		if s := l.conns[c]; s != nil {
			s.active, s.waiting = false, l.now()
		}
		if tc, ok := c.(*trackedConn); ok {
			tc.firstRead.Store(0) // the next request starts afresh
		}
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	}
}

// live counts the connections that hold a slot: those closed to make room
// still hold a descriptor until the server sees the close, but only for a
// moment, and counting them would refuse the connection they made room for.
func (l *connLimiter) live() int {
	n := 0
	for _, s := range l.conns {
		if !s.closing {
			n++
		}
	}
	return n
}

// evictOldest closes the connection waiting longest without a request to
// make room for a newcomer, and reports whether there was one. Issue 35:
// under a flood of connections that never send a byte, taking the oldest
// regardless reset root's CLI before its request was read (0 of 10 beside
// 10,000 idle connections): a CLI writes its request right after connect,
// towerd reads it a little later. So the one to go is the oldest that has
// sent nothing (connected and silent, or idle between keep-alive requests);
// only when there is none, the oldest that began a request more than
// requestGrace ago and has not finished its header (a slow sender). One
// whose request is in its socket unread, or began within requestGrace, is
// never taken; nor, for a newcomer that has sent nothing itself
// (newcomerSent false), one accepted less than requestGrace ago that has
// not sent its first request yet: a silent
// newcomer is no likelier to be a real client than a silent incumbent, and
// the incumbent's request may be on its way. Called with l.mu held.
func (l *connLimiter) evictOldest(newcomerSent bool) bool {
	var oldest net.Conn
	var since time.Time
	oldestClass := 2
	now := l.now()
	for c, s := range l.conns {
		if s.active || s.closing {
			continue
		}
		class := l.evictionClass(c, now)
		if class == 0 && s.fresh && !newcomerSent && now.Sub(s.waiting) < requestGrace {
			class = 2
		}
		if class > 1 || class > oldestClass {
			continue
		}
		if oldest == nil || class < oldestClass || s.waiting.Before(since) {
			oldest, since, oldestClass = c, s.waiting, class
		}
	}
	if oldest == nil {
		return false
	}
	l.conns[oldest].closing = true
	oldest.Close()
	l.evicted.Add(1)
	return true
}

// evictionClass orders an inactive connection for eviction: 0 it has sent
// nothing, 1 it began a request more than requestGrace ago, 2 (never taken)
// its request is in its socket or began within requestGrace. Called with
// l.mu held.
func (l *connLimiter) evictionClass(c net.Conn, now time.Time) int {
	class := 0
	if tc, ok := c.(*trackedConn); ok {
		if at := tc.firstRead.Load(); at != 0 {
			class = 1
			if now.UnixNano()-at < int64(requestGrace) {
				return 2
			}
		}
		c = tc.Conn
	}
	if hasPendingBytes(c) {
		return 2
	}
	return class
}

// count is the number of connections held, for tests.
func (l *connLimiter) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.live()
}

// requestGrace is how long a connection whose request has begun to arrive
// is kept from eviction before the header is whole: a real client's request
// is one write, so anything slower is a slow sender (unbound, too, gives a
// reader 200 ms when its TCP buffers run short).
const requestGrace = 200 * time.Millisecond

// listener wraps ln so that the connections it accepts tell l when their
// first bytes are read.
func (l *connLimiter) listener(ln net.Listener) net.Listener { return &trackedListener{ln, l} }

type trackedListener struct {
	net.Listener
	lim *connLimiter
}

func (tl *trackedListener) Accept() (net.Conn, error) {
	c, err := tl.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &trackedConn{Conn: c, now: tl.lim.now}, nil
}

// trackedConn is an accepted connection that records when its current
// request's first bytes were read (unix nanoseconds, 0: none yet).
type trackedConn struct {
	net.Conn
	now       func() time.Time
	firstRead atomic.Int64
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.firstRead.Load() == 0 {
		c.firstRead.Store(c.now().UnixNano())
	}
	return n, err
}

// NetConn is the accepted connection itself (as tls.Conn's), for the
// peer credentials.
func (c *trackedConn) NetConn() net.Conn { return c.Conn }
