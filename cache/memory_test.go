package cache

import (
	"fmt"
	"runtime"
	"testing"
	"unsafe"
)

// The memory tests of issue 6: what one cached entry costs on the heap.

// heapBytesPerEntry fills a new cache with n one-address entries, as the
// memory scenario of `make bench` does over DNS, and returns the live heap
// it grew by, per entry. The key's name is made in the loop, as a query's
// would be, and counts: the cache keeps it.
func heapBytesPerEntry(tb testing.TB, n int) float64 {
	tb.Helper()
	c, _ := newTestCache(tb, Config{Capacity: n})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		name := fmt.Sprintf("n%d.bench.example.", i)
		mustSet(tb, c, keyA(name), aReply(tb, name, 3600, "192.0.2.1"))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if c.Len() != n {
		tb.Fatalf("cache holds %d entries, want %d", c.Len(), n)
	}
	runtime.KeepAlive(c)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

// TestHeapBytesPerEntry keeps an entry's cost from creeping back. On amd64
// with Go 1.26, 20,000 entries take 312 to 314 bytes each, from run to run
// (with or without -race): the simplelru entry (96, its size class) and map
// slot, the name (24), the item (64) and the packed reply with its TTL
// offsets (64). The bound leaves room for a runtime's map to grow
// differently, but not for a name index again (+102 B at this count) or a
// second slice per entry (+48 B); the size check catches a stored time kept
// as a time.Time (+16 B). No other test runs meanwhile: none in this
// package calls t.Parallel.
func TestHeapBytesPerEntry(t *testing.T) {
	// The item is one per entry: it must stay in the 64-byte size class.
	if size := unsafe.Sizeof(item{}); size > 64 {
		t.Errorf("item is %d bytes, want at most 64", size)
	}
	const entries, limit = 20000, 350
	got := heapBytesPerEntry(t, entries)
	t.Logf("%d entries: %.1f heap bytes each", entries, got)
	if got >= limit {
		t.Errorf("%d entries take %.0f heap bytes each, want < %d", entries, got, limit)
	}
}

// BenchmarkHeapBytesPerEntry reports the heap bytes per entry of a cache of
// 100,000 entries (heap-B/entry), the count `make bench` fills towerd with
// to compare its RSS with unbound's.
func BenchmarkHeapBytesPerEntry(b *testing.B) {
	var perEntry float64
	for b.Loop() {
		perEntry = heapBytesPerEntry(b, 100000)
	}
	b.ReportMetric(perEntry, "heap-B/entry")
}
