package cache

import (
	"testing"
	"time"

	"github.com/towerd/towerd/test/dnstest"
)

// clockStart is where every test's clock starts.
var clockStart = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func TestAgeAt(t *testing.T) {
	const (
		s  = time.Second
		ms = time.Millisecond
	)
	tests := []struct {
		name        string
		ttl         time.Duration
		elapsed     time.Duration
		maxStaleAge time.Duration
		fresh       bool
		shown       uint32
		remaining   time.Duration
		expired     time.Duration
		servable    bool
	}{
		{"immediate re-query shows full ttl", 300 * s, 0, 0, true, 300, 300 * s, 0, true},
		{"within the first second still full", 300 * s, 999 * ms, 0, true, 300, 300*s - 999*ms, 0, true},
		{"5.3 s later is 5 lower", 300 * s, 5300 * ms, 0, true, 295, 300*s - 5300*ms, 0, true},
		{"last nanosecond shows 1 not 0", 300 * s, 300*s - 1, 0, true, 1, 1, 0, true},
		{"fractional ttl rounds up", 1500 * ms, 1200 * ms, 0, true, 1, 300 * ms, 0, true},
		{"clock stepped back counts as no time", 60 * s, -10 * s, 0, true, 60, 60 * s, 0, true},
		{"expires exactly at ttl", 300 * s, 300 * s, time.Hour, false, 0, 0, 0, true},
		{"stale inside window", 300 * s, 400 * s, time.Hour, false, 0, 0, 100 * s, true},
		{"stale at window edge", 300 * s, 300*s + time.Hour, time.Hour, false, 0, 0, time.Hour, true},
		{"past window", 300 * s, 300*s + time.Hour + 1, time.Hour, false, 0, 0, time.Hour + 1, false},
		{"expired with stale off", 300 * s, 300 * s, 0, false, 0, 0, 0, false},
		{"ttl 0 never fresh", 0, 0, time.Hour, false, 0, 0, 0, true},
		{"ttl 0 with stale off", 0, 0, 0, false, 0, 0, 0, false},
		{"huge clamp still a legal ttl", 200 * 365 * 24 * time.Hour, 0, 0, true, maxRRTTL, 200 * 365 * 24 * time.Hour, 0, true},
	}
	const stored = 5 * time.Minute // since the cache's epoch
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := &item{prepared: prepared{ttl: tt.ttl}, stored: stored}
			a := it.ageAt(stored + tt.elapsed)
			if a.fresh != tt.fresh {
				t.Errorf("fresh = %v, want %v", a.fresh, tt.fresh)
			}
			if a.shownTTL != tt.shown {
				t.Errorf("shown TTL = %d, want %d", a.shownTTL, tt.shown)
			}
			if a.remaining != tt.remaining {
				t.Errorf("remaining = %v, want %v", a.remaining, tt.remaining)
			}
			if a.expired != tt.expired {
				t.Errorf("expired = %v, want %v", a.expired, tt.expired)
			}
			if got := a.servable(tt.maxStaleAge); got != tt.servable {
				t.Errorf("servable(%v) = %v, want %v", tt.maxStaleAge, got, tt.servable)
			}
		})
	}
}

// TestShownTTLNeverZeroWhileFresh walks an entry through its life in 100 ms
// steps: the countdown must fall by one per whole second and stay >= 1.
func TestShownTTLNeverZeroWhileFresh(t *testing.T) {
	const ttl = 3 * time.Second
	for elapsed := time.Duration(0); elapsed < ttl; elapsed += 100 * time.Millisecond {
		got := shownTTL(ttl, elapsed)
		want := uint32(3 - elapsed/time.Second)
		if got != want || got == 0 {
			t.Errorf("shownTTL(3s, %v) = %d, want %d", elapsed, got, want)
		}
	}
}

func TestResultCarriesRefreshFailure(t *testing.T) {
	m := reply(t, 0, sections{answer: []string{"www.example.com. 60 IN A 192.0.2.1"}})
	p, reason := prepare(m, ttlBounds{})
	if reason != "" {
		t.Fatalf("refused: %q", reason)
	}
	clock := dnstest.NewClock(clockStart)
	epoch := clock.Now()
	clock.Advance(time.Minute)
	read := func() instant { return instant{Time: clock.Now(), sinceEpoch: clock.Now().Sub(epoch)} }
	stored := read()
	it := newItem(p, stored)
	if r := it.result(it.ageAt(stored.sinceEpoch), stored); !r.RefreshFailedAt.IsZero() || !r.Stored.Equal(stored.Time) {
		t.Fatalf("new item has RefreshFailedAt %v, Stored %v; want none and %v", r.RefreshFailedAt, r.Stored, stored.Time)
	}
	clock.Advance(61 * time.Second)
	it.markRefreshFailed(clock.Now())
	now := read()
	r := it.result(it.ageAt(now.sinceEpoch), now)
	if !r.Stored.Equal(stored.Time) {
		t.Errorf("Stored = %v, want %v", r.Stored, stored.Time)
	}
	if !r.RefreshFailedAt.Equal(clock.Now()) {
		t.Errorf("RefreshFailedAt = %v, want %v", r.RefreshFailedAt, clock.Now())
	}
	if r.Fresh || r.Expired != time.Second || r.Msg.Answer[0].Header().Ttl != 0 {
		t.Errorf("stale result: fresh %v expired %v ttl %d, want false 1s 0",
			r.Fresh, r.Expired, r.Msg.Answer[0].Header().Ttl)
	}
}

func TestExpiryWithoutServeStale(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 10})
	k := keyA("www.example.com.")
	mustSet(t, c, k, aReply(t, "www.example.com.", 60, "192.0.2.1"))
	clock.Advance(60 * time.Second)
	if _, ok := c.Get(k); ok {
		t.Fatal("expired entry returned with MaxStaleAge 0")
	}
	if c.Len() != 0 {
		t.Errorf("Len = %d after an expired Get, want 0 (dropped)", c.Len())
	}
}

func TestServeStaleWindow(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 10, MaxStaleAge: time.Hour})
	k := keyA("www.example.com.")
	mustSet(t, c, k, aReply(t, "www.example.com.", 60, "192.0.2.1"))

	clock.Advance(90 * time.Second)
	r, ok := c.Get(k)
	if !ok || r.Fresh {
		t.Fatalf("Get 30 s past expiry: ok %v fresh %v, want a stale result", ok, r.Fresh)
	}
	if r.Expired != 30*time.Second || r.Remaining != 0 || r.Msg.Answer[0].Header().Ttl != 0 {
		t.Errorf("stale result: expired %v remaining %v ttl %d; want 30s 0s 0",
			r.Expired, r.Remaining, r.Msg.Answer[0].Header().Ttl)
	}

	clock.Advance(time.Hour - 30*time.Second + time.Nanosecond)
	if _, ok := c.Get(k); ok {
		t.Fatal("entry returned past MaxStaleAge")
	}
	if c.Len() != 0 {
		t.Errorf("Len = %d, want the too-old entry dropped", c.Len())
	}
	if got, want := c.Stats(), (Stats{StaleHits: 1, Misses: 1, Stored: 1}); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
}

func TestTTLZeroIsStaleMaterialOnly(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 10, MaxStaleAge: time.Hour})
	k := keyA("web.service.consul.")
	mustSet(t, c, k, aReply(t, "web.service.consul.", 0, "192.0.2.7"))
	r, ok := c.Get(k)
	if !ok || r.Fresh || r.TTL != 0 || r.Expired != 0 {
		t.Fatalf("TTL-0 entry: ok %v fresh %v ttl %v expired %v; want stale, 0, 0", ok, r.Fresh, r.TTL, r.Expired)
	}
	if s := c.Stats(); s.Hits != 0 || s.StaleHits != 1 {
		t.Errorf("Stats = %+v, want one stale hit and no fresh hit", s)
	}
}
