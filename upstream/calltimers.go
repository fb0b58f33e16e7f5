package upstream

import (
	"sync"
	"time"

	"github.com/towerd/towerd/resolver/clock"
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
// The wake is set again only when a call is due before it; the heap
// emptying stops it (no firing for nothing). Its firing takes every call
// due out of the heap and runs its expire, which rearms what is not due
// after all (a call moved meanwhile).
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
	if c.timerAt > 0 {
		t.down(t.up(c.timerAt - 1))
	} else {
		c.timerAt = len(t.calls) + 1
		t.calls = append(t.calls, c)
		t.up(len(t.calls) - 1)
	}
	if t.armed.IsZero() || due.Before(t.armed) {
		t.armed = due
		t.wake.set(due.Sub(t.clk.Now()))
	}
}

// disarm takes c out of the heap (it has ended); the wake is stopped when
// no call is left.
func (t *callTimers) disarm(c *WireCall) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.timerAt > 0 {
		t.remove(c.timerAt - 1)
	}
	if len(t.calls) == 0 && !t.armed.IsZero() {
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
		t.remove(0)
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

// The heap's moves; t.mu is held. A call knows its index plus one
// (timerAt, 0 when out).

func (t *callTimers) swap(i, j int) {
	h := t.calls
	h[i], h[j] = h[j], h[i]
	h[i].timerAt, h[j].timerAt = i+1, j+1
}

func (t *callTimers) up(i int) int {
	h := t.calls
	for i > 0 {
		parent := (i - 1) / 2
		if !h[i].timerDue.Before(h[parent].timerDue) {
			break
		}
		t.swap(i, parent)
		i = parent
	}
	return i
}

func (t *callTimers) down(i int) int {
	h := t.calls
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l].timerDue.Before(h[least].timerDue) {
			least = l
		}
		if r < len(h) && h[r].timerDue.Before(h[least].timerDue) {
			least = r
		}
		if least == i {
			return i
		}
		t.swap(i, least)
		i = least
	}
}

func (t *callTimers) remove(i int) {
	h := t.calls
	last := len(h) - 1
	removed := h[i]
	if i != last {
		t.swap(i, last)
	}
	h[last] = nil
	t.calls = h[:last]
	if i != last {
		t.down(t.up(i))
	}
	removed.timerAt = 0
}

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
