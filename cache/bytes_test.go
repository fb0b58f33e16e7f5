package cache

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// txtReply is a positive reply with TXT records of about size bytes in all,
// in 255-byte strings: a large answer such as issue 21's 64 KB ones.
func txtReply(t testing.TB, name string, size int) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeTXT)
	m.Response = true
	chunk := strings.Repeat("x", 255)
	for left := size; left > 0; left -= 4 * 256 {
		m.Answer = append(m.Answer, &dns.TXT{
			Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 300},
			Txt: []string{chunk, chunk, chunk, chunk},
		})
	}
	return m
}

func keyTXT(name string) Key { return NewKey(name, dns.TypeTXT, dns.ClassINET, false, false) }

// TestMaxBytesEvictsLeastRecentlyUsed: with room for far more entries than
// fit in MaxBytes, large answers push out the least recently used ones, the
// bytes never pass the bound, and every eviction is counted.
func TestMaxBytesEvictsLeastRecentlyUsed(t *testing.T) {
	const maxBytes = 100 << 10
	c, _ := newTestCache(t, Config{Capacity: 1000, MaxBytes: maxBytes})
	name := func(i int) string { return fmt.Sprintf("t%d.example.", i) }
	mustSet(t, c, keyTXT(name(0)), txtReply(t, name(0), 8<<10))
	for i := 1; i < 100; i++ {
		c.Get(keyTXT(name(0))) // kept in use: never the least recent
		mustSet(t, c, keyTXT(name(i)), txtReply(t, name(i), 8<<10))
		if b := c.Bytes(); b > maxBytes {
			t.Fatalf("after %d stores: %d bytes, bound %d", i+1, b, maxBytes)
		}
	}
	if _, ok := c.Get(keyTXT(name(0))); !ok {
		t.Error("the entry kept in use was evicted")
	}
	if _, ok := c.Get(keyTXT(name(99))); !ok {
		t.Error("the newest entry was evicted")
	}
	if _, ok := c.Get(keyTXT(name(1))); ok {
		t.Error("an old, unused entry is still there")
	}
	n := c.Len()
	if n < 10 || n > 13 { // 100 KiB / ~8.5 KiB an entry
		t.Errorf("%d entries of 8 KiB in %d bytes", n, maxBytes)
	}
	if got, want := c.Stats().Evictions, uint64(100-n); got != want {
		t.Errorf("evictions = %d, want %d", got, want)
	}
}

// TestEntryLargerThanTheBound: an answer that alone costs more than
// MaxBytes is refused, evicts nothing, and leaves an older entry of its key.
func TestEntryLargerThanTheBound(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 10, MaxBytes: 16 << 10})
	mustSet(t, c, keyA("a.example."), aReply(t, "a.example.", 60, "192.0.2.1"))
	k := keyTXT("big.example.")
	mustSet(t, c, k, txtReply(t, "big.example.", 1<<10))
	before := c.Bytes()
	if ok, reason := dnstest.SetMsg(c, k, txtReply(t, "big.example.", 20<<10)); ok || reason != reasonOverMaxBytes {
		t.Fatalf("Set of a 20 KiB answer under a 16 KiB bound = %v, %q", ok, reason)
	}
	if c.Len() != 2 || c.Bytes() != before {
		t.Errorf("after the refusal: %d entries, %d bytes; want 2, %d", c.Len(), c.Bytes(), before)
	}
	if r, ok := c.Get(k); !ok || len(r.Msg.Answer) != 1 {
		t.Errorf("the older entry of the key is gone: %v", r.Msg)
	}
}

// TestBytesFollowEveryWayOut: replacing, removing, flushing and dropping an
// entry too old to serve give its bytes back, so the count is what the
// entries cost and not what ever passed through.
func TestBytesFollowEveryWayOut(t *testing.T) {
	c, clock := newTestCache(t, Config{Capacity: 10})
	k := keyTXT("t.example.")
	mustSet(t, c, k, txtReply(t, "t.example.", 4<<10))
	one := c.Bytes()
	mustSet(t, c, k, txtReply(t, "t.example.", 1<<10))
	if b := c.Bytes(); b >= one || b <= EntryOverhead {
		t.Errorf("replaced by a smaller answer: %d bytes, before %d", b, one)
	}
	mustSet(t, c, keyA("a.example."), aReply(t, "a.example.", 1, "192.0.2.1"))
	clock.Advance(2e9) // a expired, and MaxStaleAge is 0: the next Get drops it
	if _, ok := c.Get(keyA("a.example.")); ok {
		t.Fatal("an expired entry answered without serve-stale")
	}
	c.Remove(k)
	if b := c.Bytes(); b != 0 {
		t.Errorf("empty cache: %d bytes", b)
	}
	for i := range 5 {
		mustSet(t, c, keyA(fmt.Sprintf("n%d.example.", i)), aReply(t, "x.example.", 60, "192.0.2.1"))
	}
	c.Flush()
	if b := c.Bytes(); b != 0 {
		t.Errorf("after Flush: %d bytes", b)
	}
}

// TestSetMaxBytes: a reload's lower bound applies at once, evicting the
// least recently used entries; 0 is the default; out of range is refused.
func TestSetMaxBytes(t *testing.T) {
	c, _ := newTestCache(t, Config{Capacity: 100})
	if got := c.MaxBytes(); got != DefaultMaxBytes {
		t.Errorf("MaxBytes 0 = %d, want DefaultMaxBytes", got)
	}
	for i := range 20 {
		mustSet(t, c, keyTXT(fmt.Sprintf("t%d.example.", i)), txtReply(t, "x.example.", 4<<10))
	}
	if err := c.SetMaxBytes(20 << 10); err != nil {
		t.Fatal(err)
	}
	if c.Bytes() > 20<<10 || c.Len() != 4 {
		t.Errorf("after lowering to 20 KiB: %d entries, %d bytes", c.Len(), c.Bytes())
	}
	if _, ok := c.Get(keyTXT("t19.example.")); !ok {
		t.Error("the most recent entry went")
	}
	for _, n := range []int64{-1, MaxBytesLimit + 1} {
		if err := c.SetMaxBytes(n); err == nil {
			t.Errorf("SetMaxBytes(%d) accepted", n)
		}
	}
	if _, err := New(Config{Capacity: 1, MaxBytes: MaxBytesLimit + 1}); err == nil {
		t.Error("New accepted MaxBytes over MaxBytesLimit")
	}
}

// TestLoadKeepsMaxBytes: a snapshot holding more bytes than the loading
// cache's bound (written by a towerd with a larger one, or forged) loads
// only its most recent entries up to the bound.
func TestLoadKeepsMaxBytes(t *testing.T) {
	src, _ := newTestCache(t, Config{Capacity: 100, MaxStaleAge: persistConfig.MaxStaleAge})
	for i := range 50 {
		name := fmt.Sprintf("t%d.example.", i)
		mustSet(t, src, keyTXT(name), txtReply(t, name, 4<<10))
	}
	dst, _ := newTestCache(t, Config{Capacity: 100, MaxBytes: 40 << 10, MaxStaleAge: persistConfig.MaxStaleAge})
	stats, err := dst.Load(bytes.NewReader(dump(t, src)))
	if err != nil {
		t.Fatal(err)
	}
	if dst.Bytes() > 40<<10 || stats.Loaded != dst.Len() || stats.Loaded+stats.Skipped != 50 {
		t.Errorf("loaded %d, skipped %d: %d entries, %d bytes (bound %d)", stats.Loaded, stats.Skipped, dst.Len(), dst.Bytes(), 40<<10)
	}
	if _, ok := dst.Get(keyTXT("t49.example.")); !ok {
		t.Error("the most recent entry of the snapshot was not loaded")
	}
}

// TestEntrySizeCoversTheHeap: what an entry is counted at is no less than
// the live heap it takes, for one-address answers and large ones alike, and
// not much more, so MaxBytes bounds the heap the cache holds (what RSS
// adds on top is the garbage collector's headroom: docs/security.md).
func TestEntrySizeCoversTheHeap(t *testing.T) {
	for _, tt := range []struct {
		name    string
		n, size int // entries; TXT bytes, 0 for one address
	}{{"one address", 20000, 0}, {"1 KiB TXT", 5000, 1 << 10}, {"60 KiB TXT", 200, 60 << 10}} {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestCache(t, Config{Capacity: tt.n, MaxBytes: MaxBytesLimit})
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i := range tt.n {
				name := fmt.Sprintf("n%d.bench.example.", i)
				if tt.size == 0 {
					mustSet(t, c, keyA(name), aReply(t, name, 3600, "192.0.2.1"))
				} else {
					mustSet(t, c, keyTXT(name), txtReply(t, name, tt.size))
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(tt.n)
			counted := float64(c.Bytes()) / float64(tt.n)
			t.Logf("%s: %.0f heap bytes an entry, counted %.0f", tt.name, heap, counted)
			if heap > counted || counted > 1.25*heap+64 {
				t.Errorf("an entry takes %.0f heap bytes and is counted %.0f", heap, counted)
			}
			runtime.KeepAlive(c)
		})
	}
}
