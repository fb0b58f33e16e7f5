package upstream

import (
	"testing"
	"time"

	"github.com/towerd/towerd/test/dnstest"
)

// recWake records what its callTimers asks of the wake.
type recWake struct {
	sets  []time.Duration
	stops int
}

func (w *recWake) set(d time.Duration) { w.sets = append(w.sets, d) }
func (w *recWake) stop()               { w.stops++ }

// A steady trickle of misses, one every 2 ms, each answered long before
// its due time (100 ms): the lazy wake (the timerfd's) is left set while
// calls come faster than it would fire, fires once for nothing and is set
// again only for a call still waiting; the eager one (a clock's) is set
// and stopped per call. A wake due sooner than the next call is expected
// (a hedge's), or a quiet node's, is stopped either way.
func TestCallTimersLazyWake(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const rto, every = 100 * time.Millisecond, 2 * time.Millisecond
	for _, lazy := range []bool{true, false} {
		clk := dnstest.NewClock(t0)
		w := &recWake{}
		tm := &callTimers{clk: clk, wake: w, inline: true, lazy: lazy}
		var calls [5]WireCall
		for i := range 4 {
			c := &calls[i]
			tm.arm(c, clk.Now().Add(rto))
			if i < 3 {
				tm.disarm(c)
			}
			clk.Advance(every)
		}
		// The first call has no gap before it: its wake is stopped.
		if lazy {
			if len(w.sets) != 2 || w.sets[1] != rto || w.stops != 1 {
				t.Fatalf("lazy: sets %v, stops %d; want 2 sets of 100ms, 1 stop", w.sets, w.stops)
			}
		} else if len(w.sets) != 4 || w.stops != 3 {
			t.Fatalf("eager: sets %v, stops %d; want 4 sets, 3 stops", w.sets, w.stops)
		}
		if lazy {
			// At the second call's due time nothing is due; the last
			// call waits, 4 ms more.
			clk.Set(t0.Add(every + rto))
			n := len(w.sets)
			tm.fire()
			if len(w.sets) != n+1 || w.sets[n] != 2*every {
				t.Fatalf("lazy: after the firing for nothing, sets %v; want the waiting call's 4ms", w.sets)
			}
		}
		// The last call ends with its wake 4 ms off, more than the gap:
		// left set when lazy.
		stops := w.stops
		tm.disarm(&calls[3])
		if want := map[bool]int{true: stops, false: stops + 1}[lazy]; w.stops != want {
			t.Fatalf("lazy %v: %d stops after the last call ended, want %d", lazy, w.stops, want)
		}
		// A hedge's wake, 1 ms off, with calls 2 ms apart: stopped.
		tm.fire()
		clk.Advance(every)
		tm.arm(&calls[4], clk.Now().Add(time.Millisecond))
		stops = w.stops
		tm.disarm(&calls[4])
		if w.stops != stops+1 || !tm.armed.IsZero() {
			t.Fatalf("lazy %v: a wake sooner than the next call is expected was left set (%d stops)", lazy, w.stops)
		}
		// A quiet node: a call a second after the last, 100 ms due.
		clk.Advance(time.Second)
		tm.arm(&calls[0], clk.Now().Add(rto))
		tm.disarm(&calls[0])
		if w.stops != stops+2 {
			t.Fatalf("lazy %v: a quiet node's wake was left set (%d stops)", lazy, w.stops)
		}
	}
}
