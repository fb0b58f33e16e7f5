package cache

import "github.com/prometheus/client_golang/prometheus"

// collector exposes a Cache's counters to Prometheus. It reads Stats, Len
// and Capacity at scrape time instead of counting on the hot path twice:
// the cache already keeps atomic counters, and a scrape every few seconds
// costs one lock for Len.
type collector struct {
	c *Cache

	entries, capacity        *prometheus.Desc
	bytes, maxBytes          *prometheus.Desc
	hits, misses, evictions  *prometheus.Desc
	stored, refused, expired *prometheus.Desc
}

// NewCollector returns a prometheus.Collector for c's size and counters;
// register it on the registry that serves /metrics.
//
// A lookup that finds an expired entry is a miss here (it could not answer
// fresh) and is also counted in towerd_cache_expired_lookups_total; whether
// the expired entry was then served stale is the resolver's business and is
// counted there.
func NewCollector(c *Cache) prometheus.Collector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, nil, nil)
	}
	return &collector{
		c:         c,
		entries:   desc("towerd_cache_entries", "Answers in the cache now, expired ones kept for serve-stale included."),
		capacity:  desc("towerd_cache_capacity_entries", "Most answers the cache holds (cache.size); past it the least recently used go."),
		bytes:     desc("towerd_cache_bytes", "What the cached answers cost: each one's reply and name plus a fixed per-entry overhead."),
		maxBytes:  desc("towerd_cache_max_bytes", "Most bytes the cache holds (cache.max_bytes); past it the least recently used answers go."),
		hits:      desc("towerd_cache_hits_total", "Cache lookups answered by a fresh entry."),
		misses:    desc("towerd_cache_misses_total", "Cache lookups without a fresh entry (none at all, or only an expired one)."),
		expired:   desc("towerd_cache_expired_lookups_total", "Cache lookups that found only an expired entry, still within the maximum stale age."),
		evictions: desc("towerd_cache_evictions_total", "Entries pushed out because the cache was full (cache.size or cache.max_bytes)."),
		stored:    desc("towerd_cache_stores_total", "Answers stored (new or replacing an entry)."),
		refused:   desc("towerd_cache_store_refusals_total", "Answers the store policy kept out: NXDOMAIN, SERVFAIL, truncated replies and the like."),
	}
}

// Describe implements prometheus.Collector.
func (col *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{col.entries, col.capacity, col.bytes, col.maxBytes, col.hits, col.misses,
		col.expired, col.evictions, col.stored, col.refused} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (col *collector) Collect(ch chan<- prometheus.Metric) {
	s := col.c.Stats()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(col.entries, float64(col.c.Len()))
	gauge(col.capacity, float64(col.c.Capacity()))
	gauge(col.bytes, float64(col.c.Bytes()))
	gauge(col.maxBytes, float64(col.c.MaxBytes()))
	counter(col.hits, s.Hits)
	counter(col.misses, s.Misses+s.StaleHits)
	counter(col.expired, s.StaleHits)
	counter(col.evictions, s.Evictions)
	counter(col.stored, s.Stored)
	counter(col.refused, s.Refused)
}
