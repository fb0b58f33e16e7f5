package cache

import (
	"cmp"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// Key identifies one cache entry.
//
// DO and CD are part of the key because they change the answer: with DO the
// reply carries RRSIGs (RFC 3225 §3), with CD a validating upstream returns
// data it would otherwise have refused as bogus (RFC 4035 §3.2.2). Serving one
// for the other would hand a client data it did not ask for, or withhold
// the signatures it did.
type Key struct {
	// Name is the query name, ASCII lower-cased and fully qualified
	// (trailing dot). Build keys with NewKey so this always holds.
	Name string
	// Type is the query type (dns.TypeA, ...).
	Type uint16
	// Class is the query class, almost always dns.ClassINET.
	Class uint16
	// DO is the client's DNSSEC OK bit.
	DO bool
	// CD is the client's Checking Disabled bit.
	CD bool
}

// NewKey builds a Key with the name in canonical form. DNS names compare
// case-insensitively in ASCII only (RFC 4343 §3), so only A–Z are folded; the
// resolver keeps the client's spelling for the reply itself.
func NewKey(name string, qtype, qclass uint16, do, cd bool) Key {
	return Key{Name: canonicalName(name), Type: qtype, Class: qclass, DO: do, CD: cd}
}

// String renders the key the way operators read it: "example.com. A IN +do".
func (k Key) String() string {
	var b strings.Builder
	b.WriteString(k.Name)
	b.WriteByte(' ')
	b.WriteString(dns.Type(k.Type).String())
	b.WriteByte(' ')
	b.WriteString(dns.Class(k.Class).String())
	if k.DO {
		b.WriteString(" +do")
	}
	if k.CD {
		b.WriteString(" +cd")
	}
	return b.String()
}

// canonicalName lower-cases ASCII letters and adds the trailing dot. It
// skips the allocation for names that are already canonical, which is the
// common case on the hot path (stub resolvers send lower case).
func canonicalName(name string) string {
	if dns.IsFqdn(name) && !hasUpperASCII(name) {
		return name
	}
	return dns.CanonicalName(name)
}

func hasUpperASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// nameIndex finds every key stored under one name, so that RemoveName and
// Inspect do not walk the whole cache. It is kept in step with the LRU by
// the LRU's evict callback and is guarded by the cache's mutex. The keys of
// a name are a slice, not a set: most names have one or two entries (A and
// AAAA), and a small map per name cost 250 bytes, a third of an entry.
type nameIndex map[string][]Key

func (ix nameIndex) add(k Key) {
	keys := ix[k.Name]
	if slices.Contains(keys, k) {
		return
	}
	ix[k.Name] = append(keys, k)
}

func (ix nameIndex) remove(k Key) {
	keys, ok := ix[k.Name]
	if !ok {
		return
	}
	i := slices.Index(keys, k)
	if i < 0 {
		return
	}
	if len(keys) == 1 {
		// Drop the empty list, or a flood of unique names would leave one
		// behind per name and grow the index past the cache's bound.
		delete(ix, k.Name)
		return
	}
	ix[k.Name] = slices.Delete(keys, i, i+1)
}

// keys returns the keys stored under name (already canonical), in a fixed
// order so that Inspect output is stable.
func (ix nameIndex) keys(name string) []Key {
	out := slices.Clone(ix[name])
	slices.SortFunc(out, compareKeys)
	return out
}

func compareKeys(a, b Key) int {
	return cmp.Or(
		cmp.Compare(a.Type, b.Type),
		cmp.Compare(a.Class, b.Class),
		compareBool(a.DO, b.DO),
		compareBool(a.CD, b.CD),
	)
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	default:
		return 1
	}
}

// RemoveName removes every entry stored under name (compared
// case-insensitively, with or without the trailing dot), whatever its type,
// class, DO or CD bit, and returns how many it removed. Operators use it to
// forget one name without flushing the whole cache.
func (c *Cache) RemoveName(name string) int {
	name = canonicalName(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	removed := 0
	for _, k := range c.byName.keys(name) {
		if c.lru.Remove(k) {
			removed++
		}
	}
	return removed
}

// Inspect describes every entry stored under name (any type, class, DO or CD
// bit), entries past their stale window included, ordered by type. Unlike
// Get it does not bump recency or count hits and misses: looking must not
// change what the cache keeps.
func (c *Cache) Inspect(name string) []Info {
	name = canonicalName(name)
	type found struct {
		key  Key
		item *item
	}
	c.mu.Lock()
	keys := c.byName.keys(name)
	entries := make([]found, 0, len(keys))
	for _, k := range keys {
		if it, ok := c.lru.Peek(k); ok {
			entries = append(entries, found{k, it})
		}
	}
	c.mu.Unlock()

	// Items are immutable, so the formatting runs without the lock.
	now := c.now()
	infos := make([]Info, 0, len(entries))
	for _, e := range entries {
		infos = append(infos, e.item.info(e.key, e.item.ageAt(now)))
	}
	return infos
}
