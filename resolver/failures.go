package resolver

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/towerd/towerd/cache"
	"github.com/towerd/towerd/upstream"
)

// Failures remembered (RFC 9520, issue 35). A question whose resolution
// towerd gave up on — a CNAME chain past its limits or in a loop, every
// server of the zone silent, or failing with SERVFAIL, REFUSED or a network
// error — is answered SERVFAIL for failureTTL without asking again, unless
// a stale answer is there to serve (RFC 8767 wins: planMiss looks at the
// stale entry first, and a failed refresh of an entry is the cache's own
// mark, cache.MarkRefreshFailed) or a server of the zone came back since.
// Without it, a client retrying a name whose chain a hostile upstream
// loops cost 16 upstream queries per retry, and a name nobody answers held
// an in-flight slot for every retry. NXDOMAIN is an answer, not a failure:
// never remembered here, never cached.
//
// failureTTL is 5 s: RFC 9520 asks for at least 1 s and at most 5 min,
// with a backoff for persistent failures. towerd's failures are mostly a
// Consul agent or an upstream that is briefly away, and a name that
// recovers must not stay SERVFAIL past the next retry of a client that
// waits (glibc retries after 5 s): 5 s caps a retrying client's cost at one
// resolution per name per 5 s and delays a recovery by at most that. No
// backoff: a zone whose servers are all down is already probed, not asked
// (upstream health), so a longer memory would only hide its return.
const failureTTL = 5 * time.Second

// maxRemembered bounds the memory: at the in-flight cap's 1,000
// resolutions per upstream timeout, 5 s of failures fit several times
// over. Past it the oldest failure is forgotten first (it is the nearest to
// expiring anyway).
const maxRemembered = 16384

// failureMemory is the questions whose resolution failed lately.
type failureMemory struct {
	// size is len(at), read without the lock: a miss pays nothing while
	// no failure is remembered.
	size  atomic.Int64
	mu    sync.Mutex
	at    map[cache.Key]time.Time
	order []cache.Key // oldest first, as remembered: a ring of maxRemembered
	head  int
}

func newFailureMemory() *failureMemory {
	return &failureMemory{at: make(map[cache.Key]time.Time)}
}

// remembered reports whether key's resolution failed less than failureTTL
// before now, and when.
func (m *failureMemory) remembered(key cache.Key, now time.Time) (time.Time, bool) {
	if m.size.Load() == 0 {
		return time.Time{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.at[key]
	if !ok || now.Sub(at) >= failureTTL || now.Before(at) {
		return time.Time{}, false
	}
	return at, true
}

// remember records key's failure at now, when err is one towerd decided
// for the question (rememberedFailure).
func (m *failureMemory) remember(key cache.Key, now time.Time, err error) {
	if !rememberedFailure(err) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.at[key]; !ok {
		if len(m.order) < maxRemembered {
			m.order = append(m.order, key)
		} else {
			delete(m.at, m.order[m.head])
			m.order[m.head] = key
			m.head = (m.head + 1) % maxRemembered
		}
	}
	m.at[key] = now
	m.size.Store(int64(len(m.at)))
}

// forget drops key's failure: it was answered.
func (m *failureMemory) forget(key cache.Key) {
	if m.size.Load() == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.at, key) // its ring slot stays until it comes round
	m.size.Store(int64(len(m.at)))
}

// failedLately is the rule: key's resolution failed less than failureTTL
// before now and no server of zone has come back since. planMiss answers
// such a question SERVFAIL (with no stale answer to give); the fast path
// sends it to its reject, which asks planMiss.
func (h *Handler) failedLately(key cache.Key, zone Zone, now time.Time) bool {
	at, failed := h.failures.remembered(key, now)
	return failed && !zone.Upstream.RecoveredSince(at)
}

// rememberedFailure says whether err is a resolution failure of the
// question itself: a broken chain, every server silent (the resolution's
// deadline), or failing. Not: a resolution cancelled (shutdown, a reload),
// a reply the entry builder refused, or towerd's own state (a query it
// could not send, a panic): another try may fare better at once.
func rememberedFailure(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	switch upstream.ErrorKind(err) {
	case upstream.KindChain, upstream.KindTimeout, upstream.KindServFail, upstream.KindRefused, upstream.KindNetwork:
		return true
	}
	return false
}
