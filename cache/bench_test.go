package cache

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// The benchmarks of issue 6: what one cache hit costs. `make bench` runs them
// with -benchmem; the target is 0 allocations per hit.

// benchCache returns a cache holding n A answers for b<i>.bench.test.
func benchCache(b *testing.B, n int) (*Cache, []Key) {
	b.Helper()
	c, err := New(Config{Capacity: n, MaxStaleAge: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]Key, n)
	for i := range n {
		name := fmt.Sprintf("b%d.bench.test.", i)
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		m.Response = true
		m.Answer = []dns.RR{&dns.A{
			Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 3600},
			A:   net.IPv4(192, 0, 2, byte(i)),
		}}
		keys[i] = NewKey(name, dns.TypeA, dns.ClassINET, false, false)
		if ok, reason := dnstest.SetMsg(c, keys[i], m); !ok {
			b.Fatalf("Set %s: %s", name, reason)
		}
	}
	return c, keys
}

// BenchmarkGetHit is one Get of a warm key, as ServeDNS does it on a hit.
func BenchmarkGetHit(b *testing.B) {
	c, keys := benchCache(b, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := c.Get(keys[0]); !ok {
			b.Fatal("miss")
		}
	}
}

// BenchmarkGetHitParallel spreads Gets of 10,000 warm keys over every P:
// the cost of the one cache lock when cores share it.
func BenchmarkGetHitParallel(b *testing.B) {
	c, keys := benchCache(b, 10000)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := c.Get(keys[i%len(keys)]); !ok {
				b.Fatal("miss")
			}
			i++
		}
	})
}

// BenchmarkNewKey is building the key of a lower-case question (no copy).
func BenchmarkNewKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = NewKey("b1.bench.test.", dns.TypeA, dns.ClassINET, false, false)
	}
}

// BenchmarkKeysOf is the walk behind Inspect and RemoveName in a cache of
// 100,000 entries. Most of it is the copy of the keys, made under the cache
// lock: queries wait that long while an operator inspects a name.
func BenchmarkKeysOf(b *testing.B) {
	c, _ := benchCache(b, 100000)
	b.ReportAllocs()
	for b.Loop() {
		if keys := c.keysOf("b1.bench.test."); len(keys) != 1 {
			b.Fatalf("keysOf found %d keys, want 1", len(keys))
		}
	}
}
