package resolver

import "sync"

// workers runs jobs on goroutines that, done with one, wait for the next
// instead of exiting. A goroutine that has answered a miss has grown its
// stack to what a miss needs; a fresh one per job would grow it again
// (runtime.morestack and copystack were a visible share of a miss's CPU
// under perf, issue 17). At most maxIdle goroutines wait; more end.
type workers struct {
	idle     chan chan func()
	quit     chan struct{} // closed by stop: waiting goroutines end
	stopOnce sync.Once
}

// maxIdleWorkers bounds the goroutines kept waiting per pool, and so the
// memory their stacks hold while the node is quiet.
const maxIdleWorkers = 64

func newWorkers() *workers {
	return &workers{idle: make(chan chan func(), maxIdleWorkers), quit: make(chan struct{})}
}

// do runs job on a waiting goroutine, or a new one.
func (w *workers) do(job func()) {
	select {
	case ch := <-w.idle:
		select {
		case ch <- job:
			return
		case <-w.quit:
			// That goroutine ended with the pool; run job anyway.
		}
	default:
	}
	go w.work(job)
}

func (w *workers) work(job func()) {
	var ch chan func()
	for {
		job()
		if ch == nil {
			ch = make(chan func())
		}
		select {
		case w.idle <- ch:
		default:
			return // enough are waiting
		}
		select {
		case job = <-ch:
		case <-w.quit:
			return
		}
	}
}

// stop ends the waiting goroutines; jobs still running finish, and do
// still works (on new goroutines).
func (w *workers) stop() { w.stopOnce.Do(func() { close(w.quit) }) }
