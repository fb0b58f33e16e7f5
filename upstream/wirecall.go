package upstream

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/towerd/towerd/resolver/dnswire"
)

// StartWire is the one resolution of a Group (ExchangeWire and Exchange wait
// for it): the first attempt is sent by the caller's goroutine before
// StartWire returns, and when its reply is the first to come and an
// answer, the process's attempt reader (udpsock_linux.go) ends the
// resolution itself: it scrubs the reply, closes the socket, accounts
// health and RTT, and gives the reply to the receiver. A goroutine takes the
// resolution over (the same loop as ExchangeWire's, from where it stands)
// only for what needs waiting or blocking: the first attempt's RTO or the
// deadline running out (a timer's goroutine), a reply that is not clean
// (TC → TCP, SERVFAIL, REFUSED, one that does not parse: a new goroutine),
// a network error, or Kick.

// WireReceiver gets a StartWire resolution's outcome, exactly once.
type WireReceiver interface {
	// ReceiveWire is called with what ExchangeWire would have returned.
	// When wr.Raw is set it may be called on the attempt reader's
	// goroutine: it must not block, and wr.Raw is valid only until it
	// returns (a copy is the receiver's to make). Otherwise it is called
	// on a goroutine of the resolution's own, which it may keep.
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

	first    attempt
	firstErr error   // the first attempt could not be sent
	sock     udpSock // the first attempt's (Linux)

	delivered atomic.Bool // the receiver was called

	mu    sync.Mutex
	state callState
	ch    chan datagram // the resolution loop's, once it took over
	timer *callTimer    // while inline: the first attempt's RTO or the deadline

	ended [1]attemptResult   // the inline end's, for account
	buf   [maxWireQuery]byte // query's room
}

// maxWireQuery is the size of a query with the longest name (255 bytes),
// an OPT record and no options: the resolver's upstream query; a longer
// one is copied to the heap.
const maxWireQuery = 12 + 255 + 4 + 11

type callState uint8

const (
	callInline callState = iota // the reader may end it
	callLoop                    // a goroutine runs the resolution loop
	callDone
)

// StartWire starts resolving q with c, a zero WireCall, and returns at
// once; recv gets the outcome. Kick makes the resolution notice that q.Ctx
// is done; nothing else watches it until a goroutine takes the resolution
// over.
func (g *Group) StartWire(c *WireCall, q WireQuery, recv WireReceiver) {
	ctx, query, deadline := q.Ctx, q.Packed, q.Deadline
	c.g, c.ctx, c.recv = g, ctx, recv
	c.scope = Scope{Zone: g.scope.Zone, Below: q.Below}
	if ctxDeadline, ok := ctx.Deadline(); ok && (deadline.IsZero() || ctxDeadline.Before(deadline)) {
		deadline = ctxDeadline
	}
	if deadline.IsZero() {
		deadline = time.Now().Add(defaultResolutionTimeout)
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
	c.order = g.usable()

	// Held while sending: the reply may be read before openUDP returns.
	c.mu.Lock()
	defer c.mu.Unlock()
	var (
		out    chan datagram
		inline *WireCall
	)
	if inlineReplies {
		inline = c
	} else {
		c.handOverLocked()
		out = c.ch
	}
	s := c.order[0]
	s.mu.Lock()
	rto := s.attemptTimeoutLocked(&g.opts)
	s.mu.Unlock()
	a := &c.first
	*a = attempt{server: s, start: g.opts.Now(), sent: time.Now(), rto: rto}
	s.queries.Add(1)
	binary.BigEndian.PutUint16(c.query, randomID())
	sock, err := s.plain.openUDP(c.query, qend, out, inline)
	if err != nil {
		c.firstErr = fmt.Errorf("sending to %s over udp: %w", s.plain.Address(), classify(ctx, err))
	}
	a.sock = sock
	if err != nil || !inlineReplies {
		if c.state == callInline {
			c.handOverLocked()
		}
		go c.loop()
		return
	}
	c.timer = armCallTimer(c, min(rto, time.Until(deadline)))
}

// handOverLocked makes the resolution the loop's; c.mu is held.
func (c *WireCall) handOverLocked() {
	c.state = callLoop
	c.ch = make(chan datagram, c.g.opts.MaxAttempts)
}

// datagram is the reader's hand-over of the first attempt's reply (or
// error), d.raw in the reader's buffer.
func (c *WireCall) datagram(d datagram) {
	c.mu.Lock()
	if d.err == nil && c.state == callInline {
		c.first.server.heard() // as the loop does (silence.go)
	}
	switch c.state {
	case callDone:
		c.mu.Unlock()
		return
	case callLoop:
		c.giveLoopLocked(d)
		c.mu.Unlock()
		return
	}
	// The reader ends the resolution itself only for an answer: what needs
	// another attempt (a failure rcode, TC, a reply that does not parse, a
	// socket error) is the loop's.
	var m dnswire.Msg
	if d.err != nil || m.Parse(d.raw) != nil || m.Flags&dnswire.FlagTC != 0 || isFailureRcode(m.Rcode()) {
		c.handOverLocked()
		c.giveLoopLocked(d)
		c.mu.Unlock()
		c.timer.stop()
		go c.loop()
		return
	}
	c.state = callDone
	c.mu.Unlock()
	defer c.recoverPanic()
	c.timer.stop()
	a := &c.first
	a.state = ended
	raw, scrub := c.g.scrubRaw(&m, d.raw, &c.scope)
	c.ended[0] = attemptResult{attempt: a, raw: raw, err: scrub.Broken, rtt: c.g.opts.Now().Sub(a.start)}
	a.sock.close()
	c.g.account(c.ctx, c.ended[:], nil, scrub.Broken == nil)
	c.ended[0] = attemptResult{}
	c.deliver(WireReply{Raw: raw, Scrub: scrub, Server: a.server.plain.Address()}, scrub.Broken)
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

// recoverPanic, deferred, ends a resolution that panicked with a
// PanicError, unless the receiver was called already (a panic of its
// own is its to recover).
func (c *WireCall) recoverPanic() {
	if v := recover(); v != nil {
		if c.delivered.Load() {
			panic(v)
		}
		c.mu.Lock()
		c.state = callDone
		c.mu.Unlock()
		c.deliver(WireReply{}, &PanicError{Value: v, Stack: debug.Stack()})
	}
}

// giveLoopLocked queues d for the loop, its bytes copied out of the
// reader's buffer; c.mu is held.
func (c *WireCall) giveLoopLocked(d datagram) {
	if d.raw != nil {
		d.raw = append([]byte(nil), d.raw...)
	}
	select {
	case c.ch <- d:
	default: // a socket hands over one datagram before it is rearmed
	}
}

// expire is the timer's: the first attempt's RTO (or the deadline) ran
// out while the resolution was inline; the loop takes it over on the
// timer's goroutine and sends the next attempt.
func (c *WireCall) expire() {
	c.mu.Lock()
	if c.state != callInline {
		c.mu.Unlock()
		return
	}
	c.handOverLocked()
	c.mu.Unlock()
	c.loop()
}

// Kick hands an inline resolution to a goroutine, which sees that ctx is
// done (shutdown); it does nothing to one already handed over or ended.
func (c *WireCall) Kick() {
	c.mu.Lock()
	if c.g == nil || c.state != callInline { // never started by a Group (a test's upstream), or not inline
		c.mu.Unlock()
		return
	}
	c.handOverLocked()
	c.mu.Unlock()
	c.timer.stop()
	go c.loop()
}

// loop runs the resolution from where it stands (Group.resolve with c) and
// gives the outcome to the receiver.
func (c *WireCall) loop() {
	defer c.recoverPanic()
	r, err := c.g.resolve(c.ctx, c.deadline, c.query, c)
	c.mu.Lock()
	c.state = callDone
	c.mu.Unlock()
	wr := WireReply{Raw: r.raw, Scrub: r.scrub}
	if r.attempt != nil {
		wr.Server = r.attempt.server.plain.Address()
	}
	c.deliver(wr, err)
}

// callTimer is a pooled timer whose function runs its call's expire: a
// resolution that ends inline stops it and gives it back, costing no
// allocation.
type callTimer struct {
	t    *time.Timer
	call atomic.Pointer[WireCall]
}

var callTimers sync.Pool

func armCallTimer(c *WireCall, d time.Duration) *callTimer {
	ct, _ := callTimers.Get().(*callTimer)
	if ct == nil {
		ct = new(callTimer)
		ct.t = time.AfterFunc(time.Hour, ct.fire)
		ct.t.Stop()
	}
	ct.call.Store(c)
	ct.t.Reset(d)
	return ct
}

func (ct *callTimer) fire() {
	if c := ct.call.Swap(nil); c != nil {
		c.expire()
	}
}

// stop stops the timer; one that has fired already is not reused (its
// function may still be about to run).
func (ct *callTimer) stop() {
	if ct == nil {
		return
	}
	if ct.t.Stop() {
		ct.call.Store(nil)
		callTimers.Put(ct)
	}
}
