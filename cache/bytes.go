package cache

import "fmt"

// The cache is bounded in bytes as well as entries (issue 21: cache.size
// 10,000 with 64 KB answers took 1.11 GB, 24 MB with one-address answers).
// unbound bounds its caches the same way (msg-cache-size and
// rrset-cache-size, 4 MB each by default). An entry is counted at its real
// size: the packed reply with its TTL offsets as the allocator rounds it,
// its key's name, and EntryOverhead for what every entry costs besides
// (the item, the LRU's list element and map slot, the key). Past either bound the least
// recently used entries go, as many as it takes.

const (
	// DefaultMaxBytes is Config.MaxBytes when it is 0. 10,000 ordinary
	// answers (one to a few addresses, a CNAME or two: about 400 bytes
	// counted) take 4 MiB, so cache.size binds first for them; the bytes
	// bind only when answers are large (DNSSEC signatures, big SRV sets, 64
	// KB TXT records), where 16 MiB still holds about 250 of the largest.
	// Twice unbound's defaults together (4 MB + 4 MB).
	DefaultMaxBytes = 16 << 20
	// MaxBytesLimit is the largest Config.MaxBytes.
	MaxBytesLimit = 1 << 30
	// EntryOverhead is what an entry costs on the heap besides its reply's
	// and its name's bytes, rounded up: the simplelru element (96 bytes,
	// its size class) and map slot, the item (64), the key (24); see
	// TestEntrySizeCoversTheHeap.
	EntryOverhead = 256
)

// entrySize is what the entry for k costs against MaxBytes.
func entrySize(k Key, it *item) int64 {
	return EntryOverhead + int64(len(k.Name)) + allocSize(len(it.data))
}

// allocSize is at least what the Go allocator takes for n bytes: above
// 32 KiB whole 8 KiB pages; below, a size class at most an eighth larger
// (a 62 KB reply takes 64 KiB, a 1,100-byte one 1,152).
func allocSize(n int) int64 {
	const page, maxSmall = 8 << 10, 32 << 10
	if n > maxSmall {
		return int64((n + page - 1) / page * page)
	}
	return int64(n + n/8)
}

// addLocked stores it under k and evicts least recently used entries until
// both bounds hold; c.mu is held. It returns how many entries it evicted,
// and false, storing nothing, for an entry larger than MaxBytes on its own
// (which would evict everything and still not fit). The bytes of an entry
// that leaves are given back by onEvict, whatever takes it out (eviction,
// Remove, Flush, an entry too old to serve).
func (c *Cache) addLocked(k Key, it *item) (evicted int, ok bool) {
	size := entrySize(k, it)
	if size > c.maxBytes {
		return 0, false
	}
	if old, ok := c.lru.Peek(k); ok {
		c.bytes -= entrySize(k, old) // Add replaces a value without the callback
	}
	c.bytes += size
	if c.lru.Add(k, it) {
		evicted++
	}
	for c.bytes > c.maxBytes {
		c.lru.RemoveOldest() // never it: it is the most recent, and fits alone
		evicted++
	}
	return evicted, true
}

// onEvict is the LRU's callback for every entry that leaves it.
func (c *Cache) onEvict(k Key, it *item) { c.bytes -= entrySize(k, it) }

// SetMaxBytes replaces MaxBytes (a configuration reload; 0 = DefaultMaxBytes)
// and evicts least recently used entries until the new bound holds.
func (c *Cache) SetMaxBytes(n int64) error {
	n, err := maxBytesOrDefault(n)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.maxBytes = n
	evicted := 0
	for c.bytes > c.maxBytes && c.lru.Len() > 0 {
		c.lru.RemoveOldest()
		evicted++
	}
	c.mu.Unlock()
	c.stats.evictions.Add(uint64(evicted))
	return nil
}

func maxBytesOrDefault(n int64) (int64, error) {
	switch {
	case n == 0:
		return DefaultMaxBytes, nil
	case n < 0 || n > MaxBytesLimit:
		return 0, fmt.Errorf("%w: MaxBytes must be between 0 and %d, got %d", ErrInvalidConfig, MaxBytesLimit, n)
	}
	return n, nil
}

// Bytes is what the entries cost now, counted as MaxBytes counts them.
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// MaxBytes is the bound on Bytes.
func (c *Cache) MaxBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxBytes
}
