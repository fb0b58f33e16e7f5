package cache

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/towerd/towerd/test/dnstest"
)

// The collector reports the cache's own counters at scrape time, with an
// expired lookup counted as a miss and, apart, as an expired lookup.
func TestCollector(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 2, MaxStaleAge: time.Hour})
	mustSet(t, c, keyA("a.example."), aReply(t, "a.example.", 60, "192.0.2.1"))
	mustSet(t, c, keyA("b.example."), aReply(t, "b.example.", 600, "192.0.2.2"))
	c.Get(keyA("a.example."))       // hit
	c.Get(keyA("b.example."))       // hit
	c.Get(keyA("nothing.example.")) // miss
	clock.Advance(2 * time.Minute)  // a expired, b fresh
	c.Get(keyA("a.example."))       // expired: a miss, and an expired lookup
	tc := aReply(t, "tc.example.", 60, "192.0.2.9")
	tc.Truncated = true
	dnstest.SetMsg(c, keyA("tc.example."), tc) // refused: a fragment
	// a was used last, so c pushes b out.
	mustSet(t, c, keyA("c.example."), aReply(t, "c.example.", 60, "192.0.2.3"))

	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(c))
	// Two entries, a.example. and c.example.: each its reply with its TTL
	// offsets, its name and the overhead.
	wantBytes := 0
	for _, k := range c.lru.Keys() {
		it, _ := c.lru.Peek(k)
		wantBytes += EntryOverhead + len(k.Name) + int(allocSize(len(it.data)))
	}
	want := `
# HELP towerd_cache_bytes What the cached answers cost: each one's reply and name plus a fixed per-entry overhead.
# TYPE towerd_cache_bytes gauge
towerd_cache_bytes ` + strconv.Itoa(wantBytes) + `
# HELP towerd_cache_capacity_entries Most answers the cache holds (cache.size); past it the least recently used go.
# TYPE towerd_cache_capacity_entries gauge
towerd_cache_capacity_entries 2
# HELP towerd_cache_entries Answers in the cache now, expired ones kept for serve-stale included.
# TYPE towerd_cache_entries gauge
towerd_cache_entries 2
# HELP towerd_cache_evictions_total Entries pushed out because the cache was full (cache.size or cache.max_bytes).
# TYPE towerd_cache_evictions_total counter
towerd_cache_evictions_total 1
# HELP towerd_cache_expired_lookups_total Cache lookups that found only an expired entry, still within the maximum stale age.
# TYPE towerd_cache_expired_lookups_total counter
towerd_cache_expired_lookups_total 1
# HELP towerd_cache_hits_total Cache lookups answered by a fresh entry.
# TYPE towerd_cache_hits_total counter
towerd_cache_hits_total 2
# HELP towerd_cache_max_bytes Most bytes the cache holds (cache.max_bytes); past it the least recently used answers go.
# TYPE towerd_cache_max_bytes gauge
towerd_cache_max_bytes 1.6777216e+07
# HELP towerd_cache_misses_total Cache lookups without a fresh entry (none at all, or only an expired one).
# TYPE towerd_cache_misses_total counter
towerd_cache_misses_total 2
# HELP towerd_cache_store_refusals_total Answers the store policy kept out: NXDOMAIN, SERVFAIL, truncated replies and the like.
# TYPE towerd_cache_store_refusals_total counter
towerd_cache_store_refusals_total 1
# HELP towerd_cache_stores_total Answers stored (new or replacing an entry).
# TYPE towerd_cache_stores_total counter
towerd_cache_stores_total 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if _, ok := c.Get(keyA("b.example.")); ok {
		t.Errorf("b.example. still cached; the eviction above went elsewhere")
	}
}
