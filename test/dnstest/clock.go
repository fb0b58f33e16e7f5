// Package dnstest is towerd's test kit: one scripted DNS upstream on
// loopback (Upstream), one in memory (ExchangeFunc), one fake clock (Clock),
// one helper that binds UDP and TCP on the same free port (ListenPair)
// (issue 16), and one way to write test files and node roots and compare
// them (WriteFile, WriteTree, Tree, DiffTrees; issue 26). Tests of every package use it in place of
// their own copies; nothing outside tests may import it (the binary must not
// carry the test kit: `go list -deps ./cmd/towerd | grep /test/` prints only
// test/faultproxy, which towerd drill runs).
package dnstest

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/towerd/towerd/resolver/clock"
)

// Clock is a clock that moves only when a test tells it to (issue 33; after
// Tailscale's tstest.Clock). It serves every clock towerd injects: it is a
// clock.Clock (Now, timers, tickers, AfterFunc), its Now is the
// `Now func() time.Time` of the configs that still take one, and Now with
// Sleep is the Consul watcher's clock. It is safe for concurrent use, so a
// race test may advance it while readers run.
//
// Timers fire only in Advance (or Set): every timer due by the new time
// fires in deadline order, a channel timer by a send that never blocks (the
// channel holds one value, as time's does), an AfterFunc by calling its
// function on the goroutine that advanced, after the clock's lock is
// released, so the function may use the clock. A test that must know a
// timer is armed before it advances waits with WaitTimers, never by
// sleeping.
type Clock struct {
	mu     sync.Mutex
	armed  *sync.Cond // broadcast whenever a timer is armed
	now    time.Time
	sleeps []time.Duration
	timers []*fakeTimer
	seq    uint64
}

var _ clock.Clock = (*Clock)(nil)

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock {
	c := &Clock{now: start}
	c.armed = sync.NewCond(&c.mu)
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Since returns the clock's time less t.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Advance moves the clock on by d (back, when d is negative: a stepped
// wall clock; nothing fires then) and fires every timer due by the new
// time, in deadline order.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	c.fireDue()
}

// Set moves the clock to t and fires what is due, like Advance.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
	c.fireDue()
}

// Sleep returns at once, having recorded d and moved the clock on by it (by
// nothing when d is negative); it returns ctx's error, without moving or
// recording, when ctx is done. A loop under test thus runs its schedule
// without waiting, and Sleeps shows the waits it asked for. Timers due by
// the new time fire.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(max(d, 0))
	c.mu.Unlock()
	c.fireDue()
	return nil
}

// Sleeps returns every wait asked of Sleep so far, in order.
func (c *Clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// Timers returns how many timers and tickers are armed.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitTimers blocks until at least n timers and tickers are armed, or ctx
// is done (its error then): how a test knows the code under test has
// reached its wait before advancing past it.
func (c *Clock) WaitTimers(ctx context.Context, n int) error {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.armed.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.timers) < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.armed.Wait()
	}
	return nil
}

// NewTimer returns a timer that fires once, d from the clock's now.
func (c *Clock) NewTimer(d time.Duration) (clock.Timer, <-chan time.Time) {
	t := &fakeTimer{clock: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t, t.ch
}

// NewTicker returns a ticker that fires every d of the clock's time.
func (c *Clock) NewTicker(d time.Duration) (clock.Ticker, <-chan time.Time) {
	if d <= 0 {
		panic("dnstest.Clock: non-positive interval for NewTicker")
	}
	t := &fakeTimer{clock: c, ch: make(chan time.Time, 1), period: d}
	t.Reset(d)
	return fakeTicker{t}, t.ch
}

// AfterFunc calls f, d from the clock's now, on the goroutine that
// advances the clock there.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &fakeTimer{clock: c, fn: f}
	t.Reset(d)
	return t
}

// fireDue fires the timers due by now, earliest first; a ticker is armed
// again for its next period (once per Advance: a ticker that missed
// several periods fires once, as time's drops ticks for a slow reader).
func (c *Clock) fireDue() {
	for {
		c.mu.Lock()
		if len(c.timers) == 0 || c.timers[0].when.After(c.now) {
			c.mu.Unlock()
			return
		}
		t := c.timers[0]
		c.timers = c.timers[1:]
		now := c.now
		if t.period > 0 {
			t.when = now.Add(t.period)
			c.insertLocked(t)
		} else {
			t.armed = false
		}
		c.mu.Unlock()
		if t.fn != nil {
			t.fn()
			continue
		}
		select {
		case t.ch <- now:
		default:
		}
	}
}

// insertLocked puts t among the armed timers, in deadline order (arming
// order among equal deadlines).
func (c *Clock) insertLocked(t *fakeTimer) {
	c.seq++
	t.seq = c.seq
	t.armed = true
	i := sort.Search(len(c.timers), func(i int) bool {
		o := c.timers[i]
		return o.when.After(t.when) || (o.when.Equal(t.when) && o.seq > t.seq)
	})
	c.timers = append(c.timers, nil)
	copy(c.timers[i+1:], c.timers[i:])
	c.timers[i] = t
	c.armed.Broadcast()
}

func (c *Clock) removeLocked(t *fakeTimer) bool {
	if !t.armed {
		return false
	}
	for i, o := range c.timers {
		if o == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			break
		}
	}
	t.armed = false
	return true
}

type fakeTimer struct {
	clock  *Clock
	ch     chan time.Time
	fn     func()
	period time.Duration // a ticker's; 0 for a timer
	when   time.Time
	seq    uint64
	armed  bool
}

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	return t.clock.removeLocked(t)
}

// Reset re-arms the timer d from now; a d of zero or less makes it due at
// once, and it fires at the clock's next Advance (even by 0).
func (t *fakeTimer) Reset(d time.Duration) bool {
	c := t.clock
	c.mu.Lock()
	was := c.removeLocked(t)
	if t.period > 0 && d > 0 {
		t.period = d
	}
	t.when = c.now.Add(d)
	c.insertLocked(t)
	c.mu.Unlock()
	return was
}

type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) Stop() { k.t.Stop() }

func (k fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("dnstest.Clock: non-positive interval for Ticker.Reset")
	}
	k.t.Reset(d)
}
