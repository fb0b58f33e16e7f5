package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/towerd/towerd/resolver/clock"
	"github.com/towerd/towerd/test/dnstest"
)

// On a test's clock, WithDeadline's context has no deadline of its own and
// ends when the clock passes t, not a nanosecond before; a t already past
// ends it at once.
func TestWithDeadlineOnAFakeClock(t *testing.T) {
	c := dnstest.NewClock(time.Unix(1000, 0))
	ctx, cancel := clock.WithDeadline(context.Background(), c, c.Now().Add(time.Second))
	defer cancel()
	if _, ok := ctx.Deadline(); ok {
		t.Error("a fake clock's context carries a wall-clock deadline")
	}
	c.Advance(time.Second - 1)
	if ctx.Err() != nil {
		t.Fatal("done before its time on the clock")
	}
	c.Advance(1)
	if ctx.Err() == nil {
		t.Fatal("not done at its time on the clock")
	}
	past, cancelPast := clock.WithDeadline(context.Background(), c, c.Now().Add(-time.Second))
	defer cancelPast()
	if past.Err() == nil {
		t.Error("a deadline already past did not end the context")
	}
	// cancel stops the clock's timer.
	_, cancel2 := clock.WithTimeout(context.Background(), c, time.Hour)
	n := c.Timers()
	cancel2()
	if c.Timers() != n-1 {
		t.Errorf("cancel left the timer armed: %d timers, want %d", c.Timers(), n-1)
	}
}

// On the wall clock it is context.WithDeadline: sockets see the deadline.
func TestWithDeadlineOnTheWallClock(t *testing.T) {
	at := time.Now().Add(time.Hour)
	ctx, cancel := clock.WithDeadline(context.Background(), clock.Real{}, at)
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(at) {
		t.Errorf("deadline %v %v, want %v", d, ok, at)
	}
}
