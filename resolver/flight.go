package resolver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/resolver/clock"
	"github.com/towerd/towerd/upstream"
)

// flight is one upstream resolution shared by every client that asks the
// same question (same cache key) while it runs: ServeDNS's clients, the
// wire waiters of the fast path's readers (UDP and TCP), or nobody (a
// prefetch, a stale answer's refresh). Every flight runs the same
// resolution (resolution.go) and ends in the same settle; only its
// waiters differ, and every waiter waits the same way (deadlines.go).
type flight struct {
	// finished makes finish run once: a flight whose start panicked is
	// ended by the recovery, and its upstream call may still report.
	finished atomic.Bool
	outcome
	// waiters are the clients waiting for the flight (deadlines.go);
	// whoever ends the flight (finish) wakes them. Guarded by flights.mu;
	// ended is set once they were taken, the outcome set before.
	waiters []*waiter
	ended   bool
	inline  [1]*waiter // waiters' first room: most flights have one client

	f   *flights
	key cache.Key
	// res is what the resolution needs (resolution.go), kept here rather
	// than in a closure: one allocation less per miss.
	res resolution
	// call is the resolution's upstream side, in the flight's allocation
	// (wireFlight); callStarted, under flights.mu, says it runs: close
	// kicks it.
	call        *upstream.WireCall
	callStarted bool
	// yielding, under flights.mu: the flight was chosen to give up its
	// slot (jostle.go), not to be chosen again.
	yielding bool
	// share and jostleAt, under flights.mu, are its places in the
	// jostle's index (jostleindex.go) while its call runs.
	share    *parentShare
	jostleAt [2]int
	// started is when the resolution began, by the flights' clock (the
	// one the client timers run on): a client joining it late waits only for
	// what is left of the client response timer (Handler.ServeDNS).
	started time.Time
}

// wireFlight is a flight with its upstream call: one allocation for both.
type wireFlight struct {
	flight
	call upstream.WireCall
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
	// yields counts the resolutions that gave up their slot (jostle.go).
	yields yieldStats
	// jostle indexes the running resolutions for choosing the one that
	// yields (jostleindex.go); under mu.
	jostle jostleIndex

	ctx     context.Context // cancelled by close: shutdown abandons resolutions
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	workers *workers // goroutines for what may wait (a chase, a general answer)

	// deadlines are the waiting clients by deadline, a min-heap under mu,
	// and expiry the one timer, set to the earliest (deadlines.go): no
	// timer per flight or per client.
	deadlines deadlines
	expiry    clock.Timer
	// expiryAt is when expiry fires, zero when it is not armed (or may
	// not be): under mu.
	expiryAt time.Time
	// clock is the handler's (Config.Clock): the expiry timer's, and
	// every flight's start and client's deadline.
	clock clock.Clock

	// onPanic, if set, is told about a resolution that panicked.
	onPanic func(v any, stack []byte)

	// cache is where flights store their answers: a client's join looks
	// there under mu before starting a flight (join, joinWire).
	cache *cache.Cache
}

func newFlights(c *cache.Cache, clk clock.Clock) *flights {
	ctx, cancel := context.WithCancel(context.Background())
	f := &flights{running: make(map[cache.Key]*flight), ctx: ctx, cancel: cancel, workers: newWorkers(), cache: c,
		clock: clk}
	f.expiry = clk.AfterFunc(time.Hour, f.expire)
	f.expiry.Stop()
	return f
}

// outcome is how a resolution ended: the answer prepared from the reply's
// bytes (wire, when wireOK; read-only once the flight is done), the
// upstream server that replied ("" when unknown) and the error. msg is set
// instead of wire only for a flight join made of a fresh cache entry.
// source names where the answer came from when that is not the
// resolution itself (SourceSearch: a held NXDOMAIN, searchahead.go).
type outcome struct {
	wire   cache.WireAnswer
	wireOK bool
	msg    *dns.Msg
	server string
	err    error
	source string
}

// answerSource is where the outcome's answer is counted as coming from.
func (o *outcome) answerSource() string {
	if o.source != "" {
		return o.source
	}
	return SourceUpstream
}

// message is the answer as a dns.Msg for a general-path waiter: a copy
// made from the prepared answer, as a hit right after storing shows it.
func (o *outcome) message() *dns.Msg {
	if o.msg == nil && o.wireOK {
		return o.wire.Message()
	}
	return o.msg
}

// join returns the flight for key, making one that will run res when none
// runs (started: the caller then calls its start, outside the lock); ok
// is false when a new flight was needed but limit flights already run.
// started also tells prefetch accounting that this call started it.
//
// A client's miss (fromCache) first looks at the cache, under the lock
// that a finishing flight takes to leave running: a flight stores its
// answer before it leaves, so a client that missed the cache just before
// that flight ended finds the answer here rather than asking the upstream a
// second time; a fresh entry comes back as a flight ended at birth (no
// waiter can join it: flights.wait). A prefetch does not look: its entry
// is fresh, and it is meant to refresh it. aliased says key's name
// aliases a packet: a flight made for it keeps a copy.
func (f *flights) join(key cache.Key, limit int, res resolution, fromCache, aliased bool) (fl *flight, started, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl, found := f.running[key]; found {
		return fl, false, true
	}
	if fromCache {
		if r, fresh := f.cache.Fresh(key); fresh {
			return &flight{outcome: outcome{msg: r.Msg}, ended: true, started: f.clock.Now()}, false, true
		}
	}
	if f.ctx.Err() != nil {
		return nil, false, false
	}
	if f.inflight.Load() >= int64(limit) {
		f.rejected.Add(1)
		return nil, false, false
	}
	if aliased {
		key.Name = strings.Clone(key.Name)
	}
	return f.newLocked(key, res), true, true
}

// joinWire adds w to the flight for key (which may alias a packet: it is
// only looked up), making one that will run res when none runs (started:
// the caller then calls its start). It reports false, having changed
// nothing, when a new flight is needed but the cache has an entry for key
// since the caller looked (a flight that just ended stored it: ServeDNS
// answers from it), the flights are closing, or limit flights run
// (ServeDNS's miss decision then answers).
func (f *flights) joinWire(key cache.Key, limit int, w *wireWaiter, res resolution) (fl *flight, started, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl, found := f.running[key]
	if !found {
		if f.cache.Has(key) || f.ctx.Err() != nil || f.inflight.Load() >= int64(limit) {
			return nil, false, false
		}
		// The flight's key is kept: a string of its own.
		key.Name = strings.Clone(key.Name)
		fl = f.newLocked(key, res)
		started = true
	}
	f.addWaiterLocked(fl, &w.waiter)
	return fl, started, true
}

// newLocked makes and counts in the flight for key running res; f.mu is
// held. It ends with finish.
func (f *flights) newLocked(key cache.Key, res resolution) *flight {
	wf := &wireFlight{flight: flight{started: f.clock.Now(), f: f, key: key, res: res}}
	fl := &wf.flight
	fl.call = &wf.call
	f.inflight.Add(1)
	f.running[key] = fl
	f.wg.Add(1)
	return fl
}

// finish ends the flight with o: it leaves the running set and its
// waiters are woken (a wire waiter answered, a ServeDNS client told).
func (fl *flight) finish(o outcome) {
	if !fl.finished.CompareAndSwap(false, true) {
		return // ended already (start's recovery, then a late reply)
	}
	f := fl.f
	defer f.wg.Done()
	fl.outcome = o
	f.mu.Lock()
	f.leaveLocked(fl)
	waiters := fl.waiters
	fl.waiters, fl.ended = nil, true
	for _, w := range waiters {
		f.deadlines.remove(w.heapIndex)
	}
	f.mu.Unlock()
	f.inflight.Add(-1)
	for _, w := range waiters {
		w.wake(false)
	}
}

// leaveLocked takes fl out of the running set; f.mu is held.
func (f *flights) leaveLocked(fl *flight) {
	delete(f.running, fl.key)
	f.jostle.removeLocked(fl)
}

// callStartedLocked records that fl's upstream call runs (close kicks
// it, and it may yield its slot: jostle.go); f.mu is held.
func (f *flights) callStartedLocked(fl *flight) {
	fl.callStarted = true
	if !fl.ended { // a reply may have ended it before StartWire returned
		f.jostle.addLocked(fl)
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

// isRunning reports whether a resolution for key runs; key is only looked
// up.
func (f *flights) isRunning(key cache.Key) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, found := f.running[key]
	return found
}

// count returns how many resolutions are running.
func (f *flights) count() int { return int(f.inflight.Load()) }

// rejections returns how many joins the in-flight cap turned away.
func (f *flights) rejections() uint64 { return f.rejected.Load() }

// close cancels every running resolution and waits for them to return.
func (f *flights) close() {
	f.cancel()
	f.expiry.Stop()
	// Nothing watches a resolution's context: each is kicked, outside the
	// lock (a kicked resolution ends at once, and its flight's end takes
	// the lock).
	f.mu.Lock()
	var started []*upstream.WireCall
	for _, fl := range f.running {
		if fl.callStarted {
			started = append(started, fl.call)
		}
	}
	f.mu.Unlock()
	for _, c := range started {
		c.Kick()
	}
	f.wg.Wait()
	f.workers.stop()
}
