package cache

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Result is what Get returns for an entry it may serve, fresh or stale.
type Result struct {
	// Msg is a private deep copy the caller may modify. Every RR TTL in
	// Answer, Ns and Extra is the remaining whole seconds when fresh and 0
	// when stale (the resolver picks the stale answer TTL, RFC 8767 §4). It
	// carries no OPT RR; header ID is 0, the flags are the upstream's; both are
	// meant to be rewritten.
	Msg *dns.Msg
	// Kind says whether the entry is a positive answer or NODATA.
	Kind Kind
	// Fresh is true while the entry is within its TTL.
	Fresh bool
	// TTL is the entry's lifetime as stored, after the MinTTL/MaxTTL clamps.
	TTL time.Duration
	// Remaining is the time left before expiry; it is > 0 exactly when Fresh.
	Remaining time.Duration
	// Expired is how long ago the entry expired; 0 for fresh entries.
	Expired time.Duration
	// Stored is when the entry was stored, by the cache's clock.
	Stored time.Time
	// RefreshFailedAt is the last MarkRefreshFailed time for this entry;
	// zero if there was none since it was stored.
	RefreshFailedAt time.Time
	// Origin says how the entry came into the cache.
	Origin Origin
}

// Info describes one entry for operators (the admin inspect endpoint).
type Info struct {
	// Key is the entry's key.
	Key Key
	// Kind says whether the entry is a positive answer or NODATA.
	Kind Kind
	// TTL is the entry's lifetime as stored, after clamps.
	TTL time.Duration
	// Remaining is the time left before expiry; > 0 exactly when Fresh.
	Remaining time.Duration
	// Expired is how long ago the entry expired; 0 for fresh entries.
	Expired time.Duration
	// Fresh is true while the entry is within its TTL.
	Fresh bool
	// Stored is when the entry was stored.
	Stored time.Time
	// Answer holds the answer records in presentation format, with the TTL
	// a client would see now (0 once expired). Empty for NODATA.
	Answer []string
	// Origin says how the entry came into the cache.
	Origin Origin
}

// Origin says how an entry came into the cache, so that operators are never
// told an answer came from an upstream when a file put it there (issue 21).
type Origin uint8

const (
	// OriginStored is an upstream's reply, stored by Set or SetWire.
	OriginStored Origin = iota
	// OriginRestored is an entry of a snapshot loaded with Load: the daemon's
	// own state file, read back on start.
	OriginRestored
	// OriginImported is an entry of a snapshot loaded with LoadOptions.Imported:
	// a file from elsewhere (`towerd cache load`).
	OriginImported
)

// String is "stored", "restored" or "imported".
func (o Origin) String() string {
	switch o {
	case OriginStored:
		return "stored"
	case OriginRestored:
		return "restored"
	case OriginImported:
		return "imported"
	}
	return "unknown"
}

// item is one stored reply. Everything but refreshFailedAt is fixed when the
// item is made, and a new SetWire makes a new item, so a reader holding the
// pointer needs no lock. As in CoreDNS plugin/cache, the item keeps the TTL
// it was stored with and the time of storing and works out what is left from
// the clock at each read, instead of rewriting TTLs in place. There is one
// item per entry, so every field counts (issue 6: bytes per entry).
type item struct {
	// prepared is the reply packed with the key as its question (see
	// wire.go), its kind and its TTL after clamps.
	prepared
	// stored is when the item was stored, as time since the cache's epoch
	// (see instant): 8 bytes where a time.Time takes 24.
	stored time.Duration

	// refreshFailedAt is Unix nanoseconds of the last failed refresh, 0 for
	// none. Atomic because the resolver marks failures without the cache lock.
	refreshFailedAt atomic.Int64

	// origin: how the item came in; a refresh makes a new, stored item. It
	// fits in the 64-byte size class the item's other fields leave room in.
	origin Origin
}

func newItem(p prepared, now instant) *item {
	return &item{prepared: p, stored: now.sinceEpoch}
}

// An instant is one reading of the cache's clock, both as the time read and
// as time since the cache's epoch (Cache.epoch, read from the same clock in
// New), the form items keep their stored time in. With time.Now both
// readings carry the monotonic clock, so ages are immune to wall-clock steps
// as they were when items kept a time.Time. Stored times become times again
// only at the edges (Result, Info, snapshots), by the reading at hand: now
// minus the time since storing, so the wall clock used is the current one.
type instant struct {
	time.Time
	sinceEpoch time.Duration
}

// at converts a time since the epoch, such as item.stored, to a time.
func (i instant) at(sinceEpoch time.Duration) time.Time {
	return i.Time.Add(subSaturating(sinceEpoch, i.sinceEpoch))
}

// fromTime converts t, from a snapshot, to time since the epoch. t carries
// no monotonic reading, so its distance from now is by the wall clock.
func (i instant) fromTime(t time.Time) time.Duration {
	return subSaturating(i.sinceEpoch, i.Time.Sub(t))
}

// subSaturating is a - b, clamped to the range of time.Duration as
// time.Time.Sub clamps: a stored time read from a snapshot may be centuries
// away, and must come out as very old, not wrap around into fresh.
func subSaturating(a, b time.Duration) time.Duration {
	d := a - b
	if (a >= 0) != (b >= 0) && (d >= 0) != (a >= 0) {
		if a >= 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return d
}

// message unpacks the stored reply into a new dns.Msg the caller owns, every
// TTL set to ttl. The store policy unpacked the same bytes before storing
// them, so this cannot fail for an item it made.
func (it *item) message(ttl uint32) *dns.Msg {
	m := new(dns.Msg)
	if err := m.Unpack(it.wire()); err != nil {
		panic("cache: stored message does not unpack: " + err.Error())
	}
	setTTLs(ttl, m.Answer, m.Ns, m.Extra)
	return m
}

// age is where an item stands at one instant.
type age struct {
	fresh     bool
	remaining time.Duration // > 0 iff fresh
	expired   time.Duration // how long past expiry; 0 while fresh
	shownTTL  uint32        // seconds to put in every RR; 0 when not fresh
}

// ageAt computes the item's state at now, a time since the cache's epoch
// (instant.sinceEpoch). Fresh iff elapsed < TTL, so an entry stored with
// TTL 0 (Consul's default) is expired on arrival: never served fresh, only
// kept as stale material.
func (it *item) ageAt(now time.Duration) age {
	elapsed := subSaturating(now, it.stored)
	if elapsed < 0 {
		// A stored time in the future (a snapshot written by a clock ahead
		// of ours, or a clock without a monotonic reading stepped back)
		// must not make an entry look younger than new, nor overshow its
		// TTL.
		elapsed = 0
	}
	if elapsed < it.ttl {
		return age{
			fresh:     true,
			remaining: it.ttl - elapsed,
			shownTTL:  shownTTL(it.ttl, elapsed),
		}
	}
	return age{expired: elapsed - it.ttl}
}

// servable reports whether an entry of this age may be returned at all:
// fresh, or stale for no longer than maxStaleAge (RFC 8767 §5 "maximum stale
// timer"). maxStaleAge 0 turns serve-stale off.
func (a age) servable(maxStaleAge time.Duration) bool {
	if a.fresh {
		return true
	}
	return maxStaleAge > 0 && a.expired <= maxStaleAge
}

// shownTTL is the TTL in seconds a client sees for a fresh entry: the stored
// TTL rounded up to whole seconds, minus whole seconds elapsed. A re-query
// in the same second shows the full TTL, 5.3 s later it is 5 lower, and it
// never reaches 0 while fresh (a 0 would tell clients not to cache an answer
// we are still serving as fresh). Since floor(elapsed) ≤ elapsed < TTL ≤
// ceil(TTL), the difference of the two integers is at least 1.
func shownTTL(ttl, elapsed time.Duration) uint32 {
	whole := ttl / time.Second
	if ttl%time.Second != 0 {
		whole++
	}
	left := whole - elapsed/time.Second
	if left > maxRRTTL {
		return maxRRTTL // RFC 2181 §8: never send a TTL with the top bit set
	}
	return uint32(left)
}

// result builds the caller's private view of the item at age a, worked out
// at now.
func (it *item) result(a age, now instant) Result {
	r := Result{
		Msg:       it.message(a.shownTTL),
		Kind:      it.kind,
		Fresh:     a.fresh,
		TTL:       it.ttl,
		Remaining: a.remaining,
		Expired:   a.expired,
		Stored:    now.at(it.stored),
		Origin:    it.origin,
	}
	if ns := it.refreshFailedAt.Load(); ns != 0 {
		r.RefreshFailedAt = time.Unix(0, ns)
	}
	return r
}

// info describes the item under key k at age a, worked out at now, for
// operators.
func (it *item) info(k Key, a age, now instant) Info {
	m := it.message(a.shownTTL)
	answer := make([]string, 0, len(m.Answer))
	for _, rr := range m.Answer {
		answer = append(answer, rr.String())
	}
	return Info{
		Key:       k,
		Kind:      it.kind,
		TTL:       it.ttl,
		Remaining: a.remaining,
		Expired:   a.expired,
		Fresh:     a.fresh,
		Stored:    now.at(it.stored),
		Answer:    answer,
		Origin:    it.origin,
	}
}

// markRefreshFailed records a failed refresh, asked at asked.
func (it *item) markRefreshFailed(asked time.Time) {
	it.refreshFailedAt.Store(asked.UnixNano())
}

// setTTLs gives every record in the sections the same TTL. One TTL for the
// whole reply keeps the countdown simple and is never longer than any record
// allows, since the entry's TTL is the smallest of them.
func setTTLs(ttl uint32, sections ...[]dns.RR) {
	for _, section := range sections {
		for _, rr := range section {
			rr.Header().Ttl = ttl
		}
	}
}
