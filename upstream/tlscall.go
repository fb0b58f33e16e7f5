package upstream

import (
	"fmt"

	"github.com/towerd/towerd/resolver/dnswire"
)

// A resolution's attempt to a DNS over TLS server (tls.go) is one more
// kind of attempt: queued on the server's connection instead of sent
// from a socket of its own, its reply or failure brought to the call by
// the connection's goroutines as an event (tlsReply), like a TCP retry's
// (the call's tcp count holds both: a resolution that ends gives up the
// TLS queries it can and waits for the ones whose reply is being handed
// over, so no event comes after finish). Its RTO, the next attempt, the
// judge, the scrubber, health and the silence rule are the same as for a
// packet.

// sendTLSLocked queues a's query on its server's connection; a failure to
// queue (the last connection failed and its backoff runs) settles a now.
func (c *WireCall) sendTLSLocked(a *attempt) (end bool) {
	q, err := a.server.tls.send(c.query, c.qend, c, a)
	if err != nil {
		a.res = attemptResult{attempt: a, err: fmt.Errorf("sending to %s: %w", a.server.tls.display, err)}
		return c.settleLocked(a)
	}
	a.tlsq, a.state = q, waitingTLS
	c.tcp++
	if len(c.attempts) > 1 {
		// The first is armed by StartWire, with its hedge.
		c.armLocked()
	}
	return false
}

// tlsReply is an event: the connection brought the reply (raw, in its
// reader's buffer) or the failure of q, one of the call's attempts.
func (c *WireCall) tlsReply(q *tlsQuery, raw []byte, err error) {
	c.event(func() bool { return c.tlsReplyLocked(q.a, raw, err) })
}

func (c *WireCall) tlsReplyLocked(a *attempt, raw []byte, err error) (end bool) {
	c.tcp--
	r := attemptResult{attempt: a, err: err, rtt: c.g.opts.Clock.Since(a.sent)}
	if err == nil {
		var m dnswire.Msg
		if perr := m.Parse(raw); perr != nil {
			r.err = fmt.Errorf("reading from %s: %w: %w", a.server.tls.display, ErrNetwork, perr)
		} else {
			c.g.judge(a.server.plain, &m, raw, &c.scope, &r)
			if r.err != nil {
				// A failure reply may be the outcome later, after the
				// reader's buffer is reused.
				r.raw = append([]byte(nil), r.raw...)
			} else {
				r.inReader = len(r.raw) > 0 && &r.raw[0] == &raw[0]
			}
		}
	}
	return c.landLocked(a, r)
}

// cancelTLSLocked gives up a's query as the resolution ends: true when
// the connection will not bring it (a is outstanding now), false when its
// reply is being handed over (the call waits for that event).
func (c *WireCall) cancelTLSLocked(a *attempt) bool {
	if a.state != waitingTLS || !a.tlsq.cancel() {
		return false
	}
	c.tcp--
	return true
}

// tlsWaitingLocked reports whether s is a TLS server with an attempt of
// this call still waiting on its connection: a stream is reliable (RFC
// 7766), and a second query would only wait in the same line, so the
// next attempt goes to another server, or none does until the first
// fails or the deadline passes.
func (c *WireCall) tlsWaitingLocked(s *server) bool {
	if s.tls == nil {
		return false
	}
	for _, a := range c.attempts {
		if a.server == s && a.state == waitingTLS {
			return true
		}
	}
	return false
}
