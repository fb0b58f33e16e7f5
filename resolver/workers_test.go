package resolver

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// A waiting goroutine ends after its idle timeout, and a job handed to the
// pool afterwards still runs: do never blocks on a goroutine that left.
func TestWorkersEndWhenIdle(t *testing.T) {
	w := newWorkers()
	w.idleTimeout = time.Millisecond
	defer w.stop()
	var ran atomic.Int32
	done := make(chan struct{})
	w.do(func() { ran.Add(1); close(done) })
	<-done
	base := runtime.NumGoroutine()
	// The worker waits at most a millisecond; poll (bounded) for it to end.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() >= base && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling interval of a bounded wait
	}
	if n := runtime.NumGoroutine(); n >= base {
		t.Fatalf("goroutines %d, want fewer than %d once the idle worker timed out", n, base)
	}
	second := make(chan struct{})
	w.do(func() { ran.Add(1); close(second) })
	select {
	case <-second:
	case <-time.After(5 * time.Second):
		t.Fatal("a job handed to the pool after its worker left never ran")
	}
	if ran.Load() != 2 {
		t.Fatalf("ran %d jobs, want 2", ran.Load())
	}
}
