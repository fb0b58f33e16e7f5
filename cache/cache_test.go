package cache

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// newTestCache returns a cache on a fake clock.
func newTestCache(t testing.TB, cfg Config) (*Cache, *dnstest.Clock) {
	t.Helper()
	clock := dnstest.NewClock(clockStart)
	cfg.Now = clock.Now
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, clock
}

// aReply is a positive reply with one A record.
func aReply(t testing.TB, name string, ttl int, ip string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Response = true
	m.Answer = []dns.RR{mustRR(t, fmt.Sprintf("%s %d IN A %s", name, ttl, ip))}
	return m
}

func mustSet(t testing.TB, c *Cache, k Key, m *dns.Msg) {
	t.Helper()
	if ok, reason := dnstest.SetMsg(c, k, m); !ok {
		t.Fatalf("Set(%v) refused: %q", k, reason)
	}
}

func keyA(name string) Key { return NewKey(name, dns.TypeA, dns.ClassINET, false, false) }

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string // "" = valid
	}{
		{"valid minimal", Config{Capacity: 1}, ""},
		{"valid full", Config{Capacity: 10, MinTTL: time.Second, MaxTTL: time.Hour, MaxStaleAge: 24 * time.Hour}, ""},
		{"min without max", Config{Capacity: 10, MinTTL: time.Hour}, ""},
		{"zero capacity", Config{}, "Capacity"},
		{"negative capacity", Config{Capacity: -1}, "Capacity"},
		{"negative min", Config{Capacity: 1, MinTTL: -1}, "MinTTL"},
		{"negative max", Config{Capacity: 1, MaxTTL: -1}, "MaxTTL"},
		{"negative stale age", Config{Capacity: 1, MaxStaleAge: -1}, "MaxStaleAge"},
		{"min above max", Config{Capacity: 1, MinTTL: time.Hour, MaxTTL: time.Minute}, "MinTTL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if tt.field == "" {
				if err != nil || c == nil {
					t.Fatalf("New = %v, %v; want a cache", c, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New succeeded, want an error naming %s", tt.field)
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q: want ErrInvalidConfig naming %s", err, tt.field)
			}
		})
	}
}

func TestGetCountsDown(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 10})
	k := keyA("www.example.com.")
	m := reply(t, dns.RcodeSuccess, sections{
		answer: []string{"www.example.com. 300 IN A 192.0.2.1"},
		ns:     []string{"example.com. 600 IN NS ns1.example.com."},
		extra:  []string{"ns1.example.com. 900 IN A 192.0.2.53"},
	})
	m.SetEdns0(1232, false)
	mustSet(t, c, k, m)

	for _, step := range []struct {
		advance time.Duration
		want    uint32
	}{{0, 300}, {5300 * time.Millisecond, 295}, {294 * time.Second, 1}} {
		clock.Advance(step.advance)
		r, ok := c.Get(k)
		if !ok || !r.Fresh || r.Kind != Positive {
			t.Fatalf("Get after %v: ok %v fresh %v kind %v; want fresh positive", step.advance, ok, r.Fresh, r.Kind)
		}
		for _, rr := range append(append(r.Msg.Answer, r.Msg.Ns...), r.Msg.Extra...) {
			if rr.Header().Ttl != step.want {
				t.Errorf("%v: TTL %d, want %d", rr, rr.Header().Ttl, step.want)
			}
			if rr.Header().Rrtype == dns.TypeOPT {
				t.Errorf("result carries an OPT record")
			}
		}
		if r.TTL != 300*time.Second || r.Stored.IsZero() {
			t.Errorf("TTL %v stored %v, want 5m0s and a time", r.TTL, r.Stored)
		}
	}
}

func TestFailureNeverReplacesGoodEntry(t *testing.T) {
	nxdomain := reply(t, dns.RcodeNameError, sections{ns: []string{soa(3600, 300)}})
	servfail := reply(t, dns.RcodeServerFailure, sections{})
	truncated := aReply(t, "www.example.com.", 999, "198.51.100.9")
	truncated.Truncated = true

	for _, tt := range []struct {
		name    string
		msg     *dns.Msg
		reason  string
		refused uint64 // SetWire's refusals; PrepareAnswer's count nothing
	}{
		{"nxdomain", nxdomain, "rcode NXDOMAIN", 1},
		{"servfail", servfail, "rcode SERVFAIL", 0},
		{"truncated", truncated, "truncated", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, clock := newTestCache(t, Config{Capacity: 10})
			k := keyA("www.example.com.")
			mustSet(t, c, k, aReply(t, "www.example.com.", 300, "192.0.2.1"))
			clock.Advance(10 * time.Second)

			stored, reason := dnstest.SetMsg(c, k, tt.msg)
			if stored || reason != tt.reason {
				t.Fatalf("Set = %v, %q; want false, %q", stored, reason, tt.reason)
			}
			r, ok := c.Get(k)
			if !ok || r.Kind != Positive || !r.Fresh {
				t.Fatalf("after refused Set: ok %v kind %v fresh %v; want the old positive entry", ok, r.Kind, r.Fresh)
			}
			a := r.Msg.Answer[0].(*dns.A)
			if !a.A.Equal(net.IPv4(192, 0, 2, 1)) || a.Hdr.Ttl != 290 {
				t.Errorf("entry changed to %v, want 192.0.2.1 with TTL 290", a)
			}
			if s := c.Stats(); s.Stored != 1 || s.Refused != tt.refused {
				t.Errorf("Stats = %+v, want Stored 1 Refused %d", s, tt.refused)
			}
		})
	}
}

func TestNXDOMAINIsNeverStored(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 10, MaxStaleAge: 24 * time.Hour})
	k := keyA("new.example.com.")
	if stored, _ := dnstest.SetMsg(c, k, reply(t, dns.RcodeNameError, sections{ns: []string{soa(3600, 3600)}})); stored {
		t.Fatal("NXDOMAIN stored")
	}
	if _, ok := c.Get(k); ok || c.Len() != 0 {
		t.Errorf("Get found an NXDOMAIN entry (Len %d)", c.Len())
	}
}

func TestNoDataEntry(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 10})
	k := NewKey("v4only.example.com.", dns.TypeAAAA, dns.ClassINET, false, false)
	mustSet(t, c, k, reply(t, dns.RcodeSuccess, sections{ns: []string{soa(3600, 300)}}))
	clock.Advance(100 * time.Second)
	r, ok := c.Get(k)
	if !ok || r.Kind != NoData || !r.Fresh || r.TTL != 300*time.Second {
		t.Fatalf("NODATA Get: ok %v kind %v fresh %v ttl %v; want fresh nodata 5m0s", ok, r.Kind, r.Fresh, r.TTL)
	}
	if len(r.Msg.Answer) != 0 || len(r.Msg.Ns) != 1 || r.Msg.Ns[0].Header().Ttl != 200 {
		t.Errorf("NODATA message: %d answers, authority %v; want none and the SOA at TTL 200", len(r.Msg.Answer), r.Msg.Ns)
	}
}

func TestResultIsPrivateCopy(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 10})
	k := keyA("www.example.com.")
	mustSet(t, c, k, aReply(t, "www.example.com.", 300, "192.0.2.1"))

	r, _ := c.Get(k)
	r.Msg.Id = 4242
	r.Msg.Answer[0].(*dns.A).A = net.IPv4(203, 0, 113, 66)
	r.Msg.Answer[0].Header().Name = "evil.example."
	r.Msg.Answer = append(r.Msg.Answer, mustRR(t, "www.example.com. 300 IN A 203.0.113.67"))

	again, _ := c.Get(k)
	if len(again.Msg.Answer) != 1 {
		t.Fatalf("stored entry has %d answers after caller appended, want 1", len(again.Msg.Answer))
	}
	a := again.Msg.Answer[0].(*dns.A)
	if !a.A.Equal(net.IPv4(192, 0, 2, 1)) || a.Hdr.Name != "www.example.com." {
		t.Errorf("stored entry changed through a Result: %v", a)
	}
}

func TestLRUEvictionOrder(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 2})
	a, b, d := keyA("a.example."), keyA("b.example."), keyA("d.example.")
	mustSet(t, c, a, aReply(t, "a.example.", 300, "192.0.2.1"))
	mustSet(t, c, b, aReply(t, "b.example.", 300, "192.0.2.2"))
	if _, ok := c.Get(a); !ok { // a is now the most recently used
		t.Fatal("a missing")
	}
	mustSet(t, c, d, aReply(t, "d.example.", 300, "192.0.2.4"))

	if _, ok := c.Get(b); ok {
		t.Error("b survived; the least recently used entry should have been evicted")
	}
	for _, k := range []Key{a, d} {
		if _, ok := c.Get(k); !ok {
			t.Errorf("%v evicted, want kept", k)
		}
	}
	if c.Len() != 2 || c.Capacity() != 2 {
		t.Errorf("Len %d Capacity %d, want 2 2", c.Len(), c.Capacity())
	}
	if got := c.Stats().Evictions; got != 1 {
		t.Errorf("Evictions = %d, want 1", got)
	}

	// Removals are not evictions, and replacing an entry evicts nothing.
	mustSet(t, c, a, aReply(t, "a.example.", 60, "192.0.2.9"))
	c.Remove(d)
	c.Flush()
	if got := c.Stats().Evictions; got != 1 {
		t.Errorf("Evictions = %d after replace, Remove and Flush, want still 1", got)
	}
}

func TestRemoveAndFlush(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 10})
	k := keyA("www.example.com.")
	mustSet(t, c, k, aReply(t, "www.example.com.", 300, "192.0.2.1"))
	if !c.Remove(k) || c.Remove(k) {
		t.Error("Remove should report true once, then false")
	}
	for _, name := range []string{"a.example.", "b.example.", "c.example."} {
		mustSet(t, c, keyA(name), aReply(t, name, 300, "192.0.2.1"))
	}
	if n := c.Flush(); n != 3 || c.Len() != 0 {
		t.Errorf("Flush = %d, Len %d; want 3, 0", n, c.Len())
	}
	if got := c.RemoveName("a.example."); got != 0 {
		t.Errorf("RemoveName after Flush = %d, want 0 (index cleared)", got)
	}
}

func TestMarkRefreshFailed(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 10, MaxStaleAge: time.Hour})
	k := keyA("www.example.com.")
	c.MarkRefreshFailed(k, clock.Now()) // absent: no-op, must not create an entry
	if c.Len() != 0 {
		t.Fatalf("MarkRefreshFailed on a missing key created an entry")
	}
	mustSet(t, c, k, aReply(t, "www.example.com.", 60, "192.0.2.1"))
	clock.Advance(70 * time.Second)
	askedAt := clock.Now()
	clock.Advance(3 * time.Second) // the refresh's wait
	c.MarkRefreshFailed(k, askedAt)
	clock.Advance(5 * time.Second)

	r, ok := c.Get(k)
	if !ok || !r.RefreshFailedAt.Equal(askedAt) {
		t.Fatalf("RefreshFailedAt = %v (ok %v), want %v, when the failed refresh was asked", r.RefreshFailedAt, ok, askedAt)
	}
	mustSet(t, c, k, aReply(t, "www.example.com.", 60, "192.0.2.1"))
	if r, _ := c.Get(k); !r.RefreshFailedAt.IsZero() {
		t.Errorf("a new Set kept the old failure time %v", r.RefreshFailedAt)
	}
}

func TestStatsCounts(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 10, MaxStaleAge: time.Minute})
	k := keyA("www.example.com.")
	c.Get(k) // miss
	mustSet(t, c, k, aReply(t, "www.example.com.", 10, "192.0.2.1"))
	c.Get(k) // hit
	c.Get(k) // hit
	clock.Advance(11 * time.Second)
	c.Get(k) // stale hit
	tc := aReply(t, "www.example.com.", 10, "192.0.2.9")
	tc.Truncated = true
	dnstest.SetMsg(c, k, tc) // refused: a fragment
	want := Stats{Hits: 2, Misses: 1, StaleHits: 1, Stored: 1, Refused: 1}
	if got := c.Stats(); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
}

// A reload's TTL policy: new clamps apply to answers stored afterwards (an
// entry keeps its TTL), the stale age to every entry at once; a bad policy
// is refused and the old one stays.
func TestSetTTLPolicy(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 10, MaxStaleAge: time.Hour})
	mustSet(t, c, keyA("before.example."), aReply(t, "before.example.", 0, "192.0.2.1"))

	if err := c.SetTTLPolicy(Config{MinTTL: time.Minute, MaxTTL: time.Hour}); err != nil {
		t.Fatalf("SetTTLPolicy: %v", err)
	}
	mustSet(t, c, keyA("after.example."), aReply(t, "after.example.", 0, "192.0.2.2"))
	if r, ok := c.Get(keyA("after.example.")); !ok || !r.Fresh || r.TTL != time.Minute {
		t.Errorf("stored after the reload: found %v, fresh %v, TTL %v; want fresh with TTL 1m (min_ttl)", ok, r.Fresh, r.TTL)
	}
	// Stored expired under the old policy, and the new stale age is 0.
	if _, ok := c.Get(keyA("before.example.")); ok {
		t.Errorf("entry from before the reload still served with serve-stale turned off")
	}

	if err := c.SetTTLPolicy(Config{MinTTL: 2 * time.Hour, MaxTTL: time.Hour}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("min above max: err %v, want ErrInvalidConfig", err)
	}
	clock.Advance(30 * time.Second)
	mustSet(t, c, keyA("later.example."), aReply(t, "later.example.", 0, "192.0.2.3"))
	if r, _ := c.Get(keyA("later.example.")); r.TTL != time.Minute {
		t.Errorf("after a refused policy: TTL %v, want the running policy's 1m", r.TTL)
	}
}
