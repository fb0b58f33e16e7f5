package resolver

import (
	"sync"
	"time"

	"github.com/towerd/towerd/resolver/heapidx"
)

// Every client that waits for a flight is a waiter with a deadline (issue
// 22: the client's query_timeout is one mechanism): a wire waiter of the
// fast path's readers (wiremiss.go), answered SERVFAIL when it runs out,
// and a ServeDNS client, whose deadline is its query_timeout or, for a
// question with a stale answer, what is left of the client response
// timer, woken to answer as its timer says. The flights keep one min-heap
// of the waiting clients by deadline and one timer per handler, set to the
// earliest (flights.deadlines, flights.expiry): no timer per flight or per
// client, and no allocation per wait.

// waiter is one client waiting for a flight. Its fields are guarded by
// flights.mu.
type waiter struct {
	fl        *flight
	deadline  time.Time // by the real clock
	heapIndex int       // its place in flights.deadlines, -1 when out
	// wire is the wire miss path's client this is the waiter of; nil for
	// a ServeDNS client, which waits on woken: false when the flight
	// ended, true when its deadline came first.
	wire  *wireWaiter
	woken chan bool
}

// clientWaiters recycles ServeDNS clients' waiters with their channels.
var clientWaiters = sync.Pool{New: func() any { return &waiter{woken: make(chan bool, 1)} }}

// wake tells w the flight ended (timedOut false) or its deadline passed;
// flights.mu is not held.
func (w *waiter) wake(timedOut bool) {
	if w.wire != nil {
		w.wire.h.answerWire(w.fl, w.wire, timedOut)
		return
	}
	w.woken <- timedOut // room for one: a waiter is woken once
}

// wait makes a ServeDNS client a waiter of fl until deadline. It returns
// nil when fl has ended already (its outcome is set); otherwise the client
// reads the waiter's woken once and gives it back with release.
func (f *flights) wait(fl *flight, deadline time.Time) *waiter {
	if fl.f == nil {
		return nil // a flight made of a fresh cache entry: done at birth
	}
	w := clientWaiters.Get().(*waiter)
	w.deadline = deadline
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl.ended {
		clientWaiters.Put(w)
		return nil
	}
	f.addWaiterLocked(fl, w)
	return w
}

// leave takes a ServeDNS client's waiter out before it was woken (the
// client answers for another reason: its zone went down); when it was
// woken meanwhile, the wake is read. The waiter goes back to the pool.
func (f *flights) leave(w *waiter) {
	f.mu.Lock()
	in := w.heapIndex >= 0
	if in {
		f.deadlines.remove(w.heapIndex)
		w.fl.removeWaiter(w)
	}
	f.mu.Unlock()
	if !in {
		<-w.woken // taken by the flight's end or the expiry, which wakes it now
	}
	release(w)
}

// release gives a woken ServeDNS client's waiter back.
func release(w *waiter) {
	w.fl = nil
	clientWaiters.Put(w)
}

// addWaiterLocked adds w to fl's waiters and to the deadline heap, the
// expiry timer moved only when it would fire after w's deadline; f.mu is
// held. A timer already set for earlier is left alone, though the waiter
// it was set for may have gone (its flight ended): it then fires once for
// nothing and is set again for the earliest waiter left. Moving a Go
// timer to an earlier time wakes a thread of the runtime to watch it (a
// futex wake and a thread that finds nothing to do, or a break of the
// network poller), and with one client's deadline per miss that was one
// such wake per miss; a query_timeout (1.8 s) apart, misses now reset it
// about once per query_timeout (docs/benchmarks.md, issue 37).
func (f *flights) addWaiterLocked(fl *flight, w *waiter) {
	if fl.waiters == nil {
		fl.waiters = fl.inline[:0]
	}
	fl.waiters = append(fl.waiters, w)
	w.fl = fl
	f.deadlines.push(w)
	if f.expiryAt.IsZero() || w.deadline.Before(f.expiryAt) {
		f.expiryAt = w.deadline
		f.expiry.Reset(w.deadline.Sub(f.clock.Now()))
	}
}

// deadlines is a min-heap of the waiting clients by deadline (each knows
// its index, so its flight's end takes it out): the expiry timer is set no
// later than the earliest, and fires when a client's deadline is due or
// for nothing, once, when the waiter it was set for was woken meanwhile.
type deadlines []*waiter

// byDeadline orders deadlines; a waiter keeps its index in heapIndex.
type byDeadline struct{}

func (byDeadline) Less(a, b *waiter) bool    { return a.deadline.Before(b.deadline) }
func (byDeadline) Index(w *waiter) int       { return w.heapIndex }
func (byDeadline) SetIndex(w *waiter, i int) { w.heapIndex = i }

// push adds w and reports whether it is the earliest now.
func (h *deadlines) push(w *waiter) bool { return heapidx.Push(h, byDeadline{}, w) == 0 }

// remove takes out the waiter at index i.
func (h *deadlines) remove(i int) { heapidx.Remove(h, byDeadline{}, (*h)[i]) }

// expire, the expiry timer's function, wakes the waiters whose deadline
// passed: a wire waiter is answered SERVFAIL, a ServeDNS client answers as
// its timer says; their flights go on and fill the cache.
func (f *flights) expire() {
	now := f.clock.Now()
	var expired []*waiter
	f.mu.Lock()
	// Not armed now, unless set again below (zero is always safe: the
	// next waiter then sets the timer).
	f.expiryAt = time.Time{}
	for len(f.deadlines) > 0 && !f.deadlines[0].deadline.After(now) {
		w := f.deadlines[0]
		f.deadlines.remove(0)
		w.fl.removeWaiter(w)
		expired = append(expired, w)
	}
	if len(f.deadlines) > 0 {
		f.expiryAt = f.deadlines[0].deadline
		f.expiry.Reset(f.expiryAt.Sub(now))
	}
	f.mu.Unlock()
	for _, w := range expired {
		w.wake(true)
	}
}

// removeWaiter takes w out of fl's waiters; flights.mu is held.
func (fl *flight) removeWaiter(w *waiter) {
	for i, have := range fl.waiters {
		if have == w {
			last := len(fl.waiters) - 1
			copy(fl.waiters[i:], fl.waiters[i+1:])
			fl.waiters[last] = nil
			fl.waiters = fl.waiters[:last]
			return
		}
	}
}
