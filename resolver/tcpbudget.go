package resolver

import (
	"container/list"
	"net"
	"sync"
	"sync/atomic"
)

// tcpBudget is the one cap on TCP connections shared by all of a Server's
// TCP listeners: file descriptors are the process's, not a listener's. It
// knows which connections are idle (waiting for a query's first byte), in
// the order they went idle, so the one idle longest can be closed to admit
// a new connection (issue 13; unbound's incoming-num-tcp closes idle
// connections the same way when it runs short).
type tcpBudget struct {
	limit int

	mu    sync.Mutex
	open  int                   // connections counted against limit
	idle  list.List             // of *tcpConn, idle longest first
	conns map[*tcpConn]struct{} // every connection being served

	closed     [tcpClosedReasons]atomic.Uint64
	acceptErrs [acceptErrorKinds]atomic.Uint64

	// Tests' hooks, nil otherwise: a connection went idle; one was
	// released for a reason.
	onIdle    func()
	onRelease func(reason int)
}

// tcpConn is one served connection; its fields but conn and owner are
// guarded by tcpBudget.mu.
type tcpConn struct {
	conn    net.Conn
	owner   *tcpServer
	idleAt  *list.Element // non-nil while idle
	closeAs int           // -1, or why towerd closed it (cap, shutdown)
	counted bool          // counted in open
}

func newTCPBudget(limit int) *tcpBudget {
	return &tcpBudget{limit: limit, conns: map[*tcpConn]struct{}{}}
}

// admit takes a new connection under the cap: at the cap, the connection
// idle longest is closed to make room; with none idle, c is closed and nil
// returned. A connection in the middle of a query is never closed for a
// newer one: its read and write deadlines bound it.
func (b *tcpBudget) admit(owner *tcpServer, c net.Conn) *tcpConn {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-owner.stop:
		b.closed[tcpClosedShutdown].Add(1)
		c.Close()
		return nil
	default:
	}
	if b.open >= b.limit {
		oldest := b.idle.Front()
		if oldest == nil {
			b.closed[tcpClosedCap].Add(1) // counted before the client can see it
			c.Close()
			return nil
		}
		b.closeLocked(oldest.Value.(*tcpConn), tcpClosedCap)
	}
	tc := &tcpConn{conn: c, owner: owner, closeAs: -1, counted: true}
	b.conns[tc] = struct{}{}
	b.open++
	owner.conns.Add(1) // before shutdown's Wait: shutdown takes b.mu after closing stop
	return tc
}

// closeLocked closes tc for reason; its goroutine's read fails and it
// releases tc. The fd is free at once, so tc no longer counts.
func (b *tcpBudget) closeLocked(tc *tcpConn, reason int) {
	if tc.closeAs >= 0 {
		return
	}
	if tc.idleAt != nil {
		b.idle.Remove(tc.idleAt)
		tc.idleAt = nil
	}
	tc.closeAs = reason
	if tc.counted {
		tc.counted = false
		b.open--
	}
	tc.conn.Close()
}

// setIdle marks tc as waiting for its next query. It reports false when tc
// is to be closed instead (towerd closed it, or its listener is stopping).
func (b *tcpBudget) setIdle(tc *tcpConn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if tc.closeAs >= 0 {
		return false
	}
	select {
	case <-tc.owner.stop:
		return false
	default:
	}
	tc.idleAt = b.idle.PushBack(tc)
	if b.onIdle != nil {
		b.onIdle()
	}
	return true
}

// setBusy marks tc as reading or answering a query; false when towerd
// closed it meanwhile.
func (b *tcpBudget) setBusy(tc *tcpConn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if tc.idleAt != nil {
		b.idle.Remove(tc.idleAt)
		tc.idleAt = nil
	}
	return tc.closeAs < 0
}

// release ends tc, counted under reason unless towerd closed it for one of
// its own.
func (b *tcpBudget) release(tc *tcpConn, reason int) {
	b.mu.Lock()
	if tc.closeAs >= 0 {
		reason = tc.closeAs
	}
	if tc.idleAt != nil {
		b.idle.Remove(tc.idleAt)
		tc.idleAt = nil
	}
	if tc.counted {
		tc.counted = false
		b.open--
	}
	delete(b.conns, tc)
	b.mu.Unlock()
	tc.conn.Close()
	b.closed[reason].Add(1)
	if b.onRelease != nil {
		b.onRelease(reason)
	}
	tc.owner.conns.Done()
}

// closeOwned closes owner's idle connections, or all of them.
func (b *tcpBudget) closeOwned(owner *tcpServer, all bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for tc := range b.conns {
		if tc.owner == owner && (all || tc.idleAt != nil) {
			b.closeLocked(tc, tcpClosedShutdown)
		}
	}
}

// connections is how many connections count against the cap now.
func (b *tcpBudget) connections() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}
