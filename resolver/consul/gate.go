package consul

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// The agent's backoff (issue 24). When a query fails because of the agent —
// it does not answer, answers 5xx, refuses the token — the loop does not
// back off on its own: it waits at the gate with every other loop that
// failed. One of them at a time holds the probe's turn: it waits out the
// agent's backoff (short: the agent is local, and a refused connection
// costs the servers nothing) and queries again. When that query succeeds
// the gate opens and every waiting loop reads its service again at once (at
// most resyncReads reads at a time), so answers are fresh within one probe
// interval of the agent's return, not after each service's own backoff.
//
// A reply is evidence about the agent only when it is newer than the
// gate's last change (issue 33): each query notes the gate's generation
// when it is sent, and a failure of a query sent before the gate last
// opened does not close it again (its loop just queries again), nor does
// a success of one sent before the gate closed open it. A loop slow to
// take its failure from the outage would otherwise close the gate the
// probe had just opened, and every watch would resync twice
// (TestGateResync saw two resyncs under CPU load).

// resyncReads bounds the reads at index 0 (a first read, a resync after a
// failure) in flight at once; blocking queries do not count.
const resyncReads = 8

// flapWindow: a gate that closes again within this time of opening keeps
// its backoff growing, so an agent that answers one query in two is not
// asked by every loop at the base interval.
const flapWindow = 10 * time.Second

type agentGate struct {
	mu       sync.Mutex
	closed   bool
	open     chan struct{} // closed when the agent answers again
	turn     chan struct{} // holds the probe's turn while the gate is closed
	failures int           // failed probes since the gate closed
	openedAt time.Time
	reopened uint64 // times the gate opened again: resyncs
	gen      uint64 // bumped whenever the gate opens or closes
}

// generation is the gate's state as a query is sent (see above).
func (g *agentGate) generation() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen
}

func newAgentGate() *agentGate {
	return &agentGate{open: make(chan struct{}), turn: make(chan struct{}, 1)}
}

// wait is called by a loop whose query, sent at the gate's generation
// sent, failed because of the agent. The gate closes (if open, and it has
// not opened since the query was sent: then wait returns at once); wait
// returns when the loop should query again: the gate opened, or the loop
// got the probe's turn and waited out the agent's backoff (probe is then
// true). probed says that the loop's failed query was itself the probe:
// its turn passes on and the backoff grows.
func (g *agentGate) wait(ctx context.Context, sent uint64, now time.Time, clk sleepClock, backoff func(int) time.Duration,
	probed bool) (probe bool, err error) {
	g.mu.Lock()
	if !g.closed && sent != g.gen {
		// The agent answered after this query was sent: its failure is
		// old news.
		g.mu.Unlock()
		return false, nil
	}
	if !g.closed {
		g.closed = true
		g.gen++
		g.open = make(chan struct{})
		if now.Sub(g.openedAt) > flapWindow {
			g.failures = 0
		}
		g.passTurn()
	} else if probed {
		g.failures++
		g.passTurn()
	}
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-g.turn:
	}
	g.mu.Lock()
	failures := g.failures
	g.mu.Unlock()
	if err := clk.Sleep(ctx, backoff(failures+1)); err != nil {
		g.giveBack()
		return false, err
	}
	return true, nil
}

// giveBack returns the probe's turn of a loop that ends, or whose probe
// could not be sent, to the others.
func (g *agentGate) giveBack() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.passTurn()
	}
}

// passTurn makes the probe's turn free for a waiting loop. Callers hold
// g.mu.
func (g *agentGate) passTurn() {
	select {
	case g.turn <- struct{}{}:
	default: // already free
	}
}

// answered is called after every query that reached the agent, sent at
// the gate's generation sent: a closed gate opens, unless it closed after
// the query was sent. It reports whether it opened.
func (g *agentGate) answered(sent uint64, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed || sent != g.gen {
		return false
	}
	g.closed = false
	g.gen++
	g.openedAt = now
	g.reopened++
	close(g.open)
	select {
	case <-g.turn:
	default:
	}
	return true
}

// isClosed reports whether the agent is failing.
func (g *agentGate) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// resyncs counts the times the gate opened again.
func (g *agentGate) resyncs() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reopened
}

// ofService reports whether err is about one service's reply rather than
// the agent: a body past its bound, or one that is not the JSON asked for.
// Such a watch backs off on its own and its names go to the agent's DNS.
func ofService(err error) bool {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	return errors.Is(err, ErrBodyTooLarge) || errors.As(err, &syntax) || errors.As(err, &typ)
}

// Backoff of a watch whose service's reply broke a bound: long, since the
// next reply is likely the same.
const (
	serviceBackoffBase = 5 * time.Second
	serviceBackoffMax  = 5 * time.Minute
)

// retryAfter is how a service loop waits after a failure: at the gate for
// the agent's failures, on its own long backoff for its service's, on the
// loop's backoff after a 429 (a pinned watch keeps retrying). probed is the
// loop's memory of holding the probe's turn, sent the gate's generation
// when its failed query was sent.
func (w *Watcher) retryAfter(probed *bool, sent *uint64) func(context.Context, error, int) error {
	return func(ctx context.Context, err error, n int) error {
		wasProbe := *probed
		*probed = false
		switch {
		case ofService(err):
			if wasProbe {
				w.gate.giveBack()
			}
			d := (&loop[int]{timing: Timing{BackoffBase: serviceBackoffBase, BackoffMax: serviceBackoffMax},
				jitter: w.jitter}).backoff(n)
			return w.clock.Sleep(ctx, d)
		case errors.Is(err, ErrThrottled):
			if wasProbe {
				w.gate.giveBack()
			}
			return w.clock.Sleep(ctx, (&loop[int]{timing: w.cfg.Timing, jitter: w.jitter}).backoff(n))
		}
		probe, err := w.gate.wait(ctx, *sent, w.clock.Now(), w.clock, w.agentBackoff, wasProbe)
		*probed = probe
		return err
	}
}

// agentBackoff is the gate's wait before the n-th probe.
func (w *Watcher) agentBackoff(n int) time.Duration {
	t := w.cfg.Timing
	return (&loop[int]{timing: Timing{BackoffBase: t.ProbeBase, BackoffMax: t.ProbeMax}, jitter: w.jitter}).backoff(n)
}
