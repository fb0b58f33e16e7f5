package dnstest

import (
	"testing"
	"time"
)

// Eventually waits until cond holds and fails t, naming what it waited
// for, when limit passes first (issue 33): the test kit's one wait for a
// state the code under test reaches on its own goroutines (a counter, a
// log line, a process's answer). limit is a bound against hanging, never
// an assertion about speed: pick it generous (seconds, for a machine
// running the race detector beside CPU hogs), because passing it is a
// failure. cond is polled, first at once, then at intervals growing from
// 1 ms to 50 ms; it must not block.
//
// Where the code under test has a signal (a channel, a callback, the fake
// clock's WaitTimers), wait on that instead: Eventually is for state that
// has none.
func Eventually(t testing.TB, cond func() bool, limit time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", limit, what)
		}
		time.Sleep(pause) // the polling interval of a bounded wait
		pause = min(2*pause, 50*time.Millisecond)
	}
}
