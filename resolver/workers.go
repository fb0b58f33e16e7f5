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
	idle        chan chan job
	quit        chan struct{} // closed by stop: waiting goroutines end
	stopOnce    sync.Once
}

// maxIdleWorkers bounds the goroutines kept waiting per pool, and so the
// memory their stacks hold while the node is quiet.
const maxIdleWorkers = 64

// workerIdleTimeout is how long a goroutine waits for its next job.
const workerIdleTimeout = 5 * time.Second

func newWorkers() *workers {
	return &workers{idleTimeout: workerIdleTimeout, idle: make(chan chan job, maxIdleWorkers), quit: make(chan struct{})}
}

// job is what a worker runs.
type job interface{ run() }

// jobFunc is a func as a job.
type jobFunc func()

func (f jobFunc) run() { f() }

// do runs f on a waiting goroutine, or a new one.
func (w *workers) do(f func()) { w.run(jobFunc(f)) }

// run runs j on a waiting goroutine, or a new one.
func (w *workers) run(j job) {
	select {
	case ch := <-w.idle:
		select {
		case ch <- j:
			return
		default:
			// That goroutine is no longer waiting (it timed out, or the
			// pool stopped) or not waiting yet: run job on a new one.
		}
	default:
	}
	go w.work(j)
}

func (w *workers) work(j job) {
	var (
		ch    chan job
		timer *time.Timer
	)
	for {
		j.run()
		j = nil // not kept alive while waiting
		if ch == nil {
			ch = make(chan job)
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
		case j = <-ch:
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
