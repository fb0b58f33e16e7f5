package resolver

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/towerd/towerd/cache"
)

// The in-flight cap shared fairly (issue 35). Names nobody answers hold a
// slot each until upstream.timeout (5 s): 200 such names a second behind
// one silent authoritative server kept the cap (150) full, and half of the
// other clients' first-time names were SERVFAIL at the cap. So, with the
// cap full, a new question takes the slot of the oldest resolution that
// has run longer than yieldAge: that resolution ends at once (its waiting
// clients, if any, get stale or SERVFAIL, its attempts are accounted as
// timeouts) and is not remembered as a failure (failures.go): nothing was
// decided about its question.
//
// Against unbound's jostle-timeout (a full request list drops a query that
// has waited longer than 200 ms, without answering it): towerd yields only
// when the cap is full, only the oldest resolution, one per new question,
// and answers the yielded one's clients instead of leaving them to retry.
// The age is unbound's 200 ms, which is also upstream.min_attempt_timeout's
// default: by then a resolution's first attempt has had its whole timeout,
// and a server that answers at all has answered most questions (on a
// node, the tail of a healthy upstream is tens of milliseconds), while the
// client still waits (query_timeout, 1.8 s) for the question that took the
// slot. A share per zone or per name would not help here: the silent
// names and the clients' own are in the same zone, under random names.
// Prefetches and names asked ahead take no slot this way: only a client's
// own miss yields another.

// yieldAge is how long a resolution runs before it may yield its slot to a
// new question when the cap is full; never past the client's own wait.
func (s *settings) yieldAge() time.Duration { return min(s.QueryTimeout, 200*time.Millisecond) }

// yieldStats counts the slots given up.
type yieldStats struct {
	yielded atomic.Uint64
}

// yieldOldest ends the resolution chosen to make room for key's
// (victimLocked), outside the lock, and reports whether one ended and
// left its slot.
func (f *flights) yieldOldest(cutoff time.Time, key cache.Key, limit int) bool {
	f.mu.Lock()
	oldest := f.victimLocked(cutoff, key, limit)
	if oldest != nil {
		f.yieldingLocked(oldest)
	}
	f.mu.Unlock()
	if oldest == nil || !oldest.call.Yield() {
		return false // none may yield, or it was ending anyway (a chase, a reply)
	}
	f.yields.yielded.Add(1)
	return true
}

// yieldingLocked marks fl chosen to give up its slot: it is not chosen
// again. f.mu is held.
func (f *flights) yieldingLocked(fl *flight) {
	fl.yielding = true
	f.jostle.yieldingLocked(fl)
}

// victimLocked is the running resolution that gives its slot to key's at
// the cap, nil when none may; f.mu is held. Names under one parent
// domain (a random-subdomain flood: r1.silent.test, r2.silent.test, …)
// holding more than half the cap take slots only from each other, and
// only past cutoff; a question of any other parent takes the oldest
// resolution of that dominant parent, whatever its age, else the oldest
// past cutoff. So a flood of random names that fail at once, asked again
// as fast as they fail, recycles its own slots and cannot starve the
// other names of the zone (issue 35). The counts and the oldest are the
// index's (jostleindex.go): a question at the cap costs a few heap steps,
// not a walk over every running resolution.
func (f *flights) victimLocked(cutoff time.Time, key cache.Key, limit int) *flight {
	// The dominant parent is counted with the resolutions already
	// yielding: they are the flood's still, and a flood recycling its
	// slots fast has many of them ending at any moment (counting only the
	// others let a flood of 256 TCP connections look like no flood).
	own := parentDomain(key.Name)
	dominant := f.jostle.dominant(own)
	switch {
	case dominant == nil:
		return nil
	case dominant.count <= limit/2:
		return f.jostle.oldest.firstBefore(cutoff)
	case dominant.name == own:
		return dominant.oldest.firstBefore(cutoff)
	default:
		return dominant.oldest.first()
	}
}

// parentDomain is name less its first label ("." for a top-level name).
func parentDomain(name string) string {
	if i := strings.IndexByte(name, '.'); i >= 0 && i+1 < len(name) {
		return strings.ToLower(name[i+1:])
	}
	return "."
}

// canYield reports whether a resolution could yield to key's (the fast
// reject then leaves the question to ServeDNS, which yields it).
func (f *flights) canYield(cutoff time.Time, key cache.Key, limit int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.victimLocked(cutoff, key, limit) != nil
}

// yieldCutoff is the start time before which a resolution may yield.
func (h *Handler) yieldCutoff(s *settings) time.Time { return h.flights.clock.Now().Add(-s.yieldAge()) }

// makeRoom yields a slot for key's new resolution when the cap is full and
// no resolution for key runs (which the question would join instead). It
// reports whether one yielded: the slot is then this question's, even if
// another took it meanwhile (the caller's join may pass the cap by one).
func (h *Handler) makeRoom(s *settings, key cache.Key) bool {
	f := h.flights
	if !f.full(s.MaxInflight) || f.isRunning(key) {
		return false
	}
	return f.yieldOldest(h.yieldCutoff(s), key, s.MaxInflight)
}

// InflightYields returns how many resolutions gave up their slot to a new
// question at the cap (towerd_inflight_yields_total).
func (h *Handler) InflightYields() uint64 { return h.flights.yields.yielded.Load() }
