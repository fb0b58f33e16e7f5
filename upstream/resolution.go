package upstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/towerd/towerd/resolver/dnswire"
)

// defaultResolutionTimeout bounds a resolution whose context has no deadline;
// it matches the default of upstream.timeout.
const defaultResolutionTimeout = 5 * time.Second

// attempt is one packet of a resolution: a query with its own socket, random
// source port and ID, sent to one server, whose reply is awaited until the
// resolution ends, not only until its RTO.
type attempt struct {
	server *server
	sock   *udpSock      // nil when the socket could not be opened
	tlsq   *tlsQuery     // an attempt to a DNS over TLS server: its query on the connection
	sent   time.Time     // by the group's clock: the RTT sample's start, and "did its RTO run out"
	rto    time.Duration // the server's retransmission timeout when it was sent
	state  attemptState
	viaTCP bool // asked again over TCP after a truncated reply
	// res is how it ended, once it did (or, for one still waiting when
	// the resolution ended, its state then); lapsed marks it outstanding
	// for account: it was still waiting, or timed out with the deadline.
	res    attemptResult
	lapsed bool
}

type attemptState uint8

const (
	waitingUDP attemptState = iota // its socket is armed
	waitingTCP                     // its reply was truncated; a goroutine asks again over TCP
	waitingTLS                     // queued on its server's TLS connection (tlscall.go)
	ended                          // its result is in
)

// attemptResult is how an attempt ended (or, for one still waiting when the
// resolution ended, its state then).
type attemptResult struct {
	attempt *attempt
	// raw is the reply: scrubbed when it is an answer (scrub says what was
	// dropped), as it came for a failure rcode (err a *RcodeError).
	raw   []byte
	scrub ScrubResult
	err   error
	rtt   time.Duration
	// inReader: raw is in the attempt reader's buffer, valid only during
	// the event that read it.
	inReader bool
}

// replied reports whether the attempt got a reply, whatever its rcode.
func (r *attemptResult) replied() bool { return r.raw != nil }

// The rules of a resolution's attempts, applied by the call's events
// (wirecall.go) under its lock. Each attempt is one packet with a socket
// of its own (udpsock.go), a fresh random source port and ID; its socket
// stays open, and its reply is heard, until the resolution ends. The next
// attempt goes to the next usable server when the newest attempt's RTO
// runs out or an attempt fails (SERVFAIL, REFUSED, a network error), up to
// MaxAttempts packets; the first reply to any attempt that is an answer
// wins; a truncated reply is asked again over TCP (RFC 7766 section 5), on
// a goroutine, the only one a resolution starts.

// nextLocked is the server the next attempt goes to, in turn, skipping
// those that answered this question with a failure rcode (SERVFAIL,
// REFUSED): a server that said it cannot answer is not asked the same
// question again in this resolution (dnsmasq asks a sole server once).
// A TLS server whose query is still waiting on its connection is not
// asked again either (tlscall.go). It is nil when none is left. A hedge
// sent to its first attempt's server (hedge.go, c.again) does not take a
// turn.
func (c *WireCall) nextLocked() *server {
	turn := len(c.attempts)
	if c.again {
		turn--
	}
	for i := range c.order {
		if s := c.order[(turn+i)%len(c.order)]; !c.answeredRcodeLocked(s) && !c.tlsWaitingLocked(s) {
			return s
		}
	}
	return nil
}

// answeredRcodeLocked reports whether s answered this question with a
// failure rcode.
func (c *WireCall) answeredRcodeLocked(s *server) bool {
	for _, a := range c.attempts {
		if a.server == s && a.state == ended && !a.lapsed && a.res.replied() && a.res.err != nil {
			return true
		}
	}
	return false
}

// waitingOnLocked reports whether an attempt still waiting may yet bring
// an answer: one to a server that has not answered with a failure rcode.
func (c *WireCall) waitingOnLocked() bool {
	for _, a := range c.attempts {
		if a.state != ended && !c.answeredRcodeLocked(a.server) {
			return true
		}
	}
	return false
}

// canSendLocked reports whether another attempt may be sent: attempts
// left, and a server left to ask.
func (c *WireCall) canSendLocked() bool {
	return len(c.attempts) < c.g.opts.MaxAttempts && c.nextLocked() != nil
}

// sendLocked sends the next attempt to the next server (nextLocked, which
// canSendLocked has found) and sets the timer for its RTO, which runs from
// the decision to send, as a.sent says. It reports true when the
// resolution is over: the attempt could not be sent, and that failure ends
// it (settleLocked).
func (c *WireCall) sendLocked() (end bool) {
	g := c.g
	s := c.nextLocked()
	s.mu.Lock()
	rto := s.attemptTimeoutLocked(&g.opts)
	s.mu.Unlock()
	a := &c.first
	if len(c.attempts) > 0 {
		a = new(attempt)
	}
	*a = attempt{server: s, sent: g.opts.Clock.Now(), rto: rto}
	c.attempts = append(c.attempts, a)
	c.pending++
	s.queries.Add(1)
	if !c.hedged || len(c.attempts) != 2 {
		g.budget.earn()
	}
	c.rtoOf = a
	if s.tls != nil {
		return c.sendTLSLocked(a)
	}
	dnswire.SetID(c.query, randomID())
	var into *udpSock
	if a == &c.first {
		into = &c.sock
	}
	sock, err := s.plain.openUDP(c.query, c.qend, c, into)
	if err != nil {
		a.res = attemptResult{attempt: a,
			err: fmt.Errorf("sending to %s over udp: %w", s.plain.Address(), classify(c.ctx, err))}
		return c.settleLocked(a)
	}
	a.sock = sock
	if len(c.attempts) > 1 {
		// The first is armed by StartWire, with its hedge.
		c.armLocked()
	}
	return false
}

// replyLocked judges what a's socket read: an error, a truncated reply
// (asked again over TCP), one that does not parse (a forgery or a broken
// server, the socket rearmed: the genuine reply may still come), or a
// reply judged (judge) and settled.
func (c *WireCall) replyLocked(a *attempt, d datagram) (end bool) {
	g := c.g
	r := attemptResult{attempt: a, rtt: g.opts.Clock.Since(a.sent)}
	if d.err != nil {
		r.err = fmt.Errorf("reading from %s over udp: %w", a.server.plain.Address(), classify(c.ctx, d.err))
	} else {
		// Its socket accepted it: whatever it says, and whether it parses
		// or not, the server is talking (silence.go).
		a.server.heard()
		var m dnswire.Msg
		if dnswire.Truncated(d.raw) {
			c.retryTCPLocked(a)
			return false
		}
		if m.Parse(d.raw) != nil {
			d.sock.plain.mismatches.Add(1)
			d.sock.rearm()
			return false
		}
		g.judge(a.server.plain, &m, d.raw, &c.scope, &r)
		if r.err != nil {
			// A failure reply may be the outcome later, after the reader's
			// buffer is reused.
			r.raw = append([]byte(nil), r.raw...)
		} else {
			r.inReader = len(r.raw) > 0 && &r.raw[0] == &d.raw[0]
		}
	}
	a.res = r
	return c.settleLocked(a)
}

// settleLocked takes the result of attempt a (a.res) and reports whether
// it ends the resolution: an answer, a timeout (only the resolution's own
// deadline times an attempt out), a failure another server would fare no
// better with (a cancelled caller, a query that cannot be sent, a broken
// chain), or the last attempt's failure with none left waiting that may
// yet answer. Otherwise a failure (SERVFAIL, REFUSED, a network error)
// sends the next attempt at once, to a server that has not answered with
// a failure rcode: this one is over, so the next need not wait for its
// RTO.
func (c *WireCall) settleLocked(a *attempt) (end bool) {
	a.state = ended
	c.pending--
	r := &a.res
	kind := ErrorKind(r.err)
	switch {
	case kind == KindTimeout:
		a.lapsed = true
		c.lastErr = r.err
		return c.endLocked()
	case r.err == nil:
		c.winner = a
		return c.endLocked()
	}
	if r.replied() {
		c.lastRcode = a
	}
	c.lastErr = r.err
	switch {
	case kind == KindOther || kind == KindChain:
		// A cancelled caller, a query the server cannot be sent, or zone
		// data whose chain is broken: another server would fare no better.
		return c.endLocked()
	case c.canSendLocked():
		return c.sendLocked()
	case c.pending == 0 || !c.waitingOnLocked():
		return c.endLocked()
	}
	return false
}

// rtoLocked is the newest attempt's RTO running out: if it is still
// waiting, its server's next RTO doubles (RFC 6298 section 5.5) and the
// server is suspect (silence.go); attempts and servers left, the next one
// is sent; the timer then waits for the deadline, or the new attempt's RTO.
func (c *WireCall) rtoLocked() (end bool) {
	if newest := c.attempts[len(c.attempts)-1]; newest.state == waitingUDP || newest.state == waitingTLS {
		newest.server.backOff()
		c.g.suspect(newest.server, newest.sent)
	}
	c.rtoOf = nil
	if c.canSendLocked() {
		return c.sendLocked()
	}
	c.armLocked()
	return false
}

// retryTCPLocked asks a's server again over TCP (RFC 7766 section 5), on
// a goroutine that hands its result to tcpDone.
func (c *WireCall) retryTCPLocked(a *attempt) {
	a.state, a.viaTCP = waitingTCP, true
	c.tcp++
	if c.tcpCtx == nil {
		c.tcpCtx, c.tcpCancel = context.WithDeadline(c.ctx, c.deadline)
	}
	// A copy: the next attempt writes its own ID into the query.
	go c.g.exchangeTCP(c.tcpCtx, a, append([]byte(nil), c.query...), &c.scope, c)
}

// judge settles a reply p's attempt got, m its view: a failure rcode
// (SERVFAIL, REFUSED) fails the attempt, with the reply as it came; any
// other reply is an answer, scrubbed, unless its chain is broken
// (ErrBrokenChain: a loop, or too long). raw is the caller's: an answer the
// scrubber leaves alone is raw itself.
func (g *Group) judge(p *Plain, m *dnswire.Msg, raw []byte, scope *Scope, r *attemptResult) {
	if rcode := m.Rcode(); isFailureRcode(rcode) {
		r.raw, r.err = raw, &RcodeError{Server: p.addr, Rcode: rcode}
		return
	}
	r.raw, r.scrub = g.scrubRaw(m, raw, scope)
	r.err = r.scrub.Broken
}

// exchangeTCP asks a's server query again over TCP and hands the result
// to the call.
func (g *Group) exchangeTCP(ctx context.Context, a *attempt, query []byte, scope *Scope, c *WireCall) {
	p := a.server.plain
	raw, err := p.exchangeTCP(ctx, query)
	r := attemptResult{attempt: a, err: err, rtt: g.opts.Clock.Since(a.sent)}
	if err == nil {
		a.server.heard() // a reply, parsed or not (silence.go)
		var m dnswire.Msg
		if perr := m.Parse(raw); perr != nil {
			r.err = fmt.Errorf("reading from %s over tcp: %w: %w", p.addr, ErrNetwork, perr)
		} else {
			g.judge(p, &m, raw, scope, &r)
		}
	}
	c.tcpDone(r)
}

// attemptOf finds the attempt whose socket is sock.
func attemptOf(attempts []*attempt, sock *udpSock) *attempt {
	for _, a := range attempts {
		if a.sock == sock {
			return a
		}
	}
	return nil
}

// account settles a finished resolution: counters, Observe, RTT samples and
// health. ended are the attempts that ended on their own (a reply or an
// error), outstanding the ones still waiting when the resolution ended.
//
// A server that replied to any attempt, whatever the rcode, is up; one
// that replied to none, while an attempt to it failed on the network or
// waited out its full RTO, is suspect: its silence watcher decides
// (silence.go). A slow server whose first packet is answered after its
// retransmission went out has therefore not failed, and an rcode about one
// name never counts. A server that stays silent while another answers is
// suspect too: a dead first server would otherwise hold every query for
// its RTO forever.
func (g *Group) account(ctx context.Context, ended, outstanding []attemptResult, winner *attempt) {
	answered := winner != nil
	now := g.opts.Clock.Now()
	callerCancelled := errors.Is(ctx.Err(), context.Canceled)
	replied := map[*server]bool{}
	for _, r := range ended {
		if r.replied() {
			replied[r.attempt.server] = true
		}
	}
	for _, r := range outstanding {
		// A reply that raced the end still proves the server alive.
		if r.replied() {
			replied[r.attempt.server] = true
		}
	}
	// failed holds, per server that answered nothing, the send time of
	// its first attempt that met a network error or ran out its RTO.
	failed := map[*server]time.Time{}
	fail := func(a *attempt) {
		if t, ok := failed[a.server]; !ok || a.sent.Before(t) {
			failed[a.server] = a.sent
		}
	}
	observe := func(a *attempt, d time.Duration, kind string) {
		a.server.count(kind)
		if g.opts.Observe != nil {
			g.opts.Observe(a.server.plain.Address(), d, kind)
		}
	}
	for _, r := range ended {
		kind := ErrorKind(r.err)
		if r.replied() {
			r.attempt.server.addSample(r.rtt)
		} else if kind == KindNetwork {
			fail(r.attempt)
		}
		observe(r.attempt, r.rtt, kind)
	}
	for _, r := range outstanding {
		a := r.attempt
		if r.replied() {
			// Answered as the resolution ended: a sample like any other.
			a.server.addSample(r.rtt)
		}
		ranRTO := now.Sub(a.sent) >= a.rto
		if answered && !r.replied() && !overtakenByItsOwn(a, winner) {
			// A sibling's answer overtook it: its server takes at least
			// this long (latency.go).
			a.server.addLowerBound(r.rtt)
		}
		switch {
		case r.replied() || replied[a.server]:
			observe(a, r.rtt, KindSuperseded)
		case answered && !ranRTO:
			// The winner came before its RTO ran out, as it does to a
			// hedge (hedge.go) or an exploration's first attempt: the RTO
			// still runs out of the resolution's sight (silence.go), so a
			// server only ever asked in a race is judged like any other.
			observe(a, r.rtt, KindSuperseded)
			if !a.server.heardSince(a.sent) {
				g.suspectAt(a.server, a.sent, a.sent.Add(a.rto))
			}
		case callerCancelled:
			observe(a, r.rtt, KindOther)
		default:
			observe(a, r.rtt, KindTimeout)
			if ranRTO {
				fail(a)
			}
		}
	}
	for s := range replied {
		g.markUp(s)
	}
	for s, sent := range failed {
		if !replied[s] {
			g.suspect(s, sent)
		}
	}
}

// overtakenByItsOwn reports whether a, still waiting, was overtaken by
// the answer to a later attempt to the same server (a hedge or a
// retransmission from a new port): the server answered the later packet
// first, so a's packet (or its reply) was most likely lost, and its wait
// says nothing of the server's latency. Counted as one, each lost packet
// of a lossy server would push its srtt and RTO up by a whole RTO's wait.
func overtakenByItsOwn(a, winner *attempt) bool {
	return winner.server == a.server && winner.sent.After(a.sent)
}

// armLocked sets the call's timer for the RTO of rtoOf or the deadline,
// whichever comes first.
func (c *WireCall) armLocked() {
	due := c.deadline
	if a := c.rtoOf; a != nil {
		due = minTime(due, a.sent.Add(a.rto))
	}
	if !c.hedgeAt.IsZero() {
		due = minTime(due, c.hedgeAt)
	}
	c.due = due
	c.g.timers.arm(c, due)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
