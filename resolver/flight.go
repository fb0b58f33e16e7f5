package resolver

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/upstream"
)

// flight is one upstream resolution shared by every client that asks the same
// question (same cache key) while it runs.
type flight struct {
	done chan struct{} // closed when the outcome is set
	// finished makes finish run once: a wire flight whose start panicked
	// is ended by the recovery, and its upstream call may still report.
	finished atomic.Bool
	outcome
	// waiters are the clients of the wire miss path waiting for the flight
	// (wiremiss.go); whoever ends the flight (finish) answers them.
	// Guarded by flights.mu; wireDone is set once they were taken.
	waiters  []*wireWaiter
	wireDone bool
	inline   [1]*wireWaiter // waiters' first room: most flights have one client

	// What the flight's goroutine runs (flight.run): resolve; or, for the
	// wire miss path, which has no goroutine of its own (wiremiss.go),
	// wireRes's parameters, kept here rather than in a closure: one
	// allocation less per miss.
	f       *flights
	key     cache.Key
	resolve resolveFunc
	wireRes wireResolution
	// wireCall is the wire resolution's upstream side (wiremiss.go), in
	// the flight's allocation (wireFlight); callStarted, under flights.mu,
	// says it runs: close kicks it.
	wireCall    *upstream.WireCall
	callStarted bool
	// started is when the resolution began, by the real clock (the one
	// the client timers run on): a client joining it late waits only for
	// what is left of the client response timer (Handler.ServeDNS).
	started time.Time
}

// flights coalesces identical misses and caps how many resolutions run at
// once. Resolutions run detached from the clients that started them, so a
// client that gives up (client response timer) does not waste the work: the
// late answer still lands in the cache.
type flights struct {
	mu       sync.Mutex
	running  map[cache.Key]*flight
	inflight atomic.Int64
	// rejected counts joins turned away because limit flights already ran:
	// a sustained rise means the upstreams are too slow for the load.
	rejected atomic.Uint64

	ctx     context.Context // cancelled by close: shutdown abandons resolutions
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	workers *workers // the resolutions' goroutines

	// deadlines are the waiting wire waiters by query_timeout, a min-heap
	// under mu, and expiry the one timer, set to the earliest
	// (wiremiss.go): no timer per flight or per client.
	deadlines wireDeadlines
	expiry    *time.Timer

	// onPanic, if set, is told about a resolution that panicked.
	onPanic func(v any, stack []byte)

	// cache is where flights store their answers: a client's join looks
	// there under mu before starting a flight (join, joinWire).
	cache *cache.Cache
}

func newFlights(c *cache.Cache) *flights {
	ctx, cancel := context.WithCancel(context.Background())
	f := &flights{running: make(map[cache.Key]*flight), ctx: ctx, cancel: cancel, workers: newWorkers(), cache: c}
	f.expiry = time.AfterFunc(time.Hour, f.expireWire)
	f.expiry.Stop()
	return f
}

// outcome is how a resolution ended: the reply (msg, or wire when it came
// and was prepared as bytes), the upstream server that replied ("" when
// unknown) and the error.
type outcome struct {
	msg *dns.Msg // the upstream's reply; shared, so read-only for waiters
	// wire is the reply prepared from its bytes (the wire miss path), when
	// wireOK; read-only once the flight is done.
	wire   cache.WireAnswer
	wireOK bool
	server string
	err    error
}

// message is the reply as a dns.Msg for a general-path waiter: msg itself
// (shared, read-only), or a copy made from the wire answer.
func (o *outcome) message() *dns.Msg {
	if o.msg == nil && o.wireOK {
		return o.wire.Message()
	}
	return o.msg
}

// resolveFunc performs one resolution; it must honour ctx.
type resolveFunc func(ctx context.Context) outcome

// join returns the flight for key, starting it with resolve when none runs.
// started reports whether this call started it (for prefetch accounting);
// ok is false when a new flight was needed but limit flights already run.
//
// A client's miss (fromCache) first looks at the cache, under the lock
// that a finishing flight takes to leave running: a flight stores its
// answer before it leaves, so a client that missed the cache just before
// that flight ended finds the answer here rather than asking the upstream a
// second time; a fresh entry comes back as a flight already done. A
// prefetch does not look: its entry is fresh, and it is meant to refresh it.
func (f *flights) join(key cache.Key, limit int, resolve resolveFunc, fromCache bool) (fl *flight, started, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl, found := f.running[key]; found {
		return fl, false, true
	}
	if fromCache {
		if res, fresh := f.cache.Fresh(key); fresh {
			done := make(chan struct{})
			close(done)
			return &flight{done: done, outcome: outcome{msg: res.Msg}, started: time.Now()}, false, true
		}
	}
	if f.ctx.Err() != nil {
		return nil, false, false
	}
	if f.inflight.Load() >= int64(limit) {
		f.rejected.Add(1)
		return nil, false, false
	}
	return f.startLocked(key, resolve), true, true
}

// startLocked starts a flight for key running resolve; f.mu is held.
func (f *flights) startLocked(key cache.Key, resolve resolveFunc) *flight {
	fl := &flight{done: make(chan struct{}), started: time.Now(), f: f, key: key, resolve: resolve}
	f.launchLocked(fl)
	return fl
}

// launchLocked counts fl in and hands it to a goroutine; f.mu is held.
func (f *flights) launchLocked(fl *flight) {
	f.addLocked(fl)
	f.workers.run(fl)
}

// addLocked counts fl in; f.mu is held. It ends with finish.
func (f *flights) addLocked(fl *flight) {
	f.inflight.Add(1)
	f.running[fl.key] = fl
	f.wg.Add(1)
}

// run is the flight's goroutine: the resolution, then finish.
func (fl *flight) run() {
	fl.finish(fl.resolveRecovered())
}

// finish ends the flight with o: it leaves the running set, its
// general-path waiters are woken and its wire waiters answered.
func (fl *flight) finish(o outcome) {
	if !fl.finished.CompareAndSwap(false, true) {
		return // ended already (startWire's recovery, then a late reply)
	}
	f := fl.f
	defer f.wg.Done()
	fl.outcome = o
	f.mu.Lock()
	delete(f.running, fl.key)
	waiters := fl.waiters
	fl.waiters, fl.wireDone = nil, true
	for _, w := range waiters {
		f.deadlines.remove(w.heapIndex)
	}
	f.mu.Unlock()
	f.inflight.Add(-1)
	close(fl.done)
	for _, w := range waiters {
		w.h.answerWire(fl, w, false)
	}
}

// resolveRecovered runs the flight's resolution. A panic in it fails the
// resolution instead of the process: its waiters get SERVFAIL (or stale),
// as ServeDNS's recoverer gives a query whose handler panicked, and
// flights.onPanic is told.
func (fl *flight) resolveRecovered() (o outcome) {
	defer fl.recoverInto(&o)
	return fl.resolve(fl.f.ctx)
}

// recoverInto, deferred, turns a panic in a resolution into its failure.
func (fl *flight) recoverInto(o *outcome) {
	if v := recover(); v != nil {
		*o = fl.panicOutcome(v, debug.Stack())
	}
}

// panicOutcome tells flights.onPanic about v and fails the resolution.
func (fl *flight) panicOutcome(v any, stack []byte) outcome {
	if fl.f.onPanic != nil {
		fl.f.onPanic(v, stack)
	}
	return outcome{err: fmt.Errorf("resolution of %s panicked: %v", fl.key.Name, v)}
}

// full reports whether limit resolutions already run; a cheap first look
// before rejectNew.
func (f *flights) full(limit int) bool { return f.inflight.Load() >= int64(limit) }

// rejectNew is what join would do for key when the cap is full, without
// starting anything: it reports true, counting a rejection, when no flight
// for key runs and limit flights already do. key is only looked up.
func (f *flights) rejectNew(key cache.Key, limit int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, found := f.running[key]; found || f.inflight.Load() < int64(limit) {
		return false
	}
	f.rejected.Add(1)
	return true
}

// count returns how many resolutions are running.
func (f *flights) count() int { return int(f.inflight.Load()) }

// rejections returns how many joins the in-flight cap turned away.
func (f *flights) rejections() uint64 { return f.rejected.Load() }

// close cancels every running resolution and waits for them to return.
func (f *flights) close() {
	f.cancel()
	f.expiry.Stop()
	// A wire resolution waiting for its first reply has no goroutine
	// watching the context: one takes it over.
	f.mu.Lock()
	for _, fl := range f.running {
		if fl.callStarted {
			fl.wireCall.Kick()
		}
	}
	f.mu.Unlock()
	f.wg.Wait()
	f.workers.stop()
}
