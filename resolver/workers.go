package resolver

import (
	"sync"
	"time"
)

// workers runs jobs on goroutines that, done with one, wait for the next
// instead of exiting. A goroutine that has answered a miss has grown its
// stack to what a miss needs; a fresh one per job would grow it again
// (runtime.morestack and copystack were a visible share of a miss's CPU
// under perf, issue 17). At most maxIdleWorkers goroutines wait, each for
// at most workerIdleTimeout: after a burst (an outage's misses, a flood)
// the node goes back to the goroutines it had.
type workers struct {
	idleTimeout time.Duration // workerIdleTimeout; tests shorten it
	idle        chan chan func()
	quit        chan struct{} // closed by stop: waiting goroutines end
	stopOnce    sync.Once
}

// maxIdleWorkers bounds the goroutines kept waiting per pool, and so the
// memory their stacks hold while the node is quiet.
const maxIdleWorkers = 64

// workerIdleTimeout is how long a goroutine waits for its next job.
const workerIdleTimeout = 5 * time.Second

func newWorkers() *workers {
	return &workers{idleTimeout: workerIdleTimeout, idle: make(chan chan func(), maxIdleWorkers), quit: make(chan struct{})}
}

// do runs job on a waiting goroutine, or a new one.
func (w *workers) do(job func()) {
	select {
	case ch := <-w.idle:
		select {
		case ch <- job:
			return
		default:
			// That goroutine is no longer waiting (it timed out, or the
			// pool stopped) or not waiting yet: run job on a new one.
		}
	default:
	}
	go w.work(job)
}

func (w *workers) work(job func()) {
	var (
		ch    chan func()
		timer *time.Timer
	)
	for {
		job()
		if ch == nil {
			ch = make(chan func())
			timer = time.NewTimer(w.idleTimeout)
			defer timer.Stop()
		} else {
			timer.Reset(w.idleTimeout)
		}
		select {
		case w.idle <- ch:
		default:
			return // enough are waiting
		}
		// Once this returns, ch stays in idle until do takes it and finds
		// nobody receiving: do never blocks on a goroutine that left.
		select {
		case job = <-ch:
		case <-w.quit:
			return
		case <-timer.C:
			return
		}
	}
}

// stop ends the waiting goroutines; jobs still running finish, and do
// still works (on new goroutines).
func (w *workers) stop() { w.stopOnce.Do(func() { close(w.quit) }) }
