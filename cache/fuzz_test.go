package cache

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/towerd/towerd/test/dnstest"
)

// The cache's wire handling is fuzzed at its two doors: replies from an
// upstream (anything a server on the network may send) and snapshot files
// (anything a disk may hold). Neither may panic, and whatever gets in must
// come out again as a message that packs. `make fuzz` runs both for a bounded
// time; the seeds are in testdata/fuzz and below.

// fuzzConfig keeps expired entries, so every stored reply stays servable.
var fuzzConfig = Config{Capacity: 8, MaxStaleAge: 24 * time.Hour}

// fuzzLoadConfig adds a MaxTTL that Load must hold every entry to.
var fuzzLoadConfig = Config{Capacity: 8, MaxTTL: time.Hour, MaxStaleAge: 24 * time.Hour}

func seedReplies(f *testing.F) [][]byte {
	f.Helper()
	var out [][]byte
	add := func(m *dns.Msg) {
		wire, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, wire)
	}
	add(aReply(f, "www.example.com.", 300, "192.0.2.1"))
	add(aReply(f, "zero.service.consul.", 0, "10.0.0.1"))
	add(reply(f, dns.RcodeSuccess, sections{ns: []string{soa(60, 30)}}))
	add(reply(f, dns.RcodeNameError, sections{ns: []string{soa(60, 30)}}))
	tc := aReply(f, "big.example.", 60, "192.0.2.9")
	tc.Truncated = true
	add(tc)
	edns := reply(f, dns.RcodeSuccess, sections{
		answer: []string{"www.example.com. 60 IN CNAME a.example.com.", "a.example.com. 30 IN A 192.0.2.3"},
		extra:  []string{"a.example.com. 30 IN AAAA 2001:db8::3"},
	})
	edns.SetEdns0(1232, true)
	add(edns)
	return out
}

// FuzzCacheSet feeds arbitrary upstream replies through Set, Get, Inspect and
// a Dump/Load round trip.
func FuzzCacheSet(f *testing.F) {
	for _, wire := range seedReplies(f) {
		f.Add(wire)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		m := new(dns.Msg)
		if m.Unpack(wire) != nil {
			return // the upstream transport drops what does not parse
		}
		k := keyA("fuzz.example.")
		if len(m.Question) == 1 {
			q := m.Question[0]
			k = NewKey(q.Name, q.Qtype, q.Qclass, false, m.CheckingDisabled)
		}
		c, clock := newTestCache(t, fuzzConfig)
		stored, _ := dnstest.SetMsg(c, k, m)
		r, ok := c.Get(k)
		if ok != stored {
			t.Fatalf("Set stored %v but Get found %v", stored, ok)
		}
		if !stored {
			return
		}
		if _, err := r.Msg.Pack(); err != nil {
			t.Fatalf("a cached answer does not pack: %v", err)
		}
		// The wire hit path must give the records Get gives.
		fast, _, fastOK := wireReply(t, c, k, k.Name, dns.MaxMsgSize)
		if fastOK != r.Fresh {
			t.Fatalf("AppendFresh served %v for an entry fresh %v", fastOK, r.Fresh)
		}
		if fastOK && (!sameRecords(fast.Answer, r.Msg.Answer) || !sameRecords(fast.Ns, r.Msg.Ns) ||
			!sameRecords(fast.Extra, r.Msg.Extra)) {
			t.Fatalf("AppendFresh records\n%v\ndiffer from Get's\n%v", fast, r.Msg)
		}
		c.Inspect(k.Name)
		clock.Advance(time.Hour) // stale or fresh, still within the stale age

		var buf bytes.Buffer
		if n, err := c.Dump(&buf); err != nil || n != 1 {
			t.Fatalf("Dump = %d, %v; want 1 entry", n, err)
		}
		loaded, _ := newTestCache(t, fuzzConfig)
		if stats, err := loaded.Load(&buf); err != nil || stats.Loaded != 1 {
			t.Fatalf("Load of a fresh Dump = %+v, %v; want 1 entry", stats, err)
		}
		again, ok := loaded.Get(k)
		if !ok || again.TTL != r.TTL || !again.Stored.Equal(r.Stored) {
			t.Fatalf("reloaded entry: found %v, TTL %v, stored %v; want TTL %v, stored %v",
				ok, again.TTL, again.Stored, r.TTL, r.Stored)
		}
	})
}

// FuzzCacheLoad feeds arbitrary bytes to Load. With seal set the bytes are
// wrapped in a valid header and checksum first, so the fuzzer reaches the
// entry decoder instead of stopping at the checksum every time. A snapshot
// is either rejected with ErrBadSnapshot, leaving the cache empty, or it
// loads and the cache then works: every entry dumps and loads again.
func FuzzCacheLoad(f *testing.F) {
	src, _ := newTestCache(f, fuzzConfig)
	for i, wire := range seedReplies(f) {
		m := new(dns.Msg)
		if err := m.Unpack(wire); err != nil {
			f.Fatal(err)
		}
		dnstest.SetMsg(src, NewKey(m.Question[0].Name, uint16(i+1), dns.ClassINET, i%2 == 0, false), m)
	}
	var buf bytes.Buffer
	if _, err := src.Dump(&buf); err != nil {
		f.Fatal(err)
	}
	good := buf.Bytes()
	f.Add(good, false)
	f.Add(good[snapshotHeaderLen:len(good)-4], true) // the entries alone, sealed by the target
	f.Add(good[:len(good)/2], false)
	f.Add([]byte{}, true)

	f.Fuzz(func(t *testing.T, data []byte, seal bool) {
		if seal {
			// The count is the body's first byte: small, and the fuzzer
			// can change it.
			var count uint32
			if len(data) > 0 {
				count = uint32(data[0])
			}
			data = sealSnapshot(count, data[min(1, len(data)):])
		}
		c, clock := newTestCache(t, fuzzLoadConfig)
		stats, err := c.Load(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("Load error %v does not wrap ErrBadSnapshot", err)
			}
			if c.Len() != 0 {
				t.Fatalf("a rejected snapshot left %d entries", c.Len())
			}
			return
		}
		if stats.Loaded != c.Len() {
			t.Fatalf("Load says %d loaded, the cache holds %d", stats.Loaded, c.Len())
		}
		// Issue 13: what loads answers its own key, lives no longer than
		// today's MaxTTL and was not stored in the future.
		for _, k := range c.lru.Keys() {
			r, ok := c.Get(k)
			if !ok {
				continue // past the stale age by now
			}
			q := r.Msg.Question
			if len(q) != 1 || canonicalName(q[0].Name) != k.Name || q[0].Qtype != k.Type || q[0].Qclass != k.Class {
				t.Fatalf("entry %s answers %v", k, q)
			}
			if r.TTL > fuzzLoadConfig.MaxTTL || r.Stored.After(clock.Now()) {
				t.Fatalf("entry %s: TTL %v (max %v), stored %v (now %v)", k, r.TTL, fuzzLoadConfig.MaxTTL, r.Stored, clock.Now())
			}
		}
		var out bytes.Buffer
		n, err := c.Dump(&out)
		if err != nil || n != c.Len() {
			t.Fatalf("Dump after Load = %d, %v; want %d entries", n, err, c.Len())
		}
		again, _ := newTestCache(t, fuzzLoadConfig)
		if stats, err := again.Load(&out); err != nil || stats.Loaded != n {
			t.Fatalf("reloading = %+v, %v; want %d entries", stats, err, n)
		}
	})
}
