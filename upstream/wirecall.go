package upstream

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/towerd/towerd/resolver/dnswire"
)

// StartWire is the one resolution of a Group (Wait waits for it). It is no loop on a goroutine of its own but a call
// (WireCall) that events move on (issue 22: one end of a resolution),
// each on the goroutine that brings it: the caller's, which sends the
// first attempt before StartWire returns; the process's attempt reader
// (udpsock_linux.go), which hands over every attempt's reply; the call's
// timer, for an RTO or the deadline; a TCP retry's goroutine; Kick. Each
// event goes through the same rules (resolution.go: judge, the next
// attempt, TC → TCP) and a resolution that is over ends in one place
// (finish: sockets closed, health and RTT accounted, the receiver told).
// So a first reply that is an answer is judged, scrubbed and delivered by
// the attempt reader itself, with no goroutine woken, and a retransmission
// is sent by the timer's goroutine, the next attempt after a SERVFAIL by
// the reader: nothing waits on a channel, and no goroutine is started but
// for a TCP retry (it dials and blocks).

// WireReceiver gets a StartWire resolution's outcome, exactly once.
type WireReceiver interface {
	// ReceiveWire is called with the reply, or without an answer the
	// last SERVFAIL or REFUSED reply with a *RcodeError, else an error
	// wrapping ErrTimeout or ErrNetwork, or the context's error when the
	// caller cancelled; on whichever goroutine ended the resolution (the attempt reader's,
	// the call's timer's, a TCP retry's): it must not block, and wr.Raw is
	// valid only until it returns (a copy is the receiver's to make).
	ReceiveWire(wr WireReply, err error)
}

// WireQuery is what StartWire resolves.
type WireQuery struct {
	// Ctx's end (shutdown) ends the resolution (see Kick).
	Ctx context.Context
	// Packed is the query, one question, uncompressed: its ID is
	// overwritten by each attempt, and it is not kept after StartWire.
	Packed []byte
	// Deadline ends the resolution: the zero time is Ctx's deadline, else
	// 5 s. A parameter, not a context of its own: context.WithTimeout
	// costs four allocations (docs/benchmarks.md).
	Deadline time.Time
	// Below are the zones configured below the group's (uncompressed wire
	// form): the servers are not believed about names there, and a chain
	// that enters one is left for its own zone to answer (Scope,
	// ScrubResult.ChaseName).
	Below [][]byte
}

// WireCall is one StartWire resolution. Its zero value is ready for
// StartWire, once; it must not be copied (a caller may keep it inside a
// struct of its own, which saves an allocation per miss).
type WireCall struct {
	g        *Group
	ctx      context.Context
	deadline time.Time
	order    []*server
	recv     WireReceiver
	query    []byte // a copy of the caller's: the sockets match replies against it
	qend     int
	scope    Scope // what the servers are believed about

	delivered atomic.Bool // the receiver was called

	// The resolution's state, under mu: every event takes it.
	mu       sync.Mutex
	state    callState
	attempts []*attempt // sent, in order
	pending  int        // attempts without a result
	tcp      int        // attempts waiting for their TCP retry or TLS reply (tlscall.go)
	winner   *attempt   // the attempt whose reply is the answer
	// lastRcode is the latest attempt answered SERVFAIL or REFUSED,
	// lastErr the latest failure of any kind.
	lastRcode *attempt
	lastErr   error
	timedOut  bool            // the deadline passed
	yielded   bool            // ended early by Yield
	tcpCtx    context.Context // the TCP retries', made with the first
	tcpCancel context.CancelFunc
	// due is when the call's timer fires (its group's timers,
	// calltimers.go): the RTO of rtoOf (the newest attempt, until its RTO
	// ran out), the hedge or the deadline, whichever comes first.
	due   time.Time
	rtoOf *attempt
	// timerAt and timerDue are the call's place (index plus one, 0 when
	// out) and due time in its group's timers, under their lock.
	timerAt  int
	timerDue time.Time
	// hedgeAt is when the first attempt is hedged (hedge.go), zero when
	// it is not (any more); hedged: the second attempt is the hedge (or
	// an exploration, sent with the first: latency.go), paid from the
	// budget.
	hedgeAt  time.Time
	hedged   bool
	explored bool
	// again: the hedge went to the first attempt's server (hedge.go).
	again bool

	first       attempt // the first attempt, and its socket, in the call
	sock        udpSock // (Linux): no allocation for them per miss
	attemptRoom [3]*attempt
	orderRoom   [4]*server
	buf         [maxWireQuery]byte // query's room
}

// maxWireQuery is the size of a query with the longest name (255 bytes),
// an OPT record and no options: the resolver's upstream query; a longer
// one is copied to the heap.
const maxWireQuery = dnswire.HeaderLen + dnswire.MaxNameLen + 4 + dnswire.OPTLen

type callState uint8

const (
	callRunning callState = iota
	callEnding            // over, waiting for its TCP retries to return
	callDone
)

// StartWire starts resolving q with c, a zero WireCall, and returns at
// once; recv gets the outcome. The first attempt is sent before StartWire
// returns. Kick makes the resolution notice that q.Ctx is done; the
// deadline is the call's timer's.
func (g *Group) StartWire(c *WireCall, q WireQuery, recv WireReceiver) {
	ctx, query, deadline := q.Ctx, q.Packed, q.Deadline
	c.g, c.ctx, c.recv = g, ctx, recv
	c.scope = Scope{Zone: g.scope.Zone, Below: q.Below}
	if ctxDeadline, ok := ctx.Deadline(); ok && (deadline.IsZero() || ctxDeadline.Before(deadline)) {
		deadline = ctxDeadline
	}
	if deadline.IsZero() {
		deadline = g.opts.Clock.Now().Add(defaultResolutionTimeout)
	}
	c.deadline = deadline
	c.query = append(c.buf[:0], query...)
	if err := ctx.Err(); err != nil {
		c.state = callDone
		go c.deliver(WireReply{}, fmt.Errorf("group %s: %w", g.name, classify(ctx, err)))
		return
	}
	qend, err := questionEnd(c.query)
	if err != nil {
		c.state = callDone
		go c.deliver(WireReply{}, fmt.Errorf("group %s: packing query: %w", g.name, err))
		return
	}
	c.qend = qend
	r := g.rank(c.orderRoom[:0])
	c.order = r.order
	c.attempts = c.attemptRoom[:0]
	// Held while sending: the reply may be read before the first attempt's
	// socket is written, and the reader waits for the lock.
	c.mu.Lock()
	end := c.sendLocked()
	switch {
	case end:
	case r.explored && len(c.attempts) == 1:
		// The explored server, asked beside the fastest, paid for.
		c.hedged, c.explored = true, true
		c.g.hedgeEvent(HedgeExplore)
		end = c.sendLocked()
	case len(c.attempts) == 1:
		c.armHedgeLocked(c.attempts[0], r.hedgeAfter)
		c.armLocked()
	default:
		c.armLocked()
	}
	c.mu.Unlock()
	if end {
		// Every attempt failed at once (no socket): the receiver is told
		// on a goroutine, never inside StartWire.
		go c.finish()
	}
}

// event runs on, one of the call's events, under the call's lock, and the
// one end (finish) when on says the resolution is over. A panic ends the
// resolution (recoverPanic).
func (c *WireCall) event(on func() (end bool)) {
	defer c.recoverPanic()
	if c.locked(on) {
		c.finish()
	}
}

// locked runs on under c.mu, unlocked again even when on panics.
func (c *WireCall) locked(on func() bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return on()
}

// datagram is an event: the reply (or the error) one of the call's
// attempt sockets read, d.raw in the reader's buffer.
func (c *WireCall) datagram(d datagram) { c.event(func() bool { return c.datagramLocked(d) }) }

func (c *WireCall) datagramLocked(d datagram) (end bool) {
	if c.state != callRunning {
		return false
	}
	a := attemptOf(c.attempts, d.sock)
	if a == nil || a.state != waitingUDP {
		return false
	}
	return c.replyLocked(a, d)
}

// expire is an event: the call's timer fired (the RTO of the newest
// attempt, or the deadline).
func (c *WireCall) expire() { c.event(c.expireLocked) }

func (c *WireCall) expireLocked() (end bool) {
	now := c.g.opts.Clock.Now()
	if c.state != callRunning {
		return false
	}
	if now.Before(c.due) {
		// A firing the call has moved past (callTimers), or one early by
		// a deadline without a monotonic reading: the call is set for due
		// again, which changes nothing for the former.
		c.g.timers.arm(c, c.due)
		return false
	}
	if !now.Before(c.deadline) {
		c.timedOut = true
		return c.endLocked()
	}
	if !c.hedgeAt.IsZero() && !now.Before(c.hedgeAt) {
		return c.hedgeLocked()
	}
	return c.rtoLocked()
}

// tcpDone is an event: the TCP retry of r's attempt returned.
func (c *WireCall) tcpDone(r attemptResult) { c.event(func() bool { return c.tcpDoneLocked(r) }) }

func (c *WireCall) tcpDoneLocked(r attemptResult) (end bool) {
	c.tcp--
	return c.landLocked(r.attempt, r)
}

// landLocked takes the result of an attempt that ran off the call's
// goroutines (a TCP retry, a DNS over TLS query), whose count c.tcp was
// just lowered: settled while the call runs; once it is ending, accounted
// as outstanding, and the last one to return ends the call.
func (c *WireCall) landLocked(a *attempt, r attemptResult) (end bool) {
	a.res = r
	switch c.state {
	case callRunning:
		return c.settleLocked(a)
	case callEnding:
		a.lapsed = true
		if c.tcp == 0 {
			c.state = callDone
			return true
		}
	}
	return false
}

// Kick is an event: the caller's context may be done (shutdown, a caller
// that gave up). If it is, the resolution ends as cancelled, the receiver
// called before Kick returns (so Kick must not be called holding a lock
// the receiver takes); otherwise, or once it ended, Kick does nothing.
func (c *WireCall) Kick() {
	if c.g == nil { // never started by a Group (a test's upstream)
		return
	}
	c.event(c.kickLocked)
}

// Yield ends a running resolution before its deadline, its slot wanted
// by another (the caller's in-flight cap): the attempts still waiting are
// accounted as timeouts (health, metrics) and the receiver gets
// ErrYielded, before Yield returns; so, as Kick, it must not be called
// holding a lock the receiver takes. It reports whether the resolution
// was running (a resolution that has ended, or is ending, is left alone).
func (c *WireCall) Yield() bool {
	if c.g == nil {
		return false
	}
	ran := false
	c.event(func() bool {
		if c.state != callRunning {
			return false
		}
		ran, c.yielded = true, true
		return c.endLocked()
	})
	return ran
}

func (c *WireCall) kickLocked() (end bool) {
	if c.state != callRunning || c.ctx.Err() == nil {
		return false
	}
	return c.endLocked()
}

// endLocked ends the resolution: its timer stopped, the TCP retries
// cancelled, the attempts still waiting accounted as outstanding. It
// reports true when finish is due now, false while TCP retries are still
// to return (the last one finishes).
func (c *WireCall) endLocked() bool {
	c.state = callEnding
	c.g.timers.disarm(c)
	c.hedgeAt = time.Time{}
	now := c.g.opts.Clock.Now()
	if c.hedgeWonLocked() {
		c.g.hedgeEvent(HedgeWon)
		if first := c.attempts[0]; (first.state == waitingUDP || first.state == waitingTLS) && now.Sub(first.sent) >= first.rto {
			// The first, unanswered past its RTO, would have been
			// retransmitted without hedging: the hedge was that packet
			// (hedge.go, the budget).
			c.g.budget.refund()
		}
	}
	if c.tcpCancel != nil {
		c.tcpCancel()
	}
	for _, a := range c.attempts {
		if a.state == waitingUDP || c.cancelTLSLocked(a) {
			a.res = attemptResult{attempt: a, rtt: now.Sub(a.sent)}
			a.lapsed = true
		}
	}
	if c.tcp > 0 {
		if w := c.winner; w != nil && w.res.inReader {
			w.res.raw = append([]byte(nil), w.res.raw...)
			w.res.inReader = false
		}
		return false
	}
	c.state = callDone
	return true
}

// finish is the one end of every resolution, once it is over
// (callDone): every socket closed, health and RTT accounted, and the
// receiver given the answer, the last failure reply, or the error.
func (c *WireCall) finish() {
	var endedRoom, outstandingRoom [4]attemptResult
	ended, outstanding := endedRoom[:0], outstandingRoom[:0]
	for _, a := range c.attempts {
		if a.sock != nil {
			a.sock.close()
		}
		if a.lapsed {
			outstanding = append(outstanding, a.res)
		} else {
			ended = append(ended, a.res)
		}
	}
	c.g.account(c.ctx, ended, outstanding, c.winner)
	c.deliver(c.outcome())
}

// hedgeWonLocked reports whether the answer is the hedge's reply
// (hedge.go): HedgeWon's event, and WireReply.Hedge.
func (c *WireCall) hedgeWonLocked() bool {
	return c.hedged && !c.explored && c.winner != nil && c.winner == c.attempts[1]
}

// outcome is what the receiver is given (the errors ReceiveWire names).
func (c *WireCall) outcome() (WireReply, error) {
	g, ctx := c.g, c.ctx
	switch {
	case c.winner != nil:
		a := c.winner
		return WireReply{Raw: a.res.raw, Scrub: a.res.scrub, Server: a.server.plain.Address(), Sent: a.sent, TCP: a.viaTCP,
			Hedge: c.hedgeWonLocked()}, nil
	case c.lastRcode != nil:
		a := c.lastRcode
		return WireReply{Raw: a.res.raw, Scrub: a.res.scrub, Server: a.server.plain.Address(), Sent: a.sent, TCP: a.viaTCP}, a.res.err
	case ctx.Err() != nil:
		return WireReply{}, fmt.Errorf("group %s: %w", g.name, classify(ctx, ctx.Err()))
	case c.yielded:
		return WireReply{}, fmt.Errorf("group %s: %w", g.name, ErrYielded)
	case c.timedOut:
		return WireReply{}, fmt.Errorf("group %s: %w: %w", g.name, ErrTimeout, context.DeadlineExceeded)
	case c.lastErr != nil:
		return WireReply{}, c.lastErr
	}
	return WireReply{}, fmt.Errorf("group %s: %w", g.name, ErrTimeout)
}

// deliver gives the receiver the outcome, once.
func (c *WireCall) deliver(wr WireReply, err error) {
	if !c.delivered.Swap(true) {
		c.recv.ReceiveWire(wr, err)
	}
}

// PanicError is what a StartWire receiver gets when the resolution
// panicked (it runs on the upstream's goroutines, not the caller's, so
// the caller's recoverer cannot see it): the value and the stack.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("resolution panicked: %v", e.Value) }

// recoverPanic, deferred by every event, ends a resolution that panicked
// with a PanicError, its sockets closed, unless the receiver was called
// already (a panic of its own is its to recover).
func (c *WireCall) recoverPanic() {
	if v := recover(); v != nil {
		if c.delivered.Load() {
			panic(v)
		}
		c.mu.Lock()
		c.state = callDone
		c.g.timers.disarm(c)
		if c.tcpCancel != nil {
			c.tcpCancel()
		}
		attempts := c.attempts
		for _, a := range attempts {
			c.cancelTLSLocked(a)
		}
		c.mu.Unlock()
		for _, a := range attempts {
			if a.sock != nil {
				a.sock.close()
			}
		}
		c.deliver(WireReply{}, &PanicError{Value: v, Stack: debug.Stack()})
	}
}
