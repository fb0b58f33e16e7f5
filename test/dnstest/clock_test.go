package dnstest

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
)

func TestClockTimersFireInOrderOnAdvance(t *testing.T) {
	c := NewClock(time.Unix(1000, 0))
	var order []string
	c.AfterFunc(3*time.Second, func() { order = append(order, "3s") })
	c.AfterFunc(time.Second, func() { order = append(order, "1s") })
	stopped := c.AfterFunc(2*time.Second, func() { order = append(order, "2s") })
	timer, ch := c.NewTimer(2 * time.Second)
	if !stopped.Stop() {
		t.Fatal("Stop of an armed timer returned false")
	}
	c.Advance(time.Second)
	if len(order) != 1 || order[0] != "1s" {
		t.Fatalf("after 1s: %v, want [1s]", order)
	}
	select {
	case <-ch:
		t.Fatal("2s timer fired at 1s")
	default:
	}
	c.Advance(5 * time.Second)
	if len(order) != 2 || order[1] != "3s" {
		t.Fatalf("after 6s: %v, want [1s 3s]", order)
	}
	select {
	case got := <-ch:
		if want := time.Unix(1006, 0); !got.Equal(want) {
			t.Fatalf("timer sent %v, want %v", got, want)
		}
	default:
		t.Fatal("2s timer did not fire by 6s")
	}
	if timer.Stop() {
		t.Fatal("Stop of a fired timer returned true")
	}
	if n := c.Timers(); n != 0 {
		t.Fatalf("%d timers armed, want 0", n)
	}
}

func TestClockTickerAndWaitTimers(t *testing.T) {
	c := NewClock(time.Unix(0, 0))
	ticks := make(chan time.Time)
	go func() {
		tk, ch := c.NewTicker(time.Second)
		defer tk.Stop()
		for range 3 {
			ticks <- <-ch
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.WaitTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		c.Advance(time.Second)
		if got, want := <-ticks, time.Unix(int64(i), 0); !got.Equal(want) {
			t.Fatalf("tick %d at %v, want %v", i, got, want)
		}
	}
}

func TestClockSleepFiresDueTimers(t *testing.T) {
	c := NewClock(time.Unix(0, 0))
	var fired bool
	c.AfterFunc(time.Second, func() { fired = true })
	if err := c.Sleep(context.Background(), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if !fired {
		t.Fatal("a timer due during Sleep did not fire")
	}
	if got := c.Sleeps(); len(got) != 1 || got[0] != 2*time.Second {
		t.Fatalf("Sleeps %v", got)
	}
}

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, func() bool { n++; return n == 3 }, time.Minute, "the third poll")
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
	ft := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Eventually(ft, func() bool { return false }, 5*time.Millisecond, "nothing")
	}()
	<-done
	if ft.msg != "waited 5ms for nothing" {
		t.Fatalf("Fatalf said %q", ft.msg)
	}
}

// fatalRecorder keeps Fatalf's message and ends the goroutine as Fatalf
// does, without failing the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
