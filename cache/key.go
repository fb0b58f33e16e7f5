package cache

import (
	"cmp"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/resolver/dnswire"
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

func compareKeys(a, b Key) int {
	return cmp.Or(
		strings.Compare(a.Name, b.Name),
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
	return c.removeKeys(c.keysOf(canonicalName(name)))
}

// Inspect describes every entry stored under name (any type, class, DO or CD
// bit), entries past their stale window included, ordered by type. Unlike
// Get it does not bump recency or count hits and misses: looking must not
// change what the cache keeps.
func (c *Cache) Inspect(name string) []Info {
	return c.inspectKeys(c.keysOf(canonicalName(name)))
}

// inspectKeys describes the entries of keys that are still cached.
func (c *Cache) inspectKeys(keys []Key) []Info {
	type found struct {
		key  Key
		item *item
	}
	entries := make([]found, 0, len(keys))
	c.mu.Lock()
	for _, k := range keys {
		if it, ok := c.lru.Peek(k); ok {
			entries = append(entries, found{k, it})
		}
	}
	c.mu.Unlock()

	// Items are immutable, so the formatting runs without the lock.
	now := c.clock()
	infos := make([]Info, 0, len(entries))
	for _, e := range entries {
		infos = append(infos, e.item.info(e.key, e.item.ageAt(now.sinceEpoch), now))
	}
	return infos
}

// keysOf returns the keys stored under name (already canonical), ordered by
// compareKeys so that Inspect output is stable.
//
// There is no index by name: kept in step with the LRU, one cost 87 heap
// bytes per entry (issue 6), a fifth of an entry, for calls an operator
// makes by hand. Instead the LRU's keys are copied out under the lock and
// searched outside it. The copy holds the lock, and so stalls every query,
// for about 3.5 ms per 100,000 entries on a 2-core VM (BenchmarkKeysOf;
// 0.2 ms at the default cache.size of 10,000). A rare admin call can afford
// that: Dump, every state_save_interval, holds it for the same copy and a
// walk of the values beside it (persist.go).
func (c *Cache) keysOf(name string) []Key {
	return c.keysWhere(func(n string) bool { return n == name })
}

// keysWhere returns the keys whose name match accepts, ordered by
// compareKeys; keysOf's comment says what the walk costs.
func (c *Cache) keysWhere(match func(name string) bool) []Key {
	c.mu.Lock()
	all := c.lru.Keys()
	c.mu.Unlock()
	var keys []Key
	for _, k := range all {
		if match(k.Name) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

// RemoveZone removes every entry stored under zone or a name below it
// (unbound-control's flush_zone; "." is the whole cache) and returns how
// many it removed.
func (c *Cache) RemoveZone(zone string) int {
	zone = canonicalName(zone)
	return c.removeKeys(c.keysWhere(func(n string) bool { return dnswire.InZoneText(n, zone) }))
}

// removeKeys removes the entries of keys still cached and returns how many
// it removed.
func (c *Cache) removeKeys(keys []Key) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	removed := 0
	for _, k := range keys {
		if c.lru.Remove(k) {
			removed++
		}
	}
	return removed
}

// InspectZone is Inspect for every name at or below zone ("." for the
// whole cache), ordered by name and type: `towerd cache list`.
func (c *Cache) InspectZone(zone string) []Info {
	zone = canonicalName(zone)
	return c.inspectKeys(c.keysWhere(func(n string) bool { return dnswire.InZoneText(n, zone) }))
}
