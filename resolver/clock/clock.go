// Package clock is the one clock every timer in towerd that decides
// behaviour is made through (issue 33): deadlines, RTOs, silence, health,
// probes, the Consul loops and gate, prefetch and stale timers. Production
// code uses Real; tests inject test/dnstest's Clock, which moves only when
// the test advances it, so no unit test waits on the wall clock or asserts
// a wall-clock bound.
//
// The shape is Tailscale's tstime.Clock (tstime/tstime.go): Now, NewTimer,
// NewTicker, AfterFunc, with the timers behind small interfaces so a fake
// can stand in for *time.Timer and *time.Ticker.
//
// A leaf beside resolver/dnswire: it imports only the standard library, so
// cache, upstream and resolver may all use it.
package clock

import (
	"context"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once, d
	// from now (time.NewTimer).
	NewTimer(d time.Duration) (Timer, <-chan time.Time)
	// NewTicker returns a ticker that sends the time on its channel every
	// d (time.NewTicker; d must be positive).
	NewTicker(d time.Duration) (Ticker, <-chan time.Time)
	// AfterFunc calls f on its own goroutine d from now (time.AfterFunc).
	AfterFunc(d time.Duration, f func()) Timer
	// Since returns the time elapsed since t (time.Since).
	Since(t time.Time) time.Duration
}

// Timer is a *time.Timer as the clock that made it runs it.
type Timer interface {
	// Stop prevents the timer from firing; false when it had fired or
	// been stopped already (time.Timer.Stop).
	Stop() bool
	// Reset makes the timer fire d from now; false when it had fired or
	// been stopped (time.Timer.Reset).
	Reset(d time.Duration) bool
}

// Ticker is a *time.Ticker as the clock that made it runs it.
type Ticker interface {
	// Stop turns the ticker off (time.Ticker.Stop).
	Stop()
	// Reset stops the ticker and sets its period to d (time.Ticker.Reset).
	Reset(d time.Duration)
}

// Real is the wall clock: package time itself.
type Real struct{}

var _ Clock = Real{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer returns time.NewTimer(d) and its channel.
func (Real) NewTimer(d time.Duration) (Timer, <-chan time.Time) {
	t := time.NewTimer(d)
	return t, t.C
}

// NewTicker returns time.NewTicker(d) and its channel.
func (Real) NewTicker(d time.Duration) (Ticker, <-chan time.Time) {
	t := time.NewTicker(d)
	return t, t.C
}

// AfterFunc returns time.AfterFunc(d, f).
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Since returns time.Since(t).
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// Or returns c, or Real when c is nil: the zero value of a config's Clock
// field means the wall clock.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Sleep waits d on c, or until ctx is done (its error then). A d of zero
// or less returns at once, unless ctx is done.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t, ch := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WithDeadline returns a copy of ctx that is done at t on c, or when ctx
// is. On the wall clock it is context.WithDeadline, so a socket under it
// sees the deadline; on another clock (a test's) the copy has no deadline
// of its own and is cancelled by a timer of c, so it ends when the test
// advances c past t.
func WithDeadline(ctx context.Context, c Clock, t time.Time) (context.Context, context.CancelFunc) {
	if _, real := c.(Real); real {
		return context.WithDeadline(ctx, t)
	}
	ctx, cancel := context.WithCancel(ctx)
	d := t.Sub(c.Now())
	if d <= 0 {
		cancel() // a fake timer due now would wait for the next Advance
	}
	timer := c.AfterFunc(d, cancel)
	return ctx, func() {
		timer.Stop()
		cancel()
	}
}

// WithTimeout is WithDeadline d from c's now.
func WithTimeout(ctx context.Context, c Clock, d time.Duration) (context.Context, context.CancelFunc) {
	return WithDeadline(ctx, c, c.Now().Add(d))
}
