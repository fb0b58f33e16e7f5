// Package cache holds towerd's answer cache: keys, the store policy, TTL
// arithmetic and an LRU bounded by entry count.
//
// An entry keeps the TTL it was stored with and the time it was stored, and
// every read works out the TTL left from an injected clock, as CoreDNS
// plugin/cache does. Entries are kept past expiry (up to Config.MaxStaleAge)
// so the resolver can serve stale answers when upstreams fail (RFC 8767).
// The cache never talks to upstreams and never logs; deciding when to serve
// stale or prefetch is the caller's job.
package cache

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// ErrInvalidConfig is wrapped by every error New returns, so callers can
// tell a bad configuration from other start-up failures.
var ErrInvalidConfig = errors.New("invalid cache config")

// Config sets up a Cache. The zero value is not valid: Capacity must be set.
type Config struct {
	// Capacity is the maximum number of entries; beyond it the least
	// recently used entry is evicted. Must be > 0.
	Capacity int
	// MaxBytes bounds what the entries cost, each counted as its reply,
	// its name and EntryOverhead (bytes.go); beyond it least recently used
	// entries are evicted. 0 means DefaultMaxBytes; at most MaxBytesLimit.
	MaxBytes int64
	// MinTTL is the lower clamp on an entry's TTL; 0 means none.
	MinTTL time.Duration
	// MaxTTL is the upper clamp on an entry's TTL; 0 means none.
	MaxTTL time.Duration
	// MaxStaleAge is how long past expiry an entry may still be returned as
	// stale (RFC 8767 §5 suggests 1 to 3 days). 0 means never: expired
	// entries are misses and are dropped.
	MaxStaleAge time.Duration
	// NoDataTTL is the TTL of a NODATA reply without an SOA (RFC 2308
	// gives it none; dnsmasq's local= names answer so), before the clamps;
	// 0 means 0 s: kept only as stale material. See replyTTL.
	NoDataTTL time.Duration
	// Now is the clock; nil means time.Now. Tests inject a fake one to jump
	// in time without sleeping.
	Now func() time.Time
}

func (cfg Config) validate() error {
	switch {
	case cfg.Capacity <= 0:
		return fmt.Errorf("%w: Capacity must be > 0, got %d", ErrInvalidConfig, cfg.Capacity)
	case cfg.MaxBytes < 0 || cfg.MaxBytes > MaxBytesLimit:
		return fmt.Errorf("%w: MaxBytes must be between 0 and %d, got %d", ErrInvalidConfig, MaxBytesLimit, cfg.MaxBytes)
	case cfg.MinTTL < 0:
		return fmt.Errorf("%w: MinTTL must not be negative, got %s", ErrInvalidConfig, cfg.MinTTL)
	case cfg.MaxTTL < 0:
		return fmt.Errorf("%w: MaxTTL must not be negative, got %s", ErrInvalidConfig, cfg.MaxTTL)
	case cfg.MaxStaleAge < 0:
		return fmt.Errorf("%w: MaxStaleAge must not be negative, got %s", ErrInvalidConfig, cfg.MaxStaleAge)
	case cfg.NoDataTTL < 0:
		return fmt.Errorf("%w: NoDataTTL must not be negative, got %s", ErrInvalidConfig, cfg.NoDataTTL)
	case cfg.MaxTTL > 0 && cfg.MinTTL > cfg.MaxTTL:
		return fmt.Errorf("%w: MinTTL (%s) must not exceed MaxTTL (%s)", ErrInvalidConfig, cfg.MinTTL, cfg.MaxTTL)
	}
	return nil
}

// Stats are the cache's counters since New. They only grow; Len gives the
// current size.
type Stats struct {
	// Hits counts Gets answered by a fresh entry.
	Hits uint64
	// Misses counts Gets with no servable entry.
	Misses uint64
	// StaleHits counts Gets answered by an expired entry within MaxStaleAge.
	StaleHits uint64
	// Evictions counts entries pushed out by capacity only; Remove, Flush
	// and entries dropped past their stale window are not evictions.
	Evictions uint64
	// Stored counts Sets that stored an entry (new or replacing).
	Stored uint64
	// Refused counts Sets the store policy refused.
	Refused uint64
}

// counters are atomic so that Stats never takes the cache lock.
type counters struct {
	hits, misses, staleHits, evictions, stored, refused atomic.Uint64
}

// Cache is a concurrency-safe DNS answer cache. Create it with New.
type Cache struct {
	capacity int
	// policy is swapped whole by SetTTLPolicy (a configuration reload), so
	// a reader never sees the clamps of one policy with the stale age of
	// another.
	policy atomic.Pointer[ttlPolicy]
	now    func() time.Time
	// epoch is the clock read in New; items keep their stored time as time
	// since it (see instant).
	epoch time.Time

	// mu guards lru and the byte count: every Get moves an entry in the
	// LRU list, so a read lock would buy nothing.
	mu       sync.Mutex
	lru      *simplelru.LRU[Key, *item]
	bytes    int64 // what the entries cost (entrySize)
	maxBytes int64 // the bound on bytes

	stats counters
}

// New checks cfg and returns an empty cache. The error names the bad field
// and wraps ErrInvalidConfig.
func New(cfg Config) (*Cache, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Cache{
		capacity: cfg.Capacity,
		now:      cfg.Now,
	}
	c.policy.Store(cfg.ttlPolicy())
	if c.now == nil {
		c.now = time.Now
	}
	c.epoch = c.now()
	c.maxBytes, _ = maxBytesOrDefault(cfg.MaxBytes) // validated
	// simplelru (not the locked lru.Cache) so that one lock covers a lookup
	// and the checks around it (Get drops an entry too old to serve).
	// Evictions are counted where they are made (addLocked); the callback
	// only gives back an entry's bytes.
	lru, err := simplelru.NewLRU[Key, *item](cfg.Capacity, c.onEvict)
	if err != nil {
		return nil, fmt.Errorf("creating LRU: %w", err)
	}
	c.lru = lru
	return c, nil
}

// Get returns the entry for k if it is fresh, or stale for no longer than
// MaxStaleAge, and bumps its LRU recency. It reports false on a miss; an
// entry expired for longer than MaxStaleAge is removed and is a miss too.
func (c *Cache) Get(k Key) (Result, bool) {
	now := c.clock()
	c.mu.Lock()
	it, ok := c.lru.Get(k)
	if !ok {
		c.mu.Unlock()
		c.stats.misses.Add(1)
		return Result{}, false
	}
	a := it.ageAt(now.sinceEpoch)
	if !a.servable(c.policy.Load().maxStaleAge) {
		// Too old even for serve-stale: drop it now so it stops taking a
		// slot from entries that can still answer.
		c.lru.Remove(k)
		c.mu.Unlock()
		c.stats.misses.Add(1)
		return Result{}, false
	}
	c.mu.Unlock()

	if a.fresh {
		c.stats.hits.Add(1)
	} else {
		c.stats.staleHits.Add(1)
	}
	// The item is immutable, so the copy is made outside the lock.
	return it.result(a, now), true
}

// store adds the entry prepared as p under k and counts it: SetWire's
// way in. An entry larger than MaxBytes is refused.
func (c *Cache) store(k Key, p prepared) (stored bool, reason string) {
	it := newItem(p, c.clock())
	c.mu.Lock()
	evicted, ok := c.addLocked(k, it)
	c.mu.Unlock()
	if !ok {
		c.stats.refused.Add(1)
		return false, reasonOverMaxBytes
	}
	c.stats.stored.Add(1)
	c.stats.evictions.Add(uint64(evicted))
	return true, ""
}

// clock reads the cache's clock.
func (c *Cache) clock() instant {
	now := c.now()
	return instant{Time: now, sinceEpoch: now.Sub(c.epoch)}
}

// ttlPolicy is the part of Config a running cache may change.
type ttlPolicy struct {
	bounds      ttlBounds
	maxStaleAge time.Duration
}

// ttlPolicy is cfg's TTL rules.
func (cfg Config) ttlPolicy() *ttlPolicy {
	return &ttlPolicy{bounds: ttlBounds{min: cfg.MinTTL, max: cfg.MaxTTL, noData: cfg.NoDataTTL},
		maxStaleAge: cfg.MaxStaleAge}
}

// SetTTLPolicy replaces MinTTL, MaxTTL, NoDataTTL and MaxStaleAge with
// cfg's (its Capacity and Now are not read), checked as New checks them, so
// a configuration reload keeps the cache. The TTL rules apply to answers
// stored from now on (an entry keeps the TTL it was stored with, as a
// client keeps the TTL it was given); the stale age applies at once, since
// it is weighed at every read.
func (c *Cache) SetTTLPolicy(cfg Config) error {
	cfg.Capacity = c.capacity
	if err := cfg.validate(); err != nil {
		return err
	}
	c.policy.Store(cfg.ttlPolicy())
	return nil
}

// Remove deletes the entry for k and reports whether there was one.
func (c *Cache) Remove(k Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Remove(k)
}

// Flush removes every entry and returns how many there were. Counters are
// kept: they describe the cache's life, not its contents.
func (c *Cache) Flush() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.lru.Len()
	c.lru.Purge()
	return n
}

// MarkRefreshFailed records on the entry for k, if any, that a refresh
// asked at asked has failed, so the resolver can keep serving it stale
// without asking upstream again for a while (RFC 8767 §4, the failure
// recheck timer, which runs from asked). The time is the ask's, not the
// failure's: a server that came back after the refresh was sent ends the
// recheck (Upstream.RecoveredSince), though the refresh's own packets,
// sent while it was away, failed after it came back (issue 33). It does
// not bump recency. A later SetWire for k starts a new entry with no failure
// recorded.
func (c *Cache) MarkRefreshFailed(k Key, asked time.Time) {
	c.mu.Lock()
	it, ok := c.lru.Peek(k)
	c.mu.Unlock()
	if ok {
		it.markRefreshFailed(asked)
	}
}

// Len returns the number of entries, stale ones included.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Capacity returns the maximum number of entries.
func (c *Cache) Capacity() int {
	return c.capacity
}

// Stats returns a snapshot of the counters. Each counter is read atomically;
// the set as a whole is not a single instant, which is fine for metrics.
func (c *Cache) Stats() Stats {
	return Stats{
		Hits:      c.stats.hits.Load(),
		Misses:    c.stats.misses.Load(),
		StaleHits: c.stats.staleHits.Load(),
		Evictions: c.stats.evictions.Load(),
		Stored:    c.stats.stored.Load(),
		Refused:   c.stats.refused.Load(),
	}
}
