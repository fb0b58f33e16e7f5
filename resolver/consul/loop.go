package consul

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/towerd/towerd/resolver/clock"
)

// Timing of the blocking-query loops. The zero value of each field means the
// default next to it.
type Timing struct {
	// Wait is how long one blocking query may be held by the agent before it
	// returns unchanged (Consul caps it at 10 minutes). Default 60 s.
	Wait time.Duration
	// MinInterval is the least time between the starts of two queries of one
	// loop, so a catalog that changes constantly cannot turn the loop into a
	// busy loop against the agent. Default 100 ms (consul-template's value).
	MinInterval time.Duration
	// Jitter is the most added at random to MinInterval, so the loops of one
	// daemon do not query in lock step. Default 20 ms.
	Jitter time.Duration
	// BackoffBase is the wait after the first failed query; it doubles with
	// each further failure up to BackoffMax and returns to the base after a
	// success. Defaults 250 ms and 5 s: the agent is local, so a short cap
	// brings answers back soon after it restarts at little cost.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// ProbeBase and ProbeMax are the same for the agent as a whole, when
	// queries fail because of it (see agentGate): one probe at a time, so
	// the cap is short. Defaults 50 ms and 500 ms: answers are fresh within
	// about half a second of a restarted agent answering, and a refused
	// connection to a local agent costs nothing.
	ProbeBase time.Duration
	ProbeMax  time.Duration
}

// Defaults of Timing.
const (
	DefaultWait        = 60 * time.Second
	DefaultMinInterval = 100 * time.Millisecond
	DefaultJitter      = 20 * time.Millisecond
	DefaultBackoffBase = 250 * time.Millisecond
	DefaultBackoffMax  = 5 * time.Second
	DefaultProbeBase   = 50 * time.Millisecond
	DefaultProbeMax    = 500 * time.Millisecond
)

func (t Timing) withDefaults() Timing {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&t.Wait, DefaultWait)
	def(&t.MinInterval, DefaultMinInterval)
	def(&t.Jitter, DefaultJitter)
	def(&t.BackoffBase, DefaultBackoffBase)
	def(&t.BackoffMax, DefaultBackoffMax)
	def(&t.ProbeBase, DefaultProbeBase)
	def(&t.ProbeMax, DefaultProbeMax)
	return t
}

// sleepClock is the one clock (resolver/clock, issue 33) as the watch
// uses it: every time it reads, every timer it sets (the watch set's
// checks), and the loops' waits, which sleep on it. Tests give
// test/dnstest's Clock, whose Sleep returns at once having moved the
// clock on, so backoff and spacing are checked without waiting.
type sleepClock interface {
	clock.Clock
	// Sleep waits d or until ctx ends, and returns ctx.Err() in that case.
	Sleep(ctx context.Context, d time.Duration) error
}

// timerClock is a clock.Clock (Config.Clock) whose Sleep waits on its
// timers: the wall clock's in production; a daemon test's fake clock, on
// which the loops then wait until the test advances it (a clock whose
// Sleep moves it on, as test/dnstest's does, would let one loop's wait
// move the time every other part of that daemon reads).
type timerClock struct{ clock.Clock }

func (c timerClock) Sleep(ctx context.Context, d time.Duration) error {
	return clock.Sleep(ctx, c.Clock, d)
}

// loop is one blocking-query loop in the manner of consul-template's
// watch/view.go: fetch with the last index, keep the index rules, drop
// answers that change nothing, space queries out, back off on errors.
type loop[T any] struct {
	timing Timing
	clock  sleepClock
	// jitter returns a random duration in [0, n); tests make it fixed.
	jitter func(n time.Duration) time.Duration

	// fetch runs one query with waitIndex (0: return at once). It returns
	// the result and the X-Consul-Index of the reply.
	fetch func(ctx context.Context, waitIndex uint64) (T, uint64, error)
	// equal reports whether two results mean the same records; an equal
	// result is dropped instead of delivered.
	equal func(a, b T) bool
	// deliver receives every new result, in order, on the loop's goroutine.
	deliver func(T)
	// contact is called after every query that reached the agent (nil
	// error), with the index the loop holds now; failure after every error
	// with the number of consecutive failures so far.
	contact func(index uint64)
	failure func(err error, consecutive int)
	// retry waits after a failure before the next query and returns
	// ctx.Err() if ctx ends first; nil = the loop's own backoff.
	retry func(ctx context.Context, err error, consecutive int) error

	// seed, if seeded, is a result read before the loop started (a first
	// read) and its index: the loop delivers it and goes on from there,
	// blocking, instead of reading it again.
	seed      T
	seedIndex uint64
	seeded    bool
}

func randomJitter(n time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	return rand.N(n)
}

// run loops until ctx ends.
func (l *loop[T]) run(ctx context.Context) {
	var (
		index    uint64 // the index sent with the next query
		last     T
		have     bool
		failures int
	)
	if l.seeded {
		index, last, have = max(l.seedIndex, 1), l.seed, true
		l.deliver(l.seed)
		if l.contact != nil {
			l.contact(index)
		}
	}
	for ctx.Err() == nil {
		start := l.clock.Now()
		v, got, err := l.fetch(ctx, index)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// After a failure the agent may be a new one whose index is lower
			// than ours; blocking on ours could then wait out the whole Wait
			// before noticing. Resync with a query that returns at once.
			index = 0
			failures++
			if l.failure != nil {
				l.failure(err, failures)
			}
			wait := func(ctx context.Context, _ error, n int) error { return l.clock.Sleep(ctx, l.backoff(n)) }
			if l.retry != nil {
				wait = l.retry
			}
			if wait(ctx, err, failures) != nil {
				return
			}
			continue
		}
		failures = 0

		switch {
		case got < index:
			// The index went backwards: the agent or its servers lost their
			// state (a restart, a snapshot restore). Blocking on the old
			// index could wait for a change that never comes, so start over
			// with a query that returns at once.
			index = 0
		case got == index && have:
			// The wait ran out without a change.
		default:
			// An index of 0 would make every following query return at once
			// (Consul's documented sanity rule): never send less than 1.
			index = max(got, 1)
			if !have || !l.equal(last, v) {
				last, have = v, true
				l.deliver(v)
			}
		}
		if l.contact != nil {
			l.contact(index)
		}

		// Space query starts out. A change is delivered at once above; only
		// the next query waits.
		next := start.Add(l.timing.MinInterval + l.jitter(l.timing.Jitter))
		if l.clock.Sleep(ctx, next.Sub(l.clock.Now())) != nil {
			return
		}
	}
}

// backoff is the wait after the given number of consecutive failures:
// BackoffBase·2^(n-1) capped at BackoffMax, of which the upper half is
// random ("equal jitter"), so many loops failing together spread out.
func (l *loop[T]) backoff(consecutive int) time.Duration {
	d := l.timing.BackoffBase
	for i := 1; i < consecutive && d < l.timing.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, l.timing.BackoffMax)
	half := d / 2
	return half + l.jitter(half+1)
}
