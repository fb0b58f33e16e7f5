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
	"sync"
	"time"
)

// Clock is a clock that moves only when a test tells it to. It serves every
// clock towerd injects: its Now is the `Now func() time.Time` of cache,
// upstream and resolver configs, and Now with Sleep is the Consul watcher's
// clock. It is safe for concurrent use, so a race test may advance it while
// readers run.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d (back, when d is negative: a stepped
// wall clock).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Sleep returns at once, having recorded d and moved the clock on by it (by
// nothing when d is negative); it returns ctx's error, without moving or
// recording, when ctx is done. A loop under test thus runs its schedule
// without waiting, and Sleeps shows the waits it asked for.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(max(d, 0))
	return nil
}

// Sleeps returns every wait asked of Sleep so far, in order.
func (c *Clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}
