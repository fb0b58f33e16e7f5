package cache

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

func TestNewKey(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"www.example.com.", "www.example.com."},
		{"WWW.Example.COM", "www.example.com."},
		{"MiXeD.consul.", "mixed.consul."},
		{"", "."},
		{".", "."},
		{"ÄBC.example.", "Äbc.example."}, // ASCII only (RFC 4343 §3): no Unicode folding
	}
	for _, tt := range tests {
		k := NewKey(tt.in, dns.TypeAAAA, dns.ClassINET, true, false)
		if k.Name != tt.want || k.Type != dns.TypeAAAA || k.Class != dns.ClassINET || !k.DO || k.CD {
			t.Errorf("NewKey(%q) = %+v, want name %q AAAA IN +do", tt.in, k, tt.want)
		}
	}
	if got := NewKey("A.example", dns.TypeA, dns.ClassINET, true, true).String(); got != "a.example. A IN +do +cd" {
		t.Errorf("Key.String() = %q", got)
	}
}

func TestKeyCaseAndBits(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 10})
	mustSet(t, c, NewKey("WWW.Example.com", dns.TypeA, dns.ClassINET, false, false),
		aReply(t, "www.example.com.", 300, "192.0.2.1"))

	if _, ok := c.Get(NewKey("www.EXAMPLE.com.", dns.TypeA, dns.ClassINET, false, false)); !ok {
		t.Error("lookup with other letter case missed")
	}
	// DO and CD change the answer (RRSIGs, unvalidated data), so they are
	// different entries.
	for _, k := range []Key{
		NewKey("www.example.com.", dns.TypeA, dns.ClassINET, true, false),
		NewKey("www.example.com.", dns.TypeA, dns.ClassINET, false, true),
		NewKey("www.example.com.", dns.TypeAAAA, dns.ClassINET, false, false),
		NewKey("www.example.com.", dns.TypeA, dns.ClassCHAOS, false, false),
	} {
		if _, ok := c.Get(k); ok {
			t.Errorf("Get(%v) hit an entry stored under another key", k)
		}
	}
}

func TestRemoveName(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 10})
	name := "www.example.com."
	for _, k := range []Key{
		NewKey(name, dns.TypeA, dns.ClassINET, false, false),
		NewKey(name, dns.TypeA, dns.ClassINET, true, false),
		NewKey(name, dns.TypeAAAA, dns.ClassINET, false, true),
	} {
		mustSet(t, c, k, aReply(t, name, 300, "192.0.2.1"))
	}
	other := keyA("other.example.com.")
	mustSet(t, c, other, aReply(t, "other.example.com.", 300, "192.0.2.2"))

	if got := c.RemoveName("WWW.EXAMPLE.COM"); got != 3 {
		t.Errorf("RemoveName = %d, want 3", got)
	}
	if c.Len() != 1 {
		t.Errorf("Len = %d, want 1 (other name kept)", c.Len())
	}
	if got := c.RemoveName(name); got != 0 {
		t.Errorf("second RemoveName = %d, want 0", got)
	}
	if _, ok := c.Get(other); !ok {
		t.Error("RemoveName removed another name")
	}
}

// TestRemoveNameAfterEviction: an evicted entry is gone for Inspect and
// RemoveName too, and a name's other entries are still found.
func TestRemoveNameAfterEviction(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 4})
	first := "n0.example."
	mustSet(t, c, NewKey(first, dns.TypeAAAA, dns.ClassINET, false, false), aReply(t, first, 300, "192.0.2.1"))
	for i := range 100 {
		name := fmt.Sprintf("n%d.example.", i)
		mustSet(t, c, keyA(name), aReply(t, name, 300, "192.0.2.1"))
	}
	if got := c.Stats().Evictions; got != 97 || c.Len() != 4 {
		t.Errorf("Evictions = %d, Len = %d; want 97 and 4", got, c.Len())
	}
	if infos := c.Inspect(first); len(infos) != 0 {
		t.Errorf("Inspect of an evicted name = %+v, want nothing", infos)
	}
	if got := c.RemoveName(first); got != 0 {
		t.Errorf("RemoveName of an evicted name = %d, want 0", got)
	}
	last := "n99.example."
	mustSet(t, c, NewKey(last, dns.TypeAAAA, dns.ClassINET, false, false), aReply(t, last, 300, "192.0.2.1"))
	if infos := c.Inspect(last); len(infos) != 2 || infos[0].Key.Type != dns.TypeA || infos[1].Key.Type != dns.TypeAAAA {
		t.Errorf("Inspect(%s) = %+v, want A then AAAA", last, infos)
	}
	if got := c.RemoveName(last); got != 2 || c.Len() != 2 {
		t.Errorf("RemoveName(%s) = %d leaving %d entries, want 2 and 2", last, got, c.Len())
	}
}

func TestInspect(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 2, MaxStaleAge: time.Hour})
	name := "www.example.com."
	kA := NewKey(name, dns.TypeA, dns.ClassINET, false, false)
	kAAAA := NewKey(name, dns.TypeAAAA, dns.ClassINET, false, false)
	mustSet(t, c, kA, aReply(t, name, 60, "192.0.2.1"))
	mustSet(t, c, kAAAA, reply(t, dns.RcodeSuccess, sections{ns: []string{soa(3600, 300)}}))
	clock.Advance(70 * time.Second)

	infos := c.Inspect("WWW.example.com")
	if len(infos) != 2 {
		t.Fatalf("Inspect returned %d entries, want 2", len(infos))
	}
	a, aaaa := infos[0], infos[1]
	if a.Key != kA || a.Kind != Positive || a.Fresh || a.Expired != 10*time.Second {
		t.Errorf("A info = %+v, want stale positive expired 10s", a)
	}
	if len(a.Answer) != 1 || !strings.HasPrefix(a.Answer[0], "www.example.com.\t0\tIN\tA\t192.0.2.1") {
		t.Errorf("A answer = %q, want the record at TTL 0", a.Answer)
	}
	if aaaa.Key != kAAAA || aaaa.Kind != NoData || !aaaa.Fresh || aaaa.Remaining != 230*time.Second || len(aaaa.Answer) != 0 {
		t.Errorf("AAAA info = %+v, want fresh nodata with 3m50s left", aaaa)
	}
	if s := c.Stats(); s.Hits+s.Misses+s.StaleHits != 0 {
		t.Errorf("Inspect counted lookups: %+v", s)
	}

}

// TestInspectKeepsRecency: looking at the oldest entry must not save it
// from eviction.
func TestInspectKeepsRecency(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 2})
	oldest, newer := keyA("oldest.example."), keyA("newer.example.")
	mustSet(t, c, oldest, aReply(t, "oldest.example.", 60, "192.0.2.1"))
	mustSet(t, c, newer, aReply(t, "newer.example.", 60, "192.0.2.2"))
	if infos := c.Inspect("oldest.example."); len(infos) != 1 {
		t.Fatalf("Inspect = %+v, want one entry", infos)
	}
	mustSet(t, c, keyA("new.example."), aReply(t, "new.example.", 60, "192.0.2.3"))
	if infos := c.Inspect("oldest.example."); len(infos) != 0 {
		t.Errorf("oldest entry survived eviction after Inspect: %+v", infos)
	}
	if infos := c.Inspect("newer.example."); len(infos) != 1 {
		t.Errorf("newer entry evicted instead of the oldest")
	}
}

// TestConcurrentUse runs Get, Set, MarkRefreshFailed and the operator calls
// together under -race, with callers mutating their results.
func TestConcurrentUse(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 8, MaxStaleAge: time.Minute})
	keys := make([]Key, 16)
	replies := make([]*dns.Msg, len(keys))
	for i := range keys {
		name := fmt.Sprintf("n%d.example.", i)
		keys[i] = keyA(name)
		replies[i] = aReply(t, name, 5, "192.0.2.1")
	}
	const workers, rounds = 8, 500
	var wg sync.WaitGroup
	var gets [workers]int
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				k := keys[(w+i)%len(keys)]
				switch i % 5 {
				case 0:
					dnstest.SetMsg(c, k, replies[(w+i)%len(keys)])
				case 1, 2:
					gets[w]++
					if r, ok := c.Get(k); ok {
						r.Msg.Answer[0].Header().Ttl = 9999
						r.Msg.Id = uint16(i)
						_ = r.RefreshFailedAt
					}
				case 3:
					c.MarkRefreshFailed(k, clock.Now())
				case 4:
					if w == 0 {
						clock.Advance(time.Second)
					}
					_ = c.Inspect(k.Name)
					_ = c.Stats()
					if i%50 == 4 {
						c.RemoveName(k.Name)
					}
				}
			}
		}()
	}
	wg.Wait()

	total := 0
	for _, n := range gets {
		total += n
	}
	s := c.Stats()
	if got := s.Hits + s.Misses + s.StaleHits; got != uint64(total) {
		t.Errorf("hits+misses+stale = %d, want %d Gets", got, total)
	}
	if c.Len() > c.Capacity() {
		t.Errorf("Len %d over capacity %d", c.Len(), c.Capacity())
	}
	for _, k := range keys {
		if r, ok := c.Get(k); ok && r.Msg.Answer[0].Header().Ttl > 5 {
			t.Errorf("%v: TTL %d, a caller's mutation leaked into the cache", k, r.Msg.Answer[0].Header().Ttl)
		}
	}
}

// A zone is its own name and every name below it, on label boundaries:
// example.com. does not take notexample.com.
func TestInspectAndRemoveZone(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 10})
	for _, name := range []string{"b.example.com.", "example.com.", "a.b.example.com.", "notexample.com.", "other.org."} {
		mustSet(t, c, keyA(name), aReply(t, name, 300, "192.0.2.1"))
	}
	var names []string
	for _, info := range c.InspectZone("Example.COM") {
		names = append(names, info.Key.Name)
	}
	if got := strings.Join(names, " "); got != "a.b.example.com. b.example.com. example.com." {
		t.Errorf("InspectZone(example.com) = %s", got)
	}
	if got := len(c.InspectZone(".")); got != 5 {
		t.Errorf("InspectZone(.) = %d entries, want 5", got)
	}
	if got := c.RemoveZone("b.example.com"); got != 2 {
		t.Errorf("RemoveZone(b.example.com) = %d, want 2", got)
	}
	if got := c.RemoveZone("example.com."); got != 1 || c.Len() != 2 {
		t.Errorf("RemoveZone(example.com) = %d, Len %d; want 1 and 2", got, c.Len())
	}
}
