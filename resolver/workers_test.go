package resolver

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/towerd/towerd/test/dnstest"
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
	// The worker waits at most a millisecond, then ends.
	dnstest.Eventually(t, func() bool { return runtime.NumGoroutine() < base }, 10*time.Second,
		fmt.Sprintf("fewer than %d goroutines once the idle worker timed out", base))
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
