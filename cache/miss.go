package cache

// Has reports whether an entry for k is stored, fresh or expired, without
// counting anything or changing recency. With CountMiss it lets a caller
// that can answer a query without an entry (the resolver's fast SERVFAIL
// when its in-flight cap is full) keep the counters Get would have kept.
func (c *Cache) Has(k Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Contains(k)
}

// CountMiss counts a query answered without an entry, as a Get that found
// nothing would have.
func (c *Cache) CountMiss() { c.stats.misses.Add(1) }

// Fresh returns the entry for k if it is fresh, without counting anything
// or changing recency: for a caller that already counted its lookup and
// looks again (the resolver, when a resolution it meant to join has just
// ended and stored its answer).
func (c *Cache) Fresh(k Key) (Result, bool) {
	now := c.clock()
	c.mu.Lock()
	it, ok := c.lru.Peek(k)
	c.mu.Unlock()
	if !ok {
		return Result{}, false
	}
	a := it.ageAt(now.sinceEpoch)
	if !a.fresh {
		return Result{}, false
	}
	return it.result(a, now), true
}

// HasFresh reports whether a fresh entry for k is stored, without counting
// anything, changing recency or copying the entry: the resolver's search
// rules ask it about names a lookup will try later.
func (c *Cache) HasFresh(k Key) bool {
	now := c.clock()
	c.mu.Lock()
	it, ok := c.lru.Peek(k)
	c.mu.Unlock()
	return ok && it.ageAt(now.sinceEpoch).fresh
}
