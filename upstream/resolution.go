package upstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
)

// defaultResolutionTimeout bounds an Exchange whose context has no deadline;
// it matches the default of upstream.timeout.
const defaultResolutionTimeout = 5 * time.Second

// attempt is one packet of a resolution: a query with its own socket, random
// source port and ID, sent to one server, whose reply is awaited until the
// resolution ends, not only until its RTO.
type attempt struct {
	server *server
	sock   *udpSock      // nil when the socket could not be opened
	start  time.Time     // by GroupOptions.Now, for the RTT sample
	sent   time.Time     // by the real clock, for "did its RTO run out"
	rto    time.Duration // the server's retransmission timeout when it was sent
	state  attemptState
}

type attemptState uint8

const (
	waitingUDP attemptState = iota // its socket is armed
	waitingTCP                     // its reply was truncated; a goroutine asks again over TCP
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
}

// replied reports whether the attempt got a reply, whatever its rcode.
func (r *attemptResult) replied() bool { return r.raw != nil }

// Exchange resolves m through the group and returns the scrubbed reply; see
// ExchangeScrubbed, whose ScrubResult it drops. A caller that caches or
// relays replies should use ExchangeScrubbed and act on ChaseName.
func (g *Group) Exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	reply, _, err := g.ExchangeScrubbed(ctx, m)
	return reply, err
}

// ExchangeScrubbed resolves m: it sends a first attempt to the first usable
// server and, each time the newest attempt's RTO runs out or an attempt
// fails (SERVFAIL, REFUSED, network error), one more to the next server, up
// to MaxAttempts packets. Every attempt's socket stays open until the
// resolution ends, and the first reply to any of them that is an answer
// (any rcode but SERVFAIL and REFUSED) wins: a slow server whose reply to
// the first packet arrives after the third was sent is still heard. The
// resolution ends then, when ctx is done (only the caller's deadline gives
// up on a slow server; without one, 5s does), or when every attempt has
// failed. The reply is scrubbed (with the group's zone as its scope) and
// carries m's ID. Without an answer, the last SERVFAIL or REFUSED reply is
// returned with a *RcodeError, else an error wrapping ErrTimeout or
// ErrNetwork, or the context's error when the caller cancelled.
func (g *Group) ExchangeScrubbed(ctx context.Context, m *dns.Msg) (*dns.Msg, ScrubResult, error) {
	reply, _, result, err := g.exchange(ctx, m)
	return reply, result, err
}

// exchange is Exchange and ExchangeScrubbed: the one resolution
// (ExchangeWire) of m packed, its reply unpacked for a caller that wants a
// dns.Msg.
func (g *Group) exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, string, ScrubResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", ScrubResult{}, fmt.Errorf("group %s: %w", g.name, classify(ctx, err))
	}
	bufp := packPool.Get().(*[]byte)
	defer packPool.Put(bufp)
	packed, err := m.PackBuffer((*bufp)[:cap(*bufp)])
	if err != nil {
		return nil, "", ScrubResult{}, fmt.Errorf("group %s: packing query: %w", g.name, err)
	}
	*bufp = packed[:0]
	wr, err := g.ExchangeWire(ctx, packed, time.Time{})
	if wr.Raw == nil {
		return nil, "", ScrubResult{}, err
	}
	reply := new(dns.Msg)
	if uerr := reply.Unpack(wr.Raw); uerr != nil {
		// The view read it, miekg/dns does not (a record the view does not
		// read through): as a reply that does not unpack, no answer.
		return nil, "", ScrubResult{}, fmt.Errorf("group %s: %w: reply from %s does not unpack: %w", g.name, ErrNetwork, wr.Server, uerr)
	}
	reply.Id = m.Id
	return reply, wr.Server, wr.Scrub, err
}

// resolve runs the attempts of one resolution. The query is packed once;
// each attempt gets a fresh random ID in those bytes and a socket of its
// own (udpsock.go), whose replies the process's one reader hands to this
// goroutine: no goroutine per attempt, except for the rare TCP retry of a
// truncated reply. It returns only after every attempt has ended and every
// socket is closed, so a resolution leaves nothing behind.
//
// It ends at deadline, or when ctx is done: the deadline is watched by a
// pooled timer, so a caller need not make a context for it.
//
// The first attempt was sent already by StartWire (wirecall.go): the loop
// goes on from it, its RTO counted from when it was sent, and its socket's
// datagrams come on call.ch. The reply it returns is scrubbed (judge).
func (g *Group) resolve(ctx context.Context, deadline time.Time, packed []byte, call *WireCall) (attemptResult, error) {
	order := call.order
	qend := call.qend
	// Cancelling attemptCtx ends the TCP retries at once; made with the
	// first one, as few replies are truncated.
	var (
		tcpCtx         context.Context
		cancelAttempts context.CancelFunc = func() {}
	)
	defer func() { cancelAttempts() }()
	// Each socket hands over at most one datagram before it is rearmed (the
	// call's channel has room for all), and each TCP retry ends once.
	datagrams := call.ch
	var results chan attemptResult // made with the first TCP retry
	var (
		attempts = make([]*attempt, 0, g.opts.MaxAttempts)
		failed   []attemptResult // attempts whose socket could not be opened or written
		pending  int
		tcp      int // attempts in waitingTCP
		rtoTimer = timerPool.Get().(*time.Timer)
		endTimer = timerPool.Get().(*time.Timer)
		timedOut bool // the deadline passed
	)
	endTimer.Reset(time.Until(deadline))
	defer func() {
		rtoTimer.Stop()
		timerPool.Put(rtoTimer)
		endTimer.Stop()
		timerPool.Put(endTimer)
	}()
	defer func() {
		for _, a := range attempts {
			if a.sock != nil {
				a.sock.close()
			}
		}
	}()
	// answeredRcode are the servers that answered this question with a
	// failure rcode (SERVFAIL, REFUSED): a server that said it cannot
	// answer is not asked the same question again in this resolution
	// (dnsmasq asks a sole server once; towerd asked it three times).
	var answeredRcode []*server
	// next is the server the next attempt goes to, in turn, skipping those;
	// nil when none is left.
	next := func() *server {
		for i := range order {
			if s := order[(len(attempts)+i)%len(order)]; !slices.Contains(answeredRcode, s) {
				return s
			}
		}
		return nil
	}
	// waitingOn reports whether an attempt still waiting may yet bring an
	// answer: one to a server that has not answered with a failure rcode.
	waitingOn := func() bool {
		for _, a := range attempts {
			if a.state != ended && !slices.Contains(answeredRcode, a.server) {
				return true
			}
		}
		return false
	}
	send := func() {
		s := next()
		s.mu.Lock()
		rto := s.attemptTimeoutLocked(&g.opts)
		s.mu.Unlock()
		a := &attempt{server: s, start: g.opts.Now(), sent: time.Now(), rto: rto}
		attempts = append(attempts, a)
		pending++
		s.queries.Add(1)
		// The RTO runs from the decision to send, as a.sent says.
		rtoTimer.Reset(rto)
		binary.BigEndian.PutUint16(packed, randomID())
		sock, err := s.plain.openUDP(packed, qend, datagrams, nil)
		if err != nil {
			failed = append(failed, attemptResult{attempt: a,
				err: fmt.Errorf("sending to %s over udp: %w", s.plain.Address(), classify(ctx, err))})
		}
		a.sock = sock
	}
	// retryTCP asks a's server again over TCP (RFC 7766 section 5).
	retryTCP := func(a *attempt) {
		a.state = waitingTCP
		tcp++
		if tcpCtx == nil {
			tcpCtx, cancelAttempts = context.WithDeadline(ctx, deadline)
			results = make(chan attemptResult, g.opts.MaxAttempts)
		}
		// A copy: the next attempt writes its own ID into packed.
		go g.exchangeTCP(tcpCtx, a, append([]byte(nil), packed...), &call.scope, results)
	}

	var (
		winner, lastRcode *attemptResult
		lastErr           error
		// ended holds the attempts that ended before the resolution, with
		// room for all of them so winner and lastRcode stay valid.
		endedAttempts = make([]attemptResult, 0, g.opts.MaxAttempts)
		outstanding   []attemptResult
	)
	{
		a := &call.first
		attempts = append(attempts, a)
		pending++
		if call.firstErr != nil {
			failed = append(failed, attemptResult{attempt: a, err: call.firstErr})
		}
		rtoTimer.Reset(a.rto - time.Since(a.sent))
	}
loop:
	for {
		var r attemptResult
		if len(failed) > 0 {
			r, failed = failed[0], failed[1:]
			goto settle
		}
		select {
		case d := <-datagrams:
			a := attemptOf(attempts, d.sock)
			if a == nil || a.state != waitingUDP {
				continue
			}
			r = attemptResult{attempt: a, rtt: g.opts.Now().Sub(a.start)}
			if d.err == nil {
				// Its socket accepted it: whatever it says, and whether
				// it unpacks or not, the server is talking (silence.go).
				a.server.heard()
			}
			if d.err != nil {
				r.err = fmt.Errorf("reading from %s over udp: %w", a.server.plain.Address(), classify(ctx, d.err))
			} else {
				var m dnswire.Msg
				truncated := len(d.raw) > 3 && binary.BigEndian.Uint16(d.raw[2:])&dnswire.FlagTC != 0
				if truncated {
					retryTCP(a)
					continue
				}
				if m.Parse(d.raw) != nil {
					// A forgery or a broken server; the genuine reply may
					// still come.
					d.sock.plain.mismatches.Add(1)
					d.sock.rearm()
					continue
				}
				g.judge(a.server.plain, &m, d.raw, &call.scope, &r)
			}
		case r = <-results:
			if r.attempt.state == waitingTCP {
				tcp--
			}
		case <-rtoTimer.C:
			newest := attempts[len(attempts)-1]
			if newest.state == waitingUDP {
				newest.server.backOff()
				g.suspect(newest.server, newest.sent)
			}
			if len(attempts) < g.opts.MaxAttempts && next() != nil {
				send()
			}
			continue
		case <-endTimer.C:
			timedOut = true
			break loop
		case <-ctx.Done():
			break loop
		}
	settle:
		r.attempt.state = ended
		pending--
		if ErrorKind(r.err) == KindTimeout {
			// Only the resolution's own deadline times an attempt out.
			outstanding = append(outstanding, r)
			lastErr = r.err
			break loop
		}
		endedAttempts = append(endedAttempts, r)
		if r.err == nil {
			winner = &endedAttempts[len(endedAttempts)-1]
			break loop
		}
		if r.replied() {
			lastRcode = &endedAttempts[len(endedAttempts)-1]
			if !slices.Contains(answeredRcode, r.attempt.server) {
				answeredRcode = append(answeredRcode, r.attempt.server)
			}
		}
		lastErr = r.err
		if kind := ErrorKind(r.err); kind == KindOther || kind == KindChain {
			// A cancelled caller, a query the server cannot be sent, or
			// zone data whose chain is broken: another server would fare
			// no better.
			break loop
		}
		// SERVFAIL, REFUSED or a network error: this attempt is over,
		// so the next need not wait for its RTO.
		if len(attempts) < g.opts.MaxAttempts && next() != nil {
			send()
		} else if pending == 0 || !waitingOn() {
			break loop
		}
	}
	cancelAttempts()
	for _, a := range attempts {
		if a.state == waitingUDP {
			outstanding = append(outstanding, attemptResult{attempt: a, rtt: g.opts.Now().Sub(a.start)})
		}
	}
	for ; tcp > 0; tcp-- {
		outstanding = append(outstanding, <-results)
	}
	g.account(ctx, endedAttempts, outstanding, winner != nil)

	switch {
	case winner != nil:
		return *winner, nil
	case lastRcode != nil:
		return *lastRcode, lastRcode.err
	case ctx.Err() != nil:
		return attemptResult{}, fmt.Errorf("group %s: %w", g.name, classify(ctx, ctx.Err()))
	case timedOut:
		return attemptResult{}, fmt.Errorf("group %s: %w: %w", g.name, ErrTimeout, context.DeadlineExceeded)
	case lastErr != nil:
		return attemptResult{}, lastErr
	}
	return attemptResult{}, fmt.Errorf("group %s: %w", g.name, ErrTimeout)
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
// to out.
func (g *Group) exchangeTCP(ctx context.Context, a *attempt, query []byte, scope *Scope, out chan<- attemptResult) {
	p := a.server.plain
	raw, err := p.exchangeTCP(ctx, query)
	r := attemptResult{attempt: a, err: err, rtt: g.opts.Now().Sub(a.start)}
	if err == nil {
		a.server.heard() // a reply, parsed or not (silence.go)
		var m dnswire.Msg
		if perr := m.Parse(raw); perr != nil {
			r.err = fmt.Errorf("reading from %s over tcp: %w: %w", p.addr, ErrNetwork, perr)
		} else {
			g.judge(p, &m, raw, scope, &r)
		}
	}
	out <- r
}

// timerPool recycles the resolutions' RTO timers. A stopped timer's channel
// holds no stale tick (Go 1.23 timers), so Reset is all a reuse needs.
var timerPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

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
func (g *Group) account(ctx context.Context, ended, outstanding []attemptResult, answered bool) {
	now := time.Now()
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
		switch {
		case r.replied() || replied[a.server] || (answered && !ranRTO):
			// Its server replied, or the winner came before its RTO ran out.
			observe(a, r.rtt, KindSuperseded)
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
