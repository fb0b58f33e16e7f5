package upstream

import (
	"sync"
	"time"

	"github.com/towerd/towerd/resolver/clock"
	"github.com/towerd/towerd/resolver/heapidx"
)

// The calls' timers (issue 37). Every resolution has one due time (its
// newest attempt's RTO, its hedge, its deadline: armLocked), and a miss
// that is answered in time never reaches it. A Go timer per call cost more
// than its heap operation: moving a runtime timer to an earlier time
// wakes a thread of the runtime to watch it (a futex wake of an idle
// thread that finds nothing to do and sleeps again, or a break of the
// network poller), one such wake per miss, a third of a miss's CPU on a
// quiet node (docs/benchmarks.md). So the calls wait in one min-heap by
// due time, with one wake set for the earliest:
//   - with the real clock on Linux, a timerfd in the attempt reader's
//     epoll set (udpsock_linux.go), set by a raw system call: no thread
//     is woken to arm it, and its expiry is read by the reader like a
//     reply;
//   - otherwise (a test's clock, other systems) a timer of the clock.
//
// The wake is set again only when a call is due before it. Its firing
// takes every call due out of the heap and runs its expire, which rearms
// what is not due after all (a call moved meanwhile). The heap emptying
// stops the wake, except the timerfd's while calls come faster than it
// would fire (lazy): a miss answered long before its RTO (100 ms at
// least) empties the heap and the next fills it again, and stopping the
// timerfd then setting it again was two system calls per miss
// (timerfd_settime) at a few hundred misses a second. Left set for the
// earlier call's due time, it is earlier than the next call's, which sets
// nothing; it fires for nothing at most once per emptying, about once an
// RTO under a steady load. It is left only when the last gap between two
// calls armed was shorter than the time it has left: a wake due sooner
// (a hedge's, a millisecond or so away) or a quiet node is stopped as
// before, so nothing fires for nothing after each miss.
type callTimers struct {
	mu    sync.Mutex
	calls []*WireCall // a min-heap by timerDue
	// armed is when the wake is set for, zero when it is not set.
	armed time.Time
	clk   clock.Clock
	wake  timerWake
	// inline: fire runs the calls' expire itself (it is on a goroutine
	// of its own, a clock timer's); else each on a goroutine of its own,
	// as a clock timer would (the reader must not wait for them).
	inline bool
	// lazy: the wake may be left set when the heap empties (the
	// timerfd's, see above); armed stays when it is set for. lastArm is
	// when a call was last put in the heap, gap the time between the
	// last two.
	lazy    bool
	lastArm time.Time
	gap     time.Duration
}

// timerWake makes its callTimers' fire run d from now (at the earliest
// due time), or not at all.
type timerWake interface {
	set(d time.Duration)
	stop()
}

// newCallTimers returns the timers for a group on clk: the process's
// timerfd ones for the real clock where they exist, else a set of its own
// on a timer of clk.
func newCallTimers(clk clock.Clock) *callTimers {
	if _, real := clk.(clock.Real); real {
		if t := realCallTimers(); t != nil {
			return t
		}
	}
	t := &callTimers{clk: clk, inline: true}
	t.wake = &clockWake{clk: clk, fire: t.fire}
	return t
}

// arm makes c due at due (in the heap once), the wake set earlier if it
// was set for later.
func (t *callTimers) arm(c *WireCall, due time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.timerDue = due
	now := t.clk.Now()
	if heapidx.Fix(t.calls, byDue{}, c) < 0 {
		heapidx.Push(&t.calls, byDue{}, c)
		if t.lazy {
			t.gap, t.lastArm = now.Sub(t.lastArm), now
		}
	}
	if t.armed.IsZero() || due.Before(t.armed) {
		t.armed = due
		t.wake.set(due.Sub(now))
	}
}

// disarm takes c out of the heap (it has ended); the wake is stopped when
// no call is left, unless it is lazy and the next call is expected before
// it fires.
func (t *callTimers) disarm(c *WireCall) {
	t.mu.Lock()
	defer t.mu.Unlock()
	heapidx.Remove(&t.calls, byDue{}, c)
	if len(t.calls) == 0 && !t.armed.IsZero() {
		if t.lazy && t.gap < t.armed.Sub(t.clk.Now()) {
			return
		}
		t.armed = time.Time{}
		t.wake.stop()
	}
}

// fire takes out every call due by now and runs its expire; the wake is
// set for the earliest left.
func (t *callTimers) fire() {
	var room [8]*WireCall
	due := room[:0]
	now := t.clk.Now()
	t.mu.Lock()
	t.armed = time.Time{}
	for len(t.calls) > 0 && !t.calls[0].timerDue.After(now) {
		due = append(due, t.calls[0])
		heapidx.Remove(&t.calls, byDue{}, t.calls[0])
	}
	if len(t.calls) > 0 {
		t.armed = t.calls[0].timerDue
		t.wake.set(t.armed.Sub(now))
	}
	t.mu.Unlock()
	for _, c := range due {
		if t.inline {
			c.expire()
		} else {
			go c.expire()
		}
	}
}

// byDue orders callTimers.calls. A call keeps its index plus one in
// timerAt, so that a zero WireCall is out.
type byDue struct{}

func (byDue) Less(a, b *WireCall) bool    { return a.timerDue.Before(b.timerDue) }
func (byDue) Index(c *WireCall) int       { return c.timerAt - 1 }
func (byDue) SetIndex(c *WireCall, i int) { c.timerAt = i + 1 }

// clockWake is a timer of a clock running fire.
type clockWake struct {
	clk  clock.Clock
	t    clock.Timer
	fire func()
}

func (w *clockWake) set(d time.Duration) {
	if w.t == nil {
		// Made armed for d, never armed for another time first: a test on
		// the fake clock that sees a timer armed (WaitTimers) sees it set.
		w.t = w.clk.AfterFunc(d, w.fire)
		return
	}
	w.t.Reset(d)
}

func (w *clockWake) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}
