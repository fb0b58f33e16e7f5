package resolver

import (
	"container/list"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// tcpBudget is the one cap on TCP connections shared by all of a Server's
// TCP listeners: file descriptors are the process's, not a listener's. It
// knows which connections are waiting (holding a slot without a whole
// query: idle, or reading one whose last byte has not come), in the order
// they began to wait, so that at the cap the one that has waited longest
// gives its slot to the new connection (issues 13, 21). A connection
// begins to wait when it is admitted and again after each answer, and
// stops when its query is in; one being answered, or whose reply is being
// written, never loses its slot: its deadlines bound it.
//
// So slots go to clients that ask (issue 21: 500 connections sending a
// byte a second held every slot, and 19 of 40 real TCP queries failed). A
// real client's query arrives in one segment right after it connects, so
// its connection is the newest waiting one, the last to go, and soon not
// waiting at all; a slow sender keeps waiting and goes first.
//
// Why not a limit per source: on a node every client is 127.0.0.1, the
// attacker too. unbound shrinks tcp-idle-timeout (which covers reading a
// query too) from 30 s down to 200 ms as its incoming TCP buffers run
// short; here only the connection that must go is cut, and only when one
// must. dnsmasq serves TCP with at most 20 child processes that live up to
// 150 s, so 20 such connections stop its TCP.
type tcpBudget struct {
	limit int
	// usefulWindow is how long a connection may go without a useful
	// answer before it may be closed for a newer one (tcpstarve.go): the
	// handler's query_timeout.
	usefulWindow func() time.Duration

	mu      sync.Mutex
	open    int                   // connections counted against limit
	waiting list.List             // of *tcpConn, waiting longest first
	conns   map[*tcpConn]struct{} // every connection being served

	closed     [tcpClosedReasons]atomic.Uint64
	acceptErrs [acceptErrorKinds]atomic.Uint64

	// Tests' hooks, nil otherwise: a connection went idle; one began
	// reading a query; one was released for a reason.
	onIdle    func()
	onReading func()
	onRelease func(reason int)
}

// tcpConn is one served connection; its fields but conn and owner are
// guarded by tcpBudget.mu.
type tcpConn struct {
	conn      net.Conn
	owner     *tcpServer
	waitingAt *list.Element // non-nil while waiting
	reading   bool          // a query's first byte came; the rest has not
	closeAs   int           // -1, or why towerd closed it (cap, slow, shutdown)
	counted   bool          // counted in open
	// useful counts the answers written that were not SERVFAIL (the
	// pipe's, lock-free); usefulSeen and usefulAt are the budget's view of
	// it (tcpstarve.go).
	useful     atomic.Uint64
	usefulSeen uint64
	usefulAt   time.Time
}

func newTCPBudget(limit int) *tcpBudget {
	return &tcpBudget{limit: limit, conns: map[*tcpConn]struct{}{}}
}

// admit takes a new connection under the cap: at the cap, the connection
// waiting longest is closed to make room; with none waiting, c is closed
// and nil returned.
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
		oldest := b.waiting.Front()
		switch {
		case oldest != nil:
			victim, reason := oldest.Value.(*tcpConn), tcpClosedCap
			if victim.reading {
				reason = tcpClosedSlow
			}
			b.closeLocked(victim, reason)
		case !b.closeUnansweredLocked(time.Now()):
			b.closed[tcpClosedCap].Add(1) // counted before the client can see it
			c.Close()
			return nil
		}
	}
	tc := &tcpConn{conn: c, owner: owner, closeAs: -1, counted: true, usefulAt: time.Now()}
	tc.waitingAt = b.waiting.PushBack(tc) // from now: a new connection has no query yet
	b.conns[tc] = struct{}{}
	b.open++
	owner.conns.Add(1) // before shutdown's Wait: shutdown takes b.mu after closing stop
	return tc
}

// unlistLocked takes tc off the waiting list.
func (b *tcpBudget) unlistLocked(tc *tcpConn) {
	if tc.waitingAt != nil {
		b.waiting.Remove(tc.waitingAt)
		tc.waitingAt = nil
	}
	tc.reading = false
}

// closeLocked closes tc for reason; its goroutine's read fails and it
// releases tc. The fd is free at once, so tc no longer counts.
func (b *tcpBudget) closeLocked(tc *tcpConn, reason int) {
	if tc.closeAs >= 0 {
		return
	}
	b.unlistLocked(tc)
	tc.closeAs = reason
	if tc.counted {
		tc.counted = false
		b.open--
	}
	tc.conn.Close()
}

// setIdle marks tc as waiting for its next query (a connection just
// admitted waits already, from its admission). It reports false when tc
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
	if tc.waitingAt == nil {
		tc.waitingAt = b.waiting.PushBack(tc)
	}
	if b.onIdle != nil {
		b.onIdle()
	}
	return true
}

// setReading marks tc as reading a query whose first byte just came: it
// still waits, in the same place; false when towerd closed it meanwhile.
func (b *tcpBudget) setReading(tc *tcpConn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if tc.closeAs >= 0 {
		return false
	}
	tc.reading = true
	if b.onReading != nil {
		b.onReading()
	}
	return true
}

// setAnswering marks tc as holding a whole query: from now until it is
// idle again its slot is its own. False when towerd closed it meanwhile.
func (b *tcpBudget) setAnswering(tc *tcpConn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unlistLocked(tc)
	return tc.closeAs < 0
}

// release ends tc, counted under reason unless towerd closed it for one of
// its own.
func (b *tcpBudget) release(tc *tcpConn, reason int) {
	b.mu.Lock()
	if tc.closeAs >= 0 {
		reason = tc.closeAs
	}
	b.unlistLocked(tc)
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

// closeOwned closes owner's waiting connections (a query still arriving
// is not one being answered), or all of them.
func (b *tcpBudget) closeOwned(owner *tcpServer, all bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for tc := range b.conns {
		if tc.owner == owner && (all || tc.waitingAt != nil) {
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
