package resolver

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/towerd/towerd/cache"
)

// The held NXDOMAINs (issue 28): the upstream's last NXDOMAIN for each
// name that a search-list lookup tried or towerd asked ahead of one. They
// are not the cache: nothing here is answered as a cache hit, the cache
// never stores an NXDOMAIN, and an answer from here is at most
// Config.SearchHold older than the upstream's (searchahead.go says when
// one is given). They outlive that only as evidence of which lookups walk
// their search list (asIsEvidenceAge).

// maxHeld bounds the table: each entry is one NXDOMAIN reply (a question
// and an SOA, about 100 to 300 bytes) and a few words. A flood of names
// that do not exist cycles it (LRU); what is lost is only a shortcut.
const maxHeld = 4096

// asIsEvidenceAge is how long a client's question for a name's first
// search expansion counts as evidence that lookups of the name walk the
// search list (searchWalk.firstExpansion): a client retrying a name that
// does not exist yet (a service about to be registered) asks again within
// seconds; past this the evidence is stale and the name is asked alone.
const asIsEvidenceAge = 30 * time.Second

// heldNX is one held NXDOMAIN.
type heldNX struct {
	answer cache.WireAnswer // as settle prepared it
	server string
	at     time.Time // when it came, by the settings' clock
	// round is the round that asked the name ahead of its lookup; nil
	// when a client's own try asked it.
	round *searchRound
	// askedAt is when a client last asked the name (its own try, or an
	// answer from here it took); zero when none has.
	askedAt time.Time
}

// searchRound is one lookup's round of candidates asked ahead, started
// with the try that asked them (searchAhead). Its NXDOMAINs answer the
// lookup's later tries until the try that started it has been answered
// for Config.SearchHold: those tries come as soon as it is.
type searchRound struct {
	answered atomic.Int64 // the settings' clock, UnixNano, when the try was answered; 0 before
}

// serves reports whether an NXDOMAIN that came at from r still answers
// the lookup's later tries at now.
func (r *searchRound) serves(at, now time.Time, hold time.Duration) bool {
	done := r.answered.Load()
	if done == 0 {
		return true // the try runs still: this is the freshest word there is
	}
	return now.Sub(maxTime(at, time.Unix(0, done))) <= hold
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// heldTable is the held NXDOMAINs by cache key.
type heldTable struct {
	mu  sync.Mutex
	lru *simplelru.LRU[cache.Key, *heldNX]
	n   atomic.Int32 // entries, read without the lock by the fast reject
}

func newHeldTable() *heldTable {
	lru, err := simplelru.NewLRU[cache.Key, *heldNX](maxHeld, nil)
	if err != nil {
		panic("resolver: " + err.Error()) // unreachable: maxHeld > 0
	}
	return &heldTable{lru: lru}
}

// put holds e for k (a key of its own: the flight's), keeping when a
// client last asked the name.
func (t *heldTable) put(k cache.Key, e heldNX) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.lru.Peek(k); ok && old.askedAt.After(e.askedAt) {
		e.askedAt = old.askedAt
	}
	t.lru.Add(k, &e)
	t.n.Store(int32(t.lru.Len()))
}

// remove forgets k: the name exists now (its answer is in the cache).
func (t *heldTable) remove(k cache.Key) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lru.Remove(k)
	t.n.Store(int32(t.lru.Len()))
}

// get returns a copy of the entry for k; k is only looked up (it may
// alias a packet).
func (t *heldTable) get(k cache.Key) (heldNX, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.lru.Peek(k)
	if !ok {
		return heldNX{}, false
	}
	return *e, true
}

// has reports whether an entry for k may exist, without the lock when the
// table is empty: the fast reject asks on every packet of a flood.
func (t *heldTable) has(k cache.Key) bool {
	if t.n.Load() == 0 {
		return false
	}
	_, ok := t.get(k)
	return ok
}

// asked records that a client took the answer held for k at now.
func (t *heldTable) asked(k cache.Key, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.lru.Peek(k); ok {
		e.askedAt = now // k is only looked up: entries are changed in place
	}
}

// askedSince reports whether a client asked k's name at or after since.
func (t *heldTable) askedSince(k cache.Key, since time.Time) bool {
	e, ok := t.get(k)
	return ok && !e.askedAt.IsZero() && !e.askedAt.Before(since)
}
